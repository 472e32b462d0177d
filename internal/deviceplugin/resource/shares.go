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
// GPU index. Unknown IDs are an error: the plugin never guesses. Retired
// devices (vanished, still held) decode: a running container's files can be
// restored.
func (m *Manager) Shares(resource string, keys []string) ([]Share, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.shares(resource, keys)
}

// AllocatableShares is Shares for a new allocation: a retired device is
// refused as gone. Both checks are made under one read lock; checked apart,
// a rediscovery pass could drop a retired device in between, and the
// allocation would go ahead for a MIG instance that no longer exists.
func (m *Manager) AllocatableShares(resource string, keys []string) ([]Share, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.retiredLocked(resource, keys); err != nil {
		return nil, err
	}
	return m.shares(resource, keys)
}

// shares decodes keys; m.mu must be held.
func (m *Manager) shares(resource string, keys []string) ([]Share, error) {
	byGPU := map[string]*Share{}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			return nil, fmt.Errorf("device %q listed twice", k)
		}
		seen[k] = true
		id, ok := m.byKey[resource][k]
		if !ok {
			return nil, notADevice(resource, k)
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
	gpus := m.gpus
	sort.Slice(out, func(i, j int) bool { return gpus[out[i].GPU].Index < gpus[out[j].GPU].Index })
	return out, nil
}
