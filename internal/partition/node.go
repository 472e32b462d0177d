package partition

import (
	"errors"
	"fmt"
)

// MilliPerGPU is the compute share of one whole GPU: a share of 1000 is the
// whole device, 500 half of it.
const MilliPerGPU = 1000

// GPU is the free capacity of one physical GPU.
type GPU struct {
	// FreeMilli is the compute share still free, 0..MilliPerGPU.
	FreeMilli int32
	// MemMiB is the device memory; FreeMemMiB what is not reserved.
	MemMiB, FreeMemMiB int32
	// NUMA is the host NUMA node the GPU is attached to.
	NUMA int8
	// Island groups GPUs that share an NVLink domain; multi-GPU pods prefer
	// (or require) GPUs of one island.
	Island int8
	// MIG is non-nil when the GPU is partitioned into MIG instances; such a GPU
	// serves only MIG requests.
	MIG *MIGLayout
	// FixedMIG: the GPU is in MIG mode with the fixed instances its node
	// lists (Node.MIG); like a MIGLayout GPU it serves no shares.
	FixedMIG bool
}

// Idle reports whether nothing is reserved on the GPU.
func (g *GPU) Idle() bool {
	return g.FreeMilli == MilliPerGPU && g.FreeMemMiB == g.MemMiB && (g.MIG == nil || g.MIG.Empty())
}

// InMIGMode reports whether the GPU is partitioned (dynamic layout or fixed
// instances) and so serves only MIG requests.
func (g *GPU) InMIGMode() bool { return g.MIG != nil || g.FixedMIG }

// Node is the capacity of one machine. Model is the model of all its GPUs
// (clusters of mixed-model machines are rare enough that a node with two
// models is modelled as two nodes).
type Node struct {
	Name   string
	Model  string
	CPU    int64 // milli-cores
	MemMiB int64
	// FreeCPU and FreeMemMiB are what is not reserved yet.
	FreeCPU, FreeMemMiB int64
	GPUs                []GPU
	// MIG lists the node's fixed MIG devices; it never changes after
	// NewNode, so copies of a node share it. MIGUsed has bit i set while
	// MIG[i] is held.
	MIG     []MIGDevice
	MIGUsed uint64
}

// NodeSpec describes a node before anything is placed on it.
type NodeSpec struct {
	Name      string
	Model     string
	CPU       int64
	MemMiB    int64
	GPUs      int
	GPUMemMiB int32
	// Islands is the number of NVLink islands; the GPUs are split evenly in
	// index order. 0 or 1 means one island for all.
	Islands int
	// NUMANodes splits the GPUs the same way over NUMA nodes; 0 means one.
	NUMANodes int
	// MIGGPUs are the indices of the GPUs in MIG mode, MIG the devices
	// they offer (tessera.io/node-gpus lists both).
	MIGGPUs []int
	MIG     []MIGDevice
}

// NewNode builds an empty node from its description.
func NewNode(s NodeSpec) (Node, error) {
	switch {
	case s.Name == "":
		return Node{}, errors.New("node without a name")
	case s.CPU < 0 || s.MemMiB < 0:
		return Node{}, fmt.Errorf("node %s: negative CPU or memory", s.Name)
	case s.GPUs < 0 || s.GPUs > 64:
		return Node{}, fmt.Errorf("node %s: %d GPUs is out of range 0..64", s.Name, s.GPUs)
	case s.GPUMemMiB < 0:
		return Node{}, fmt.Errorf("node %s: negative GPU memory", s.Name)
	case s.Islands < 0 || s.Islands > 64 || s.NUMANodes < 0 || s.NUMANodes > 64:
		return Node{}, fmt.Errorf("node %s: %d NVLink islands, %d NUMA nodes: each must be in 0..64", s.Name, s.Islands, s.NUMANodes)
	}
	n := Node{Name: s.Name, Model: s.Model, CPU: s.CPU, MemMiB: s.MemMiB, FreeCPU: s.CPU, FreeMemMiB: s.MemMiB}
	n.GPUs = make([]GPU, s.GPUs)
	for i := range n.GPUs {
		n.GPUs[i] = GPU{
			FreeMilli: MilliPerGPU, MemMiB: s.GPUMemMiB, FreeMemMiB: s.GPUMemMiB,
			Island: int8(group(i, s.GPUs, s.Islands)), NUMA: int8(group(i, s.GPUs, s.NUMANodes)),
		}
	}
	if err := n.addMIG(s); err != nil {
		return Node{}, err
	}
	return n, nil
}

// group puts index i of n into one of k equal consecutive groups.
func group(i, n, k int) int {
	if k <= 1 || n == 0 {
		return 0
	}
	return i * k / n
}

// Share is what one pod holds on one GPU.
type Share struct {
	GPU    int
	Milli  int32
	MemMiB int32
}

// Grant is everything one pod holds on a node.
type Grant struct {
	CPU    int64
	MemMiB int64
	Shares []Share
	// MIG lists the node's MIG devices the pod holds (indices into
	// Node.MIG).
	MIG []int
}

// FreeMilli is the total idle GPU compute of the node.
func (n *Node) FreeMilli() int64 {
	var s int64
	for i := range n.GPUs {
		s += int64(n.GPUs[i].FreeMilli)
	}
	return s
}

// Reserve takes a grant's resources from the node. It checks everything before
// changing anything, so a failed reserve leaves the node as it was.
func (n *Node) Reserve(g Grant) error {
	if g.CPU < 0 || g.MemMiB < 0 {
		return fmt.Errorf("node %s: negative grant", n.Name)
	}
	if g.CPU > n.FreeCPU || g.MemMiB > n.FreeMemMiB {
		return fmt.Errorf("node %s: grant of %dm CPU/%d MiB exceeds free %dm/%d MiB", n.Name, g.CPU, g.MemMiB, n.FreeCPU, n.FreeMemMiB)
	}
	if err := n.checkShares(g.Shares); err != nil {
		return err
	}
	mig, err := n.migMask(g.MIG)
	if err != nil {
		return err
	}
	if err := n.checkMIGFree(mig); err != nil {
		return err
	}
	for _, s := range g.Shares {
		gpu := &n.GPUs[s.GPU]
		if gpu.InMIGMode() {
			return fmt.Errorf("node %s GPU %d is in MIG mode; reserve a MIG instance instead", n.Name, s.GPU)
		}
		if s.Milli > gpu.FreeMilli || s.MemMiB > gpu.FreeMemMiB {
			return fmt.Errorf("node %s GPU %d: share %dm/%d MiB exceeds free %dm/%d MiB", n.Name, s.GPU, s.Milli, s.MemMiB, gpu.FreeMilli, gpu.FreeMemMiB)
		}
	}
	n.FreeCPU -= g.CPU
	n.FreeMemMiB -= g.MemMiB
	n.MIGUsed |= mig
	for _, s := range g.Shares {
		n.GPUs[s.GPU].FreeMilli -= s.Milli
		n.GPUs[s.GPU].FreeMemMiB -= s.MemMiB
	}
	return nil
}

// Release returns a grant's resources. Releasing more than the node has
// reserved is an error and changes nothing: it means the caller's books and the
// node's disagree.
func (n *Node) Release(g Grant) error {
	// Compare against what is held rather than add to what is free: a huge
	// grant must not wrap the sum around into range.
	if g.CPU < 0 || g.MemMiB < 0 || g.CPU > n.CPU-n.FreeCPU || g.MemMiB > n.MemMiB-n.FreeMemMiB {
		return fmt.Errorf("node %s: release of %dm CPU/%d MiB exceeds what is reserved", n.Name, g.CPU, g.MemMiB)
	}
	if err := n.checkShares(g.Shares); err != nil {
		return err
	}
	mig, err := n.migMask(g.MIG)
	if err != nil {
		return err
	}
	if err := n.checkMIGHeld(mig); err != nil {
		return err
	}
	for _, s := range g.Shares {
		gpu := &n.GPUs[s.GPU]
		if s.Milli > MilliPerGPU-gpu.FreeMilli || s.MemMiB > gpu.MemMiB-gpu.FreeMemMiB {
			return fmt.Errorf("node %s GPU %d: release exceeds what is reserved", n.Name, s.GPU)
		}
	}
	n.FreeCPU += g.CPU
	n.FreeMemMiB += g.MemMiB
	n.MIGUsed &^= mig
	for _, s := range g.Shares {
		n.GPUs[s.GPU].FreeMilli += s.Milli
		n.GPUs[s.GPU].FreeMemMiB += s.MemMiB
	}
	return nil
}

// checkShares rejects shares on GPUs the node lacks, negative shares, and two
// shares on one GPU (a pod holds at most one share per GPU).
func (n *Node) checkShares(shares []Share) error {
	var seen uint64
	for _, s := range shares {
		if s.GPU < 0 || s.GPU >= len(n.GPUs) {
			return fmt.Errorf("node %s: no GPU %d", n.Name, s.GPU)
		}
		if s.Milli < 0 || s.MemMiB < 0 {
			return fmt.Errorf("node %s GPU %d: negative share", n.Name, s.GPU)
		}
		if seen&(1<<uint(s.GPU)) != 0 {
			return fmt.Errorf("node %s: two shares on GPU %d", n.Name, s.GPU)
		}
		seen |= 1 << uint(s.GPU)
	}
	return nil
}
