// Package migassign translates MIG devices between tessera's annotations
// and the engine: the fixed instances a node's tessera.io/node-gpus lists
// become the node's partition.MIGDevice list, the devices the engine grants
// become an assignment's containers[].mig, and a bound pod's
// containers[].mig (tessera.io/allocated, else tessera.io/assignment) become
// the devices it holds when the engine is rebuilt. It holds no Kubernetes
// types; the cluster scheduler's translation calls it.
package migassign

import (
	"fmt"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/partition"
)

// ApplyInventory puts the MIG GPUs and devices of an inventory on a node
// spec. gpus must be in the engine's GPU order (gpus[i] is engine GPU i, as
// the caller built spec.GPUs from them). A MIG-enabled GPU serves only its
// MIG devices, never shares; a device listed on a GPU not in MIG mode is
// refused with the field named (the device plugin would not advertise it).
func ApplyInventory(spec *partition.NodeSpec, gpus []annv1.NodeGPU) error {
	if len(gpus) != spec.GPUs {
		return fmt.Errorf("node %s: %d inventory GPUs for a spec of %d", spec.Name, len(gpus), spec.GPUs)
	}
	var migGPUs []int
	var devs []partition.MIGDevice
	for i, g := range gpus {
		if !g.MIGEnabled {
			if len(g.MIG) > 0 {
				return fmt.Errorf("node %s: %s: gpus[index %d].mig: %d devices on a GPU not in MIG mode", spec.Name, annv1.NodeGPUsKey, g.Index, len(g.MIG))
			}
			continue
		}
		migGPUs = append(migGPUs, i)
		for j, m := range g.MIG {
			if err := partition.CheckMIGProfile(m.Profile); err != nil {
				return fmt.Errorf("node %s: %s: gpus[index %d].mig[%d].profile: %w", spec.Name, annv1.NodeGPUsKey, g.Index, j, err)
			}
			devs = append(devs, partition.MIGDevice{UUID: m.UUID, Profile: m.Profile, GPU: i, Parent: g.UUID})
		}
	}
	if len(devs) > partition.MaxMIGDevices {
		return fmt.Errorf("node %s: %s: %d MIG devices (at most %d)", spec.Name, annv1.NodeGPUsKey, len(devs), partition.MaxMIGDevices)
	}
	spec.MIGGPUs, spec.MIG = migGPUs, devs
	return nil
}

// Allocations is the containers[].mig entry of an assignment for the
// devices a decision grants (placement.Cluster.MIGDevices).
func Allocations(devs []partition.MIGDevice) []annv1.MIGAllocation {
	out := make([]annv1.MIGAllocation, 0, len(devs))
	for _, d := range devs {
		out = append(out, annv1.MIGAllocation{UUID: d.UUID, Profile: d.Profile, Parent: d.Parent})
	}
	return out
}

// Held finds on node n the MIG devices a bound container's annotation
// names (its containers[].mig), as the grant's indices into n.MIG. Every
// device must be one the node lists, with the same profile and parent
// GPU, and of the profile the container requests; want is the number it
// requests. An error names the device; the caller then counts the pod
// elsewhere (or not at all) and reports it — nothing else changes.
func Held(n *partition.Node, ms []annv1.MIGAllocation, profile string, want int) ([]int, error) {
	if len(ms) != want {
		return nil, fmt.Errorf("names %d MIG devices, the container requests %d of %s", len(ms), want, profile)
	}
	out := make([]int, 0, len(ms))
	for j, m := range ms {
		i := n.MIGIndex(m.UUID)
		switch {
		case i < 0:
			return nil, fmt.Errorf("mig[%d]: device %s is not on node %s", j, m.UUID, n.Name)
		case m.Profile != profile:
			return nil, fmt.Errorf("mig[%d]: device %s has profile %s, the container requests %s", j, m.UUID, m.Profile, profile)
		case n.MIG[i].Profile != m.Profile || n.MIG[i].Parent != m.Parent:
			return nil, fmt.Errorf("mig[%d]: device %s is %s on GPU %s on node %s, not %s on %s", j, m.UUID, n.MIG[i].Profile, n.MIG[i].Parent, n.Name, m.Profile, m.Parent)
		}
		out = append(out, i)
	}
	return out, nil
}
