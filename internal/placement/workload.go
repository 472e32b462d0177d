package placement

import (
	"sort"
)

// Class is one kind of pod in a workload: the fields fragmentation depends on,
// and how often it occurs.
type Class struct {
	CPUMilli int64
	GPUMilli int32 // per GPU; 0 for CPU-only pods
	NumGPU   int
	Spec     string // allowed models as the trace writes them; "" is any
	Models   uint64 // Spec resolved to cluster model ids
	AnyModel bool
	Freq     float64
	Count    int
}

// Workload is the target workload fragmentation is measured against: the
// most popular pod classes of a trace that together cover a share of its
// pods, with frequencies renormalised to sum to one.
type Workload struct {
	Classes []Class
}

// NewWorkload derives the target workload from the pods of a trace, keeping
// the most popular classes until they cover at least coverage (0..1) of the
// pods, as the FGD paper does with 0.95. Equally popular classes are ordered
// by their fields so the result does not depend on the pods' order.
func NewWorkload(c *Cluster, pods []Request, coverage float64) *Workload {
	type key struct {
		cpu   int64
		milli int32
		num   int
		spec  string
	}
	counts := map[key]int{}
	models := map[key][]string{}
	for i := range pods {
		p := &pods[i]
		k := key{p.CPUMilli, p.GPUMilli, p.NumGPU, specKey(p.Models)}
		if p.NumGPU == 0 {
			k.milli, k.spec = 0, ""
		}
		counts[k]++
		models[k] = p.Models
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		ka, kb := keys[a], keys[b]
		switch {
		case counts[ka] != counts[kb]:
			return counts[ka] > counts[kb]
		case ka.num != kb.num:
			return ka.num < kb.num
		case ka.milli != kb.milli:
			return ka.milli < kb.milli
		case ka.cpu != kb.cpu:
			return ka.cpu < kb.cpu
		}
		return ka.spec < kb.spec
	})
	w := &Workload{}
	covered, total := 0, len(pods)
	for _, k := range keys {
		if total > 0 && float64(covered) >= coverage*float64(total) {
			break
		}
		covered += counts[k]
		w.Classes = append(w.Classes, Class{
			CPUMilli: k.cpu, GPUMilli: k.milli, NumGPU: k.num, Spec: k.spec,
			Models: c.workloadModelMask(models[k]), AnyModel: k.spec == "", Count: counts[k],
		})
	}
	for i := range w.Classes {
		w.Classes[i].Freq = float64(w.Classes[i].Count) / float64(covered)
	}
	return w
}

// uniformWorkload stands in when no trace is given: every single-GPU share
// size from a tenth to a whole GPU, equally likely.
func uniformWorkload() *Workload {
	w := &Workload{}
	for m := int32(100); m <= 1000; m += 100 {
		w.Classes = append(w.Classes, Class{GPUMilli: m, NumGPU: 1, AnyModel: true, Freq: 0.1, Count: 1})
	}
	return w
}
