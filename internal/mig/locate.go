package mig

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Location is where a MIG device lives: its parent GPU's minor number and
// its GPU- and compute-instance IDs on that GPU.
type Location struct {
	ParentMinor, GI, CI int
}

// Locate asks NVML where the MIG device uuid is now. Allocate uses it
// rather than what discovery saw: after a reconfiguration the driver may
// give a new GPU instance the ID of a destroyed one, and handing the
// capability nodes of a stale ID would open another tenant's instance.
func Locate(lib nvml.Interface, uuid string) (Location, error) {
	dev, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return Location{}, fmt.Errorf("MIG device %s: NVML handle: %v", uuid, ret)
	}
	parent, ret := dev.GetDeviceHandleFromMigDeviceHandle()
	if ret != nvml.SUCCESS {
		return Location{}, fmt.Errorf("MIG device %s: parent GPU: %v", uuid, ret)
	}
	var loc Location
	if loc.ParentMinor, ret = parent.GetMinorNumber(); ret != nvml.SUCCESS {
		return Location{}, fmt.Errorf("MIG device %s: parent minor number: %v", uuid, ret)
	}
	if loc.GI, ret = dev.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return Location{}, fmt.Errorf("MIG device %s: GPU instance: %v", uuid, ret)
	}
	if loc.CI, ret = dev.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return Location{}, fmt.Errorf("MIG device %s: compute instance: %v", uuid, ret)
	}
	return loc, nil
}
