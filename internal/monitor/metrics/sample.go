package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// labelSet is one series' label pairs, sorted by name as the registry wants
// them, built once per scrape and shared by every family that carries the
// same labels (seven per container and GPU): building them per sample was a
// seventh of a scrape.
type labelSet []*dto.LabelPair

func newLabelSet(names, values []string) labelSet {
	// One allocation each for the pairs, their strings and the slice, and an
	// insertion sort of a handful of names: a label set per container and
	// GPU made twelve small allocations and a reflective sort.Slice each.
	n := len(names)
	pairs := make([]dto.LabelPair, n)
	strs := make([]string, 2*n)
	ls := make(labelSet, n)
	for i := range n {
		strs[2*i], strs[2*i+1] = names[i], values[i]
		pairs[i].Name, pairs[i].Value = &strs[2*i], &strs[2*i+1]
		ls[i] = &pairs[i]
		for j := i; j > 0 && *ls[j].Name < *ls[j-1].Name; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
	return ls
}

// sample is a gauge or counter value with a shared label set. Its labels
// must match its Desc's variable labels (the registry checks).
type sample struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	value  float64
	labels labelSet
}

func (s sample) Desc() *prometheus.Desc { return s.desc }

func (s sample) Write(m *dto.Metric) error {
	m.Label = s.labels
	v := s.value
	if s.kind == prometheus.CounterValue {
		m.Counter = &dto.Counter{Value: &v}
	} else {
		m.Gauge = &dto.Gauge{Value: &v}
	}
	return nil
}
