package resource

import (
	"fmt"
	"sort"
)

// Share is what a set of device IDs gives a container on one GPU.
type Share struct {
	GPU      string
	Slots    int
	MemBytes uint64
	CorePct  int
	MIG      []string
}

// Shares decodes device IDs of one resource into per-GPU shares, sorted by
// GPU index. Unknown IDs are an error: the plugin never guesses.
func (m *Manager) Shares(resource string, keys []string) ([]Share, error) {
	byGPU := map[string]*Share{}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			return nil, fmt.Errorf("device %q listed twice", k)
		}
		seen[k] = true
		id, err := m.Lookup(resource, k)
		if err != nil {
			return nil, err
		}
		s := byGPU[id.GPU]
		if s == nil {
			s = &Share{GPU: id.GPU}
			byGPU[id.GPU] = s
		}
		switch id.Kind {
		case KindSlot:
			s.Slots++
		case KindMem:
			s.MemBytes += m.opts.MemoryUnit
		case KindCore:
			s.CorePct++
		case KindMIG:
			s.MIG = append(s.MIG, id.MIG)
		}
	}
	out := make([]Share, 0, len(byGPU))
	for _, s := range byGPU {
		sort.Strings(s.MIG)
		out = append(out, *s)
	}
	m.mu.RLock()
	gpus := m.gpus
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return gpus[out[i].GPU].Index < gpus[out[j].GPU].Index })
	return out, nil
}
