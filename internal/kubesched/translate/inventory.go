package translate

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/migassign"
	"github.com/tessera-gpu/tessera/internal/partition"
)

// Inventory is one node as the engine sees it.
type Inventory struct {
	Spec partition.NodeSpec
	// UUIDs are the node's GPUs in engine index order (the inventory's
	// index order).
	UUIDs []string
	// Unhealthy lists engine GPU indices the device plugin reports
	// unhealthy; the scheduler holds them whole so nothing new lands there.
	Unhealthy []int
}

// GPUIndex is the engine index of the GPU with uuid, or -1.
func (inv *Inventory) GPUIndex(uuid string) int { return slices.Index(inv.UUIDs, uuid) }

// HasInventory reports whether a node carries the device plugin's
// inventory annotation at all (nodes without it are not GPU nodes to us).
func HasInventory(n *corev1.Node) bool {
	_, ok := n.Annotations[annv1.NodeGPUsKey]
	return ok
}

// NodeInventory reads a node's inventory. A node that mixes GPU models or
// memory sizes, repeats an index or lists a MIG device the engine cannot
// model (migassign.ApplyInventory) is refused with the field named: the engine models one model and one memory size per
// node, and guessing would place pods on capacity that is not there.
func NodeInventory(n *corev1.Node) (*Inventory, error) {
	raw, ok := n.Annotations[annv1.NodeGPUsKey]
	if !ok {
		return nil, fmt.Errorf("node %s: no %s annotation", n.Name, annv1.NodeGPUsKey)
	}
	gpus, err := annv1.ParseNodeGPUs(raw)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	list := slices.Clone(gpus.GPUs)
	slices.SortFunc(list, func(a, b annv1.NodeGPU) int { return a.Index - b.Index })
	inv := &Inventory{}
	inv.Spec = partition.NodeSpec{Name: n.Name, GPUs: len(list)}
	if len(list) > 64 {
		return nil, fmt.Errorf("node %s: %s: %d GPUs (at most 64)", n.Name, annv1.NodeGPUsKey, len(list))
	}
	for i, g := range list {
		f := fmt.Sprintf("%s: gpus[index %d]", annv1.NodeGPUsKey, g.Index)
		switch {
		case i > 0 && list[i-1].Index == g.Index:
			return nil, fmt.Errorf("node %s: %s: index repeated", n.Name, f)
		case g.MemoryMiB == 0 || g.MemoryMiB > 1<<30:
			return nil, fmt.Errorf("node %s: %s.memoryMiB: %d is not a GPU memory size", n.Name, f, g.MemoryMiB)
		case i > 0 && g.Model != list[0].Model:
			return nil, fmt.Errorf("node %s: %s.model: %q differs from %q (one model per node)", n.Name, f, g.Model, list[0].Model)
		case i > 0 && g.MemoryMiB != list[0].MemoryMiB:
			return nil, fmt.Errorf("node %s: %s.memoryMiB: %d differs from %d (one memory size per node)", n.Name, f, g.MemoryMiB, list[0].MemoryMiB)
		}
		inv.UUIDs = append(inv.UUIDs, g.UUID)
		if !g.Healthy {
			inv.Unhealthy = append(inv.Unhealthy, i)
		}
	}
	if len(list) > 0 {
		inv.Spec.Model, inv.Spec.GPUMemMiB = list[0].Model, int32(list[0].MemoryMiB)
		inv.Spec.Islands = islands(list)
		inv.Spec.NUMANodes = numaNodes(list)
	}
	if err := migassign.ApplyInventory(&inv.Spec, list); err != nil {
		return nil, err
	}
	inv.Spec.CPU = n.Status.Allocatable.Cpu().MilliValue()
	inv.Spec.MemMiB = n.Status.Allocatable.Memory().Value() >> 20
	return inv, nil
}

// islands counts NVLink islands when the GPUs split into equal consecutive
// groups (the engine's model); otherwise 1 (no island constraint is met by
// accident: one island means "any GPUs").
func islands(list []annv1.NodeGPU) int {
	uuidAt := map[string]int{}
	for i, g := range list {
		uuidAt[g.UUID] = i
	}
	group := make([]int, len(list))
	for i := range group {
		group[i] = -1
	}
	k := 0
	for i := range list {
		if group[i] >= 0 {
			continue
		}
		stack := []int{i}
		group[i] = k
		for len(stack) > 0 {
			j := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, p := range list[j].NVLinkPeers {
				if q, ok := uuidAt[p]; ok && group[q] < 0 {
					group[q] = k
					stack = append(stack, q)
				}
			}
		}
		k++
	}
	if k <= 1 || len(list)%k != 0 {
		return 1
	}
	size := len(list) / k
	for i := range list {
		if group[i] != group[i/size*size] || (i%size == 0 && i > 0 && group[i] == group[i-1]) {
			return 1
		}
	}
	return k
}

// numaNodes counts NUMA nodes when they split the GPUs evenly in order.
func numaNodes(list []annv1.NodeGPU) int {
	var distinct []int
	for _, g := range list {
		if g.NUMANode < 0 {
			return 0
		}
		if !slices.Contains(distinct, g.NUMANode) {
			distinct = append(distinct, g.NUMANode)
		}
	}
	k := len(distinct)
	if k <= 1 || len(list)%k != 0 {
		return 0
	}
	size := len(list) / k
	for i := range list {
		if list[i].NUMANode != list[i/size*size].NUMANode {
			return 0
		}
	}
	return k
}
