package translate

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/migassign"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Assignment writes the tessera.io/assignment value for a decision: the
// shape's container on the decided GPUs, with the amounts the pod
// requested (0 where it requested none, as the device plugin expects),
// and on the MIG devices the grant names (mig, as
// placement.Cluster.MIGDevices gives them for d).
func Assignment(d placement.Decision, sh Shape, inv *Inventory, mig []partition.MIGDevice) (string, error) {
	if sh.Container == "" || (len(d.Grant.Shares) == 0 && len(mig) == 0) {
		return "", nil
	}
	ca := annv1.ContainerAssignment{Name: sh.Container}
	if len(mig) > 0 {
		ca.MIG = migassign.Allocations(mig)
	}
	for _, s := range d.Grant.Shares {
		if s.GPU < 0 || s.GPU >= len(inv.UUIDs) {
			return "", fmt.Errorf("node %s has no GPU %d", inv.Spec.Name, s.GPU)
		}
		ca.GPUs = append(ca.GPUs, annv1.GPUShare{UUID: inv.UUIDs[s.GPU], MemoryMiB: sh.MemoryMiB, CorePercent: sh.CorePercent})
	}
	return annv1.Marshal(&annv1.Assignment{Version: annv1.Version, Containers: []annv1.ContainerAssignment{ca}})
}

// Recorded is what a bound pod holds, read back from its annotations.
type Recorded struct {
	Decision placement.Decision
	// Source says which annotation the GPUs came from: "allocated",
	// "assignment", or "" when the pod holds no GPU shares.
	Source string
	// Problems are annotations that could not be used (malformed, naming
	// GPUs the node lacks); the caller reports them.
	Problems []error
}

// BoundDecision rebuilds what a bound pod holds on node (engine index i):
// its CPU and memory, and, when it requests GPUs, shares on the GPUs that
// tessera.io/allocated names (the device plugin's read-back, the truth
// about the node) or else tessera.io/assignment, of the size its request
// says (the spec is immutable; annotations only say where). A pod that
// requests MIG devices holds those the same annotations' containers[].mig
// name on node (the engine's node i). ok is false when the pod requests
// GPUs or MIG devices but neither annotation says which: the caller then
// decides where to count it.
func BoundDecision(p *corev1.Pod, req *placement.Request, sh Shape, inv *Inventory, node *partition.Node, i int) (rec Recorded, ok bool) {
	rec.Decision = placement.Decision{Node: i, NodeName: inv.Spec.Name, Grant: partition.Grant{CPU: req.CPUMilli, MemMiB: req.MemMiB}}
	if req.NumMIG > 0 {
		return boundMIG(p, req, sh, node, rec)
	}
	if req.NumGPU == 0 {
		return rec, true
	}
	if raw, has := p.Annotations[annv1.AllocatedKey]; has {
		if uuids, err := allocatedGPUs(raw, sh.Container); err != nil {
			rec.Problems = append(rec.Problems, fmt.Errorf("pod %s: %w", Key(p), err))
		} else if len(uuids) > 0 {
			if shares, err := sharesOn(uuids, req, inv); err != nil {
				rec.Problems = append(rec.Problems, fmt.Errorf("pod %s: %s: %w", Key(p), annv1.AllocatedKey, err))
			} else {
				rec.Decision.Grant.Shares, rec.Source = shares, "allocated"
				return rec, true
			}
		}
	}
	if raw, has := p.Annotations[annv1.AssignmentKey]; has {
		if uuids, err := assignedGPUs(raw, sh.Container); err != nil {
			rec.Problems = append(rec.Problems, fmt.Errorf("pod %s: %w", Key(p), err))
		} else if shares, err := sharesOn(uuids, req, inv); err != nil {
			rec.Problems = append(rec.Problems, fmt.Errorf("pod %s: %s: %w", Key(p), annv1.AssignmentKey, err))
		} else {
			rec.Decision.Grant.Shares, rec.Source = shares, "assignment"
			return rec, true
		}
	}
	return rec, false
}

func allocatedGPUs(raw, container string) ([]string, error) {
	a, err := annv1.ParseAllocated(raw)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range a.Containers {
		if c.Name == container {
			for _, g := range c.GPUs {
				out = append(out, g.UUID)
			}
		}
	}
	return out, nil
}

func assignedGPUs(raw, container string) ([]string, error) {
	a, err := annv1.ParseAssignment(raw)
	if err != nil {
		return nil, err
	}
	c := a.Container(container)
	if c == nil {
		return nil, fmt.Errorf("%s: no entry for container %q", annv1.AssignmentKey, container)
	}
	out := make([]string, 0, len(c.GPUs))
	for _, g := range c.GPUs {
		out = append(out, g.UUID)
	}
	return out, nil
}

// sharesOn is the request's per-GPU share on each named GPU.
func sharesOn(uuids []string, req *placement.Request, inv *Inventory) ([]partition.Share, error) {
	if len(uuids) != req.NumGPU {
		return nil, fmt.Errorf("names %d GPUs, the pod requests %d", len(uuids), req.NumGPU)
	}
	shares := make([]partition.Share, 0, len(uuids))
	for _, u := range uuids {
		g := inv.GPUIndex(u)
		if g < 0 {
			return nil, fmt.Errorf("GPU %s is not in node %s's inventory", u, inv.Spec.Name)
		}
		shares = append(shares, partition.Share{GPU: g, Milli: req.GPUMilli, MemMiB: req.GPUMemMiB})
	}
	return shares, nil
}

// boundMIG fills rec's grant with the MIG devices tessera.io/allocated
// names for the container, else tessera.io/assignment.
func boundMIG(p *corev1.Pod, req *placement.Request, sh Shape, node *partition.Node, rec Recorded) (Recorded, bool) {
	sources := []struct {
		key, source string
		read        func(string) ([]annv1.MIGAllocation, error)
	}{
		{annv1.AllocatedKey, "allocated", func(raw string) ([]annv1.MIGAllocation, error) {
			a, err := annv1.ParseAllocated(raw)
			if err != nil {
				return nil, err
			}
			for _, c := range a.Containers {
				if c.Name == sh.Container {
					return c.MIG, nil
				}
			}
			return nil, nil
		}},
		{annv1.AssignmentKey, "assignment", func(raw string) ([]annv1.MIGAllocation, error) {
			a, err := annv1.ParseAssignment(raw)
			if err != nil {
				return nil, err
			}
			c := a.Container(sh.Container)
			if c == nil {
				return nil, fmt.Errorf("%s: no entry for container %q", annv1.AssignmentKey, sh.Container)
			}
			return c.MIG, nil
		}},
	}
	for _, src := range sources {
		raw, has := p.Annotations[src.key]
		if !has {
			continue
		}
		ms, err := src.read(raw)
		if err != nil {
			rec.Problems = append(rec.Problems, fmt.Errorf("pod %s: %w", Key(p), err))
			continue
		}
		if len(ms) == 0 && src.source == "allocated" {
			continue // the device plugin has not read back yet
		}
		devs, err := migassign.Held(node, ms, req.MIGProfile, req.NumMIG)
		if err != nil {
			rec.Problems = append(rec.Problems, fmt.Errorf("pod %s: %s: %w", Key(p), src.key, err))
			continue
		}
		rec.Decision.Grant.MIG, rec.Source = devs, src.source
		return rec, true
	}
	return rec, false
}
