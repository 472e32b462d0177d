package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// labelSet is one series' label pairs, sorted by name as the registry wants
// them, built once per scrape and shared by every family that carries the
// same labels (seven per container and GPU): building them per sample was a
// seventh of a scrape.
type labelSet []*dto.LabelPair

func newLabelSet(names, values []string) labelSet {
	ls := make(labelSet, len(names))
	for i := range names {
		ls[i] = &dto.LabelPair{Name: proto.String(names[i]), Value: proto.String(values[i])}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].GetName() < ls[j].GetName() })
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
