package gputest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func timeAfter(ms uint32) <-chan time.Time {
	if ms > 50 {
		ms = 50
	}
	return time.After(time.Duration(ms) * time.Millisecond)
}

// EnableMIG turns MIG on for GPU i and replaces its MIG layout with one
// full-size compute instance in a new GPU instance for each GPU-instance
// profile ID given (nvml.GPU_INSTANCE_PROFILE_*), as an operator running
// nvidia-smi mig would: existing instances are destroyed first, and new
// GPU instances get new IDs. It returns the MIG device UUIDs.
func (n *Node) EnableMIG(i int, giProfiles ...int) ([]string, error) {
	d := n.Device(i)
	d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	destroyMIG(d)
	var migs []nvml.Device
	var uuids []string
	for _, p := range giProfiles {
		m, uuid, err := n.createMIGDevice(d, p)
		if err != nil {
			return nil, err
		}
		migs = append(migs, m)
		uuids = append(uuids, uuid)
	}
	n.mu.Lock()
	n.migs[i] = migs
	n.mu.Unlock()
	return uuids, nil
}

// DisableMIG destroys GPU i's MIG instances and turns MIG off.
func (n *Node) DisableMIG(i int) {
	d := n.Device(i)
	destroyMIG(d)
	d.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	n.mu.Lock()
	delete(n.migs, i)
	n.mu.Unlock()
}

func destroyMIG(d *server.Device) {
	d.RLock()
	gis := slices.Collect(maps.Keys(d.GpuInstances))
	d.RUnlock()
	for _, gi := range gis {
		gi.RLock()
		cis := slices.Collect(maps.Keys(gi.ComputeInstances))
		gi.RUnlock()
		for _, ci := range cis {
			ci.Destroy()
		}
		gi.Destroy()
	}
}

// migDevice is the handle behind GetMigDeviceHandleByIndex of GPU i.
func (n *Node) migDevice(i, idx int) (nvml.Device, nvml.Return) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if idx < len(n.migs[i]) {
		return n.migs[i][idx], nvml.SUCCESS
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// migByUUID finds a live MIG device handle, as NVML's
// DeviceGetHandleByUUID does for MIG UUIDs.
func (n *Node) migByUUID(uuid string) nvml.Device {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ms := range n.migs {
		for _, m := range ms {
			if u, _ := m.GetUUID(); u == uuid {
				return m
			}
		}
	}
	return nil
}

func gpuInstanceByID(d *server.Device, id int) (nvml.GpuInstance, nvml.Return) {
	d.RLock()
	defer d.RUnlock()
	for gi := range d.GpuInstances {
		if int(gi.Info.Id) == id {
			return gi, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// WriteMIGMinors writes <procRoot>/driver/nvidia-caps/mig-minors the way
// the driver does: config, monitor, and an access capability for every
// possible GPU instance (0-14) and compute instance (0-7) of every GPU
// minor, whether it exists or not.
func (n *Node) WriteMIGMinors(procRoot string) error {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	next := 3
	for i := range n.Devices {
		minor := n.Device(i).Minor
		for gi := 0; gi < 15; gi++ {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", minor, gi, next)
			next++
			for ci := 0; ci < 8; ci++ {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", minor, gi, ci, next)
				next++
			}
		}
	}
	dir := filepath.Join(procRoot, "driver", "nvidia-caps")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "mig-minors"), []byte(b.String()), 0o444)
}

func (n *Node) createMIGDevice(d *server.Device, giProfile int) (nvml.Device, string, error) {
	giInfo, ret := d.GetGpuInstanceProfileInfo(giProfile)
	if ret != nvml.SUCCESS {
		return nil, "", fmt.Errorf("GPU instance profile %d: %v", giProfile, ret)
	}
	gi, ret := d.CreateGpuInstance(&giInfo)
	if ret != nvml.SUCCESS {
		return nil, "", fmt.Errorf("create GPU instance: %v", ret)
	}
	sgi := gi.(*server.GpuInstance)
	var ciInfo nvml.ComputeInstanceProfileInfo
	found := false
	for _, ci := range sgi.MIGProfiles.ComputeInstanceProfiles[giProfile] {
		if ci.SliceCount == giInfo.SliceCount {
			ciInfo, found = ci, true
		}
	}
	if !found {
		return nil, "", fmt.Errorf("no full-size compute instance profile for GPU instance profile %d", giProfile)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return nil, "", fmt.Errorf("create compute instance: %v", ret)
	}
	sgi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		sgi.RLock()
		defer sgi.RUnlock()
		for c := range sgi.ComputeInstances {
			if int(c.Info.Id) == id {
				return c, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	giID, ciID := int(sgi.Info.Id), int(ci.(*server.ComputeInstance).Info.Id)
	// GPU instance IDs are not reused on a GPU (the mock counts them up),
	// so the parent and the instance IDs name one MIG device, and the same
	// layout created again on the same node gets the same UUIDs.
	uuid := simulatedUUID("MIG-", fmt.Sprintf("%s/gi/%d/ci/%d", d.UUID, giID, ciID))
	mem := giInfo.MemorySizeMB
	m := &mock.Device{
		GetUUIDFunc:                            func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return d, nvml.SUCCESS },
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return giID, nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: mem << 20}, nvml.SUCCESS
		},
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{MultiprocessorCount: giInfo.MultiprocessorCount, GpuInstanceSliceCount: giInfo.SliceCount,
				ComputeInstanceSliceCount: ciInfo.SliceCount, MemorySizeMB: mem}, nvml.SUCCESS
		},
	}
	return m, uuid, nil
}
