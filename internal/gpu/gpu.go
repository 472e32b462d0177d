// Package gpu discovers the node's physical GPUs through NVML: identity,
// memory, SM count, NUMA node, NVLink peers and MIG state.
package gpu

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"
	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/mig"
)

// GPU is one physical GPU as the device plugin sees it.
type GPU struct {
	UUID        string
	Index       int
	Minor       int
	Model       string
	MemoryBytes uint64
	SMCount     int
	// NUMANode is -1 when unknown.
	NUMANode    int
	NVLinkPeers []string
	MIGEnabled  bool
	MIG         []mig.Instance
}

// DevicePath is the GPU's device node on the host and in containers.
func (g *GPU) DevicePath() string { return fmt.Sprintf("/dev/nvidia%d", g.Minor) }

// MIGDevice returns the MIG device with uuid on this GPU.
func (g *GPU) MIGDevice(uuid string) (mig.Instance, bool) {
	for _, m := range g.MIG {
		if m.UUID == uuid {
			return m, true
		}
	}
	return mig.Instance{}, false
}

// Discover enumerates all GPUs. NVML must already be initialised.
func Discover(lib nvml.Interface, log *slog.Logger) ([]GPU, error) {
	devlib := device.New(lib)
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %v", ret)
	}
	gpus := make([]GPU, 0, count)
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %v", i, ret)
		}
		g, err := describe(devlib, dev, i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		gpus = append(gpus, g)
	}
	addNVLinkPeers(lib, gpus, log)
	return gpus, nil
}

func describe(devlib device.Interface, dev nvml.Device, index int) (GPU, error) {
	g := GPU{Index: index, NUMANode: -1}
	var ret nvml.Return
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("UUID: %v", ret)
	}
	if g.Minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("minor number: %v", ret)
	}
	if g.Model, ret = dev.GetName(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("name: %v", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("memory info: %v", ret)
	}
	g.MemoryBytes = mem.Total
	// SM count and NUMA node are informational: a driver that cannot
	// report them must not keep the GPU from being advertised.
	if attrs, ret := dev.GetAttributes(); ret == nvml.SUCCESS {
		g.SMCount = int(attrs.MultiprocessorCount)
	}
	if numa, ret := dev.GetNumaNodeId(); ret == nvml.SUCCESS {
		g.NUMANode = numa
	}
	enabled, err := mig.Enabled(devlib, dev)
	if err != nil {
		return g, fmt.Errorf("MIG mode: %w", err)
	}
	g.MIGEnabled = enabled
	if enabled {
		if g.MIG, err = mig.Instances(devlib, dev); err != nil {
			return g, err
		}
	}
	return g, nil
}

// addNVLinkPeers fills NVLinkPeers from go-gpuallocator's link discovery.
// Failure only loses topology hints, so it is logged, not fatal.
func addNVLinkPeers(lib nvml.Interface, gpus []GPU, log *slog.Logger) {
	devs, err := gpuallocator.NewDevices(gpuallocator.WithNvmlLib(lib))
	if err != nil {
		log.Warn("NVLink topology unavailable; multi-GPU placement ignores links", "err", err)
		return
	}
	byUUID := map[string]*GPU{}
	for i := range gpus {
		byUUID[gpus[i].UUID] = &gpus[i]
	}
	for _, d := range devs {
		g := byUUID[d.UUID]
		if g == nil {
			continue
		}
		for _, links := range d.Links {
			for _, l := range links {
				if isNVLink(l) && !contains(g.NVLinkPeers, l.GPU.UUID) {
					g.NVLinkPeers = append(g.NVLinkPeers, l.GPU.UUID)
				}
			}
		}
		sort.Strings(g.NVLinkPeers)
	}
}

// isNVLink reads the link kind from its name: go-gpuallocator keeps the
// link type in an internal package, and every NVLink kind is "<N>NVLINKLink(s)".
func isNVLink(l gpuallocator.P2PLink) bool {
	return strings.Contains(l.Type.String(), "NVLINK")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
