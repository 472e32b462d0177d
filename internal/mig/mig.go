// Package mig lists the MIG devices configured on a GPU, with the profile
// name (e.g. "1g.18gb") that names the tessera.io/mig-<profile> resource.
// Profile naming is go-nvlib's, so names match nvidia-smi and NVIDIA's tools.
package mig

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Instance is one MIG device (a GPU instance plus a compute instance).
type Instance struct {
	UUID string
	// Parent is the UUID of the physical GPU.
	Parent    string
	Profile   string
	MemoryMiB uint64
	// GI and CI are the GPU- and compute-instance IDs on the parent.
	GI, CI int
}

// Enabled reports whether MIG mode is on for dev. GPUs without MIG support
// report false, not an error.
func Enabled(devlib device.Interface, dev nvml.Device) (bool, error) {
	d, err := devlib.NewDevice(dev)
	if err != nil {
		return false, err
	}
	return d.IsMigEnabled()
}

// Instances returns the MIG devices on parent, sorted by (GI, CI).
func Instances(devlib device.Interface, parent nvml.Device) ([]Instance, error) {
	d, err := devlib.NewDevice(parent)
	if err != nil {
		return nil, err
	}
	parentUUID, ret := parent.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("parent UUID: %v", ret)
	}
	migs, err := d.GetMigDevices()
	if err != nil {
		return nil, fmt.Errorf("GPU %s: %w", parentUUID, err)
	}
	out := make([]Instance, 0, len(migs))
	for _, m := range migs {
		inst, err := describe(m, parentUUID)
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", parentUUID, err)
		}
		out = append(out, inst)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GI != out[j].GI {
			return out[i].GI < out[j].GI
		}
		return out[i].CI < out[j].CI
	})
	return out, nil
}

func describe(m device.MigDevice, parent string) (Instance, error) {
	uuid, ret := m.GetUUID()
	if ret != nvml.SUCCESS {
		return Instance{}, fmt.Errorf("MIG device UUID: %v", ret)
	}
	profile, err := m.GetProfile()
	if err != nil {
		return Instance{}, fmt.Errorf("MIG device %s profile: %w", uuid, err)
	}
	attrs, ret := m.GetAttributes()
	if ret != nvml.SUCCESS {
		return Instance{}, fmt.Errorf("MIG device %s attributes: %v", uuid, ret)
	}
	gi, ret := m.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return Instance{}, fmt.Errorf("MIG device %s GPU instance: %v", uuid, ret)
	}
	ci, ret := m.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return Instance{}, fmt.Errorf("MIG device %s compute instance: %v", uuid, ret)
	}
	return Instance{UUID: uuid, Parent: parent, Profile: profile.String(), MemoryMiB: attrs.MemorySizeMB, GI: gi, CI: ci}, nil
}
