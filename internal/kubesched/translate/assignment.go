package translate

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/migassign"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Assignment writes the tessera.io/assignment value for a decision: each
// container of the shape on its GPUs of the decision, with the amounts it
// requested (0 where it requested none, as the device plugin expects), and
// on the MIG devices the grant names (mig, as
// placement.Cluster.MIGDevices gives them for d). Whole-GPU app containers
// take the decided GPUs in order, fractional app containers share the
// next one; an init container runs first on the first of them.
func Assignment(d placement.Decision, sh Shape, inv *Inventory, mig []partition.MIGDevice) (string, error) {
	if len(sh.Containers) == 0 || (len(d.Grant.Shares) == 0 && len(mig) == 0) {
		return "", nil
	}
	uuids := make([]string, 0, len(d.Grant.Shares))
	for _, s := range d.Grant.Shares {
		if s.GPU < 0 || s.GPU >= len(inv.UUIDs) {
			return "", fmt.Errorf("node %s has no GPU %d", inv.Spec.Name, s.GPU)
		}
		uuids = append(uuids, inv.UUIDs[s.GPU])
	}
	gpusOf, err := sh.split(uuids)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", inv.Spec.Name, err)
	}
	a := annv1.Assignment{Version: annv1.Version}
	for i, c := range sh.Containers {
		ca := annv1.ContainerAssignment{Name: c.Name}
		if c.MIGs > 0 {
			ca.MIG = migassign.Allocations(mig)
		}
		for _, u := range gpusOf[i] {
			ca.GPUs = append(ca.GPUs, annv1.GPUShare{UUID: u, MemoryMiB: c.MemoryMiB, CorePercent: c.CorePercent})
		}
		a.Containers = append(a.Containers, ca)
	}
	return annv1.Marshal(&a)
}

// split hands the pod's GPUs (in the decision's order) to its containers:
// whole-GPU app containers in order, fractional app containers together
// the next one, init containers the first ones.
func (sh Shape) split(uuids []string) ([][]string, error) {
	out := make([][]string, len(sh.Containers))
	next := 0
	for i, c := range sh.Containers {
		if c.Init || c.MIGs > 0 || !c.whole() {
			continue
		}
		if next+c.GPUs > len(uuids) {
			return nil, fmt.Errorf("container %s needs GPUs %d-%d of a grant of %d", c.Name, next, next+c.GPUs-1, len(uuids))
		}
		out[i] = uuids[next : next+c.GPUs]
		next += c.GPUs
	}
	for i, c := range sh.Containers {
		switch {
		case c.MIGs > 0 || c.GPUs == 0:
		case c.Init:
			if c.GPUs > len(uuids) {
				return nil, fmt.Errorf("init container %s needs %d GPUs of a grant of %d", c.Name, c.GPUs, len(uuids))
			}
			out[i] = uuids[:c.GPUs]
		case !c.whole():
			if next >= len(uuids) {
				return nil, fmt.Errorf("container %s needs a shared GPU beyond a grant of %d", c.Name, len(uuids))
			}
			out[i] = uuids[next : next+1]
		}
	}
	return out, nil
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
		if uuids, err := allocatedGPUs(raw, sh); err != nil {
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
		if uuids, err := assignedGPUs(raw, sh); err != nil {
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

// allocatedGPUs are the GPUs tessera.io/allocated names for the shape's
// containers, each once, in the containers' order.
func allocatedGPUs(raw string, sh Shape) ([]string, error) {
	a, err := annv1.ParseAllocated(raw)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, want := range sh.Containers {
		for _, c := range a.Containers {
			if c.Name != want.Name {
				continue
			}
			for _, g := range c.GPUs {
				if !slices.Contains(out, g.UUID) {
					out = append(out, g.UUID)
				}
			}
		}
	}
	return out, nil
}

// assignedGPUs are the GPUs tessera.io/assignment names for the shape's
// containers, each once; every container that asks for GPUs must have an
// entry.
func assignedGPUs(raw string, sh Shape) ([]string, error) {
	a, err := annv1.ParseAssignment(raw)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, want := range sh.Containers {
		if want.GPUs == 0 {
			continue
		}
		c := a.Container(want.Name)
		if c == nil {
			return nil, fmt.Errorf("%s: no entry for container %q", annv1.AssignmentKey, want.Name)
		}
		for _, g := range c.GPUs {
			if !slices.Contains(out, g.UUID) {
				out = append(out, g.UUID)
			}
		}
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
func boundMIG(p *corev1.Pod, req *placement.Request, shape Shape, node *partition.Node, rec Recorded) (Recorded, bool) {
	var sh ContainerShape // one container asks for MIG devices (Shape.fill)
	for _, c := range shape.Containers {
		if c.MIGs > 0 {
			sh = c
		}
	}
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
				if c.Name == sh.Name {
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
			c := a.Container(sh.Name)
			if c == nil {
				return nil, fmt.Errorf("%s: no entry for container %q", annv1.AssignmentKey, sh.Name)
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
