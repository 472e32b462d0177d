// Package gpus is the monitor's view of the physical GPUs through NVML: their
// identity, memory, utilisation and the processes the driver says use them
// (host pids and the device memory each really holds), plus health and Xid
// counts fed by the device plugin's NVML event watcher.
package gpus

import (
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one physical GPU.
type Device struct {
	UUID   string
	Index  int
	Model  string
	handle nvml.Device
}

// Process is one process the driver lists on a GPU.
type Process struct {
	PID       uint32 // host pid namespace
	UsedBytes uint64
}

// Sample is a GPU's state at one moment.
type Sample struct {
	MemTotal, MemUsed uint64
	MemOK             bool
	UtilPct           uint32
	UtilOK            bool
	Processes         []Process
	ProcessesOK       bool
	// SMUtil is each process's share of the SMs (percent) since the previous
	// sample (NVML process utilisation), by host pid.
	SMUtil   map[uint32]uint32
	SMUtilOK bool
}

// Node holds the GPUs and their health.
type Node struct {
	lib  nvml.Interface
	devs []Device

	mu       sync.Mutex
	lastSeen map[string]uint64 // GPU → newest process utilisation timestamp read
	healthy  map[string]bool
	xids     map[string]map[uint64]uint64 // uuid → xid → count
}

// Open enumerates the GPUs (NVML must be initialised).
func Open(lib nvml.Interface) (*Node, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %v", ret)
	}
	node := &Node{lib: lib, healthy: map[string]bool{}, xids: map[string]map[uint64]uint64{}}
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %v", i, ret)
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d UUID: %v", i, ret)
		}
		model, _ := h.GetName()
		// Both become label values, which must be UTF-8.
		uuid, model = strings.ToValidUTF8(uuid, "?"), strings.ToValidUTF8(model, "?")
		node.devs = append(node.devs, Device{UUID: uuid, Index: i, Model: model, handle: h})
		node.healthy[uuid] = true
	}
	return node, nil
}

// Lib is the NVML binding the node was opened with.
func (n *Node) Lib() nvml.Interface { return n.lib }

// Devices lists the GPUs in index order.
func (n *Node) Devices() []Device { return n.devs }

// UUIDs lists the GPUs' UUIDs.
func (n *Node) UUIDs() []string {
	out := make([]string, len(n.devs))
	for i, d := range n.devs {
		out[i] = d.UUID
	}
	return out
}

// ByUUID finds a GPU.
func (n *Node) ByUUID(uuid string) (Device, bool) {
	for _, d := range n.devs {
		if d.UUID == uuid {
			return d, true
		}
	}
	return Device{}, false
}

// Sample reads one GPU. Each part is reported separately: a driver that cannot
// say its utilisation still reports memory.
func (n *Node) Sample(d Device) Sample {
	var s Sample
	if m, ret := d.handle.GetMemoryInfo(); ret == nvml.SUCCESS {
		s.MemTotal, s.MemUsed, s.MemOK = m.Total, m.Used, true
	}
	if u, ret := d.handle.GetUtilizationRates(); ret == nvml.SUCCESS {
		s.UtilPct, s.UtilOK = u.Gpu, true
	}
	if ps, ret := d.handle.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		s.ProcessesOK = true
		s.Processes = make([]Process, 0, len(ps))
		for _, p := range ps {
			s.Processes = append(s.Processes, Process{PID: p.Pid, UsedBytes: p.UsedGpuMemory})
		}
	}
	s.SMUtil, s.SMUtilOK = n.processUtilization(d)
	return s
}

// processUtilization reads the per-process SM utilisation since the previous
// read of this GPU. NOT_FOUND means no process ran: all zero, still valid.
func (n *Node) processUtilization(d Device) (map[uint32]uint32, bool) {
	n.mu.Lock()
	since := n.lastSeen[d.UUID]
	n.mu.Unlock()
	samples, ret := d.handle.GetProcessUtilization(since)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND:
		return map[uint32]uint32{}, true
	default:
		return nil, false
	}
	out := make(map[uint32]uint32, len(samples))
	newest := since
	for _, u := range samples {
		out[u.Pid] += u.SmUtil
		newest = max(newest, u.TimeStamp)
	}
	n.mu.Lock()
	if n.lastSeen == nil {
		n.lastSeen = map[string]uint64{}
	}
	n.lastSeen[d.UUID] = newest
	n.mu.Unlock()
	return out, true
}

// Processes lists the compute processes the driver sees on a GPU, with the
// device memory each holds. It reads nothing else (NVML's utilisation is
// computed between one caller's reads, which the scrape owns).
func (n *Node) Processes(d Device) ([]Process, error) {
	ps, ret := d.handle.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s running processes: %v", d.UUID, ret)
	}
	out := make([]Process, 0, len(ps))
	for _, p := range ps {
		out = append(out, Process{PID: p.Pid, UsedBytes: p.UsedGpuMemory})
	}
	return out, nil
}

// SetHealth records a health change (health.Target).
func (n *Node) SetHealth(uuid string, healthy bool, _ string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	changed := n.healthy[uuid] != healthy
	n.healthy[uuid] = healthy
	return changed
}

// Healthy says whether no critical event made the GPU unhealthy.
func (n *Node) Healthy(uuid string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.healthy[uuid]
}

// ObserveXid counts an Xid event; "" (no device named) counts on every GPU.
func (n *Node) ObserveXid(uuid string, xid uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	targets := []string{uuid}
	if uuid == "" {
		targets = n.UUIDs()
	}
	for _, u := range targets {
		if n.xids[u] == nil {
			n.xids[u] = map[uint64]uint64{}
		}
		n.xids[u][xid]++
	}
}

// Xids returns the counts of each Xid seen on a GPU.
func (n *Node) Xids(uuid string) map[uint64]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint64]uint64, len(n.xids[uuid]))
	for x, c := range n.xids[uuid] {
		out[x] = c
	}
	return out
}

// MemoryTotal is a GPU's memory (NVML), for the balloon controller's bound on what
// a GPU may be promised. It reads nothing else (Sample's per-process utilisation
// is relative to the previous read and belongs to the scrape).
func (n *Node) MemoryTotal(uuid string) (uint64, bool) {
	d, ok := n.ByUUID(uuid)
	if !ok {
		return 0, false
	}
	m, ret := d.handle.GetMemoryInfo()
	return m.Total, ret == nvml.SUCCESS
}
