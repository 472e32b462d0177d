package resource

import (
	"fmt"
	"slices"

	"github.com/tessera-gpu/tessera/internal/gpu"
)

// UpdateMIG applies the MIG state (mode and instances) of a fresh discovery
// to the known GPUs and reports whether the advertised devices changed;
// watchers of every resource are woken then. GPUs that were not known at
// start are ignored (returned as unknown): a new GPU needs a restart.
//
// Devices are never dropped while a container may hold them: a device that
// vanished from the hardware is first kept and advertised Unhealthy
// (retired), so kubelet stops handing it out and sees the containers'
// devices fail; a later UpdateMIG drops it once held reports that no
// container holds it. A retired device that comes back is healthy again.
func (m *Manager) UpdateMIG(found []gpu.GPU, held func(resource, key string) bool) (changed bool, unknown []string) {
	m.mu.Lock()
	next := make(map[string]*gpu.GPU, len(m.gpus))
	for u, g := range m.gpus {
		next[u] = g
	}
	for i := range found {
		f := &found[i]
		old := m.gpus[f.UUID]
		if old == nil {
			unknown = append(unknown, f.UUID)
			continue
		}
		if old.MIGEnabled != f.MIGEnabled || !slices.Equal(old.MIG, f.MIG) {
			g := *old
			g.MIGEnabled, g.MIG = f.MIGEnabled, slices.Clone(f.MIG)
			next[f.UUID] = &g
			changed = true
		}
	}
	if !changed && !m.anyRetired() {
		m.mu.Unlock()
		return false, unknown
	}
	set := m.deviceSet(next)
	retired := map[string]map[string]bool{}
	for _, res := range sortedKeys(m.devices) {
		for _, d := range m.devices[res] {
			if _, still := set.byKey[res][d.Key]; still {
				continue
			}
			if m.retired[res][d.Key] && !held(res, d.Key) {
				changed = true // dropped
				continue
			}
			if !m.retired[res][d.Key] {
				changed = true // newly retired
			}
			set.add(res, d)
			if retired[res] == nil {
				retired[res] = map[string]bool{}
			}
			retired[res][d.Key] = true
		}
	}
	for res, keys := range m.retired {
		for k := range keys {
			if !retired[res][k] {
				if _, back := set.byKey[res][k]; back {
					changed = true
				}
			}
		}
	}
	m.gpus, m.devices, m.byKey, m.retired = next, set.devices, set.byKey, retired
	var wake []chan struct{}
	if changed {
		wake = m.allWatchers()
	}
	m.mu.Unlock()
	notify(wake)
	return changed, unknown
}

// anyRetired reports whether a device awaits dropping; m.mu must be held.
func (m *Manager) anyRetired() bool {
	for _, keys := range m.retired {
		if len(keys) > 0 {
			return true
		}
	}
	return false
}

// Retired returns an error naming the first of keys that vanished from
// the hardware (advertised Unhealthy until no container holds it).
func (m *Manager) Retired(resource string, keys []string) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.retiredLocked(resource, keys)
}

// retiredLocked is Retired with m.mu held.
func (m *Manager) retiredLocked(resource string, keys []string) error {
	for _, k := range keys {
		if m.retired[resource][k] {
			return fmt.Errorf("device %q no longer exists (MIG reconfigured)", k)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
