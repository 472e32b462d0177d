package resource

import (
	"fmt"
	"sort"
	"sync"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/gpu"
)

// Options sizes the advertised resources.
type Options struct {
	SplitCount     int
	MemoryUnit     uint64
	ReservedMemory uint64
	// MIG advertises MIG devices as tessera.io/mig-<profile> ("mixed").
	MIG bool
}

// Device is one advertised device ID.
type Device struct {
	ID  ID
	Key string // ID.String(), cached
}

// Manager holds the advertised devices of every resource and their health.
// It is safe for concurrent use. The GPU set is fixed at start; the MIG
// layout of a GPU may change (UpdateMIG).
type Manager struct {
	opts  Options
	order []string // GPU UUIDs by index

	mu        sync.RWMutex
	gpus      map[string]*gpu.GPU // replaced, never mutated, on a MIG change
	devices   map[string][]Device // resource → IDs in advertising order
	byKey     map[string]map[string]ID
	retired   map[string]map[string]bool // resource → IDs gone from the hardware, still advertised Unhealthy
	unhealthy map[string]string          // GPU UUID → reason
	watchers  map[string][]chan struct{}
}

// NewManager builds the resources for gpus.
func NewManager(gpus []gpu.GPU, opts Options) (*Manager, error) {
	if opts.SplitCount < 1 || opts.MemoryUnit == 0 {
		return nil, fmt.Errorf("resource manager: splitCount and memoryUnit must be positive")
	}
	m := &Manager{opts: opts, gpus: map[string]*gpu.GPU{}, retired: map[string]map[string]bool{},
		unhealthy: map[string]string{}, watchers: map[string][]chan struct{}{}}
	for i := range gpus {
		g := gpus[i]
		m.gpus[g.UUID] = &g
		m.order = append(m.order, g.UUID)
	}
	set := m.deviceSet(m.gpus)
	m.devices, m.byKey = set.devices, set.byKey
	return m, nil
}

// deviceSet is the advertised devices of every resource.
type deviceSet struct {
	devices map[string][]Device
	byKey   map[string]map[string]ID
}

// deviceSet lists the devices gpus advertise, GPUs in index order.
func (m *Manager) deviceSet(gpus map[string]*gpu.GPU) deviceSet {
	s := deviceSet{devices: map[string][]Device{}, byKey: map[string]map[string]ID{}}
	for _, u := range m.order {
		m.addGPU(s, gpus[u])
	}
	return s
}

func (s deviceSet) add(resource string, d Device) {
	s.devices[resource] = append(s.devices[resource], d)
	if s.byKey[resource] == nil {
		s.byKey[resource] = map[string]ID{}
	}
	s.byKey[resource][d.Key] = d.ID
}

func (s deviceSet) addID(resource string, id ID) { s.add(resource, Device{ID: id, Key: id.String()}) }

func (m *Manager) addGPU(s deviceSet, g *gpu.GPU) {
	if g.MIGEnabled {
		if !m.opts.MIG {
			return
		}
		for _, inst := range g.MIG {
			s.addID(MIGResource(inst.Profile), ID{GPU: g.UUID, Kind: KindMIG, MIG: inst.UUID})
		}
		return
	}
	for n := 0; n < m.opts.SplitCount; n++ {
		s.addID(GPU, ID{GPU: g.UUID, Kind: KindSlot, N: n})
	}
	for n := 0; n < m.MemoryUnits(g); n++ {
		s.addID(Memory, ID{GPU: g.UUID, Kind: KindMem, N: n})
	}
	for n := 0; n < 100; n++ {
		s.addID(Core, ID{GPU: g.UUID, Kind: KindCore, N: n})
	}
}

// MemoryUnits is the number of gpu-mem IDs g advertises:
// floor((memory - reserved) / unit).
func (m *Manager) MemoryUnits(g *gpu.GPU) int {
	if g.MemoryBytes <= m.opts.ReservedMemory {
		return 0
	}
	return int((g.MemoryBytes - m.opts.ReservedMemory) / m.opts.MemoryUnit)
}

// Capacity is the number of IDs resource advertises on GPU uuid.
func (m *Manager) Capacity(resource, uuid string) int {
	g := m.GPU(uuid)
	if g == nil || g.MIGEnabled {
		return 0
	}
	switch resource {
	case GPU:
		return m.opts.SplitCount
	case Memory:
		return m.MemoryUnits(g)
	case Core:
		return 100
	}
	return 0
}

// Options returns the sizing options.
func (m *Manager) Options() Options { return m.opts }

// Resources lists the resource names that have at least one device, sorted.
func (m *Manager) Resources() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []string
	for r, devs := range m.devices {
		if len(devs) > 0 {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// GPU returns the GPU with uuid, or nil. The GPU must not be modified.
func (m *Manager) GPU(uuid string) *gpu.GPU {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gpus[uuid]
}

// GPUs returns all GPUs in index order.
func (m *Manager) GPUs() []*gpu.GPU {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*gpu.GPU, 0, len(m.order))
	for _, u := range m.order {
		out = append(out, m.gpus[u])
	}
	return out
}

// Lookup parses and checks that key is a device of resource.
func (m *Manager) Lookup(resource, key string) (ID, error) {
	m.mu.RLock()
	id, ok := m.byKey[resource][key]
	m.mu.RUnlock()
	if !ok {
		return ID{}, notADevice(resource, key)
	}
	return id, nil
}

func notADevice(resource, key string) error {
	return fmt.Errorf("device %q is not a %s device of this node", key, resource)
}

// Known returns the IDs among keys that are devices of resource, in order,
// skipping the others (one lock for a whole kubelet request).
func (m *Manager) Known(resource string, keys []string) []ID {
	m.mu.RLock()
	defer m.mu.RUnlock()
	byKey := m.byKey[resource]
	out := make([]ID, 0, len(keys))
	for _, k := range keys {
		if id, ok := byKey[k]; ok {
			out = append(out, id)
		}
	}
	return out
}

// Devices returns the resource's devices as kubelet sees them, health included.
func (m *Manager) Devices(resource string) []*pluginapi.Device {
	m.mu.RLock()
	defer m.mu.RUnlock()
	devs := m.devices[resource]
	out := make([]*pluginapi.Device, 0, len(devs))
	for _, d := range devs {
		health := pluginapi.Healthy
		if _, bad := m.unhealthy[d.ID.GPU]; bad || m.retired[resource][d.Key] {
			health = pluginapi.Unhealthy
		}
		pd := &pluginapi.Device{ID: d.Key, Health: health}
		if g := m.gpus[d.ID.GPU]; g != nil && g.NUMANode >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.NUMANode)}}}
		}
		out = append(out, pd)
	}
	return out
}

// IDs returns the parsed IDs of a resource in advertising order.
func (m *Manager) IDs(resource string) []Device {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.devices[resource]
}

// SetHealth marks a GPU healthy or unhealthy and wakes the watchers of every
// resource when that changed anything.
func (m *Manager) SetHealth(uuid string, healthy bool, reason string) bool {
	m.mu.Lock()
	_, wasBad := m.unhealthy[uuid]
	changed := wasBad == healthy
	if healthy {
		delete(m.unhealthy, uuid)
	} else {
		m.unhealthy[uuid] = reason
	}
	var wake []chan struct{}
	if changed {
		wake = m.allWatchers()
	}
	m.mu.Unlock()
	notify(wake)
	return changed
}

// allWatchers returns every watcher channel; m.mu must be held.
func (m *Manager) allWatchers() []chan struct{} {
	var out []chan struct{}
	for _, ws := range m.watchers {
		out = append(out, ws...)
	}
	return out
}

func notify(chans []chan struct{}) {
	for _, w := range chans {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Healthy reports whether a GPU is healthy.
func (m *Manager) Healthy(uuid string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, bad := m.unhealthy[uuid]
	return !bad
}

// Watch returns a channel that receives a value whenever the resource's
// device list changes; cancel stops it.
func (m *Manager) Watch(resource string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.watchers[resource] = append(m.watchers[resource], ch)
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		ws := m.watchers[resource]
		for i, w := range ws {
			if w == ch {
				m.watchers[resource] = append(ws[:i], ws[i+1:]...)
				break
			}
		}
	}
}
