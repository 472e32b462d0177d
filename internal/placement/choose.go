package placement

import (
	"math/bits"
	"slices"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// Candidate is a set of GPUs of one node, one bit per GPU index; the pod
// would get one share on each. CPU-only pods have the empty set.
type Candidate uint64

// GPUs lists the candidate's GPU indices in increasing order.
func (c Candidate) GPUs() []int {
	out := make([]int, 0, bits.OnesCount64(uint64(c)))
	for m := uint64(c); m != 0; m &= m - 1 {
		out = append(out, bits.TrailingZeros64(m))
	}
	return out
}

// candidates appends to buf the GPU sets on n worth scoring for shape s.
//
// A single-GPU share may go on any GPU that fits, but GPUs in the same state
// score the same under every policy, so only the first of each state is
// offered. A multi-GPU pod is offered, per NVLink island that can host it, the
// tightest-fitting GPUs of that island, and when SameIsland is not required
// and no island suffices, the tightest-fitting GPUs of the node.
func candidates(n *partition.Node, s *Shape, buf []Candidate) []Candidate {
	switch {
	case s.NumGPU == 0:
		return append(buf, 0)
	case s.NumGPU == 1:
		return singleCandidates(n, s, buf)
	default:
		return multiCandidates(n, s, buf)
	}
}

func singleCandidates(n *partition.Node, s *Shape, buf []Candidate) []Candidate {
	start := len(buf)
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !gpuFits(g, s) {
			continue
		}
		dup := false
		for _, c := range buf[start:] {
			o := &n.GPUs[bits.TrailingZeros64(uint64(c))]
			if o.FreeMilli == g.FreeMilli && o.FreeMemMiB == g.FreeMemMiB && o.Island == g.Island {
				dup = true
				break
			}
		}
		if !dup {
			buf = append(buf, Candidate(1)<<uint(i))
		}
	}
	return buf
}

func multiCandidates(n *partition.Node, s *Shape, buf []Candidate) []Candidate {
	var fit [64]int
	k := 0
	for i := range n.GPUs {
		if gpuFits(&n.GPUs[i], s) && k < len(fit) {
			fit[k] = i
			k++
		}
	}
	idx := fit[:k]
	// Tightest first, then lower index: the pod leaves the emptiest GPUs
	// whole for the next pod.
	for a := 1; a < len(idx); a++ { // insertion sort: stable, no allocation
		for b := a; b > 0 && n.GPUs[idx[b]].FreeMilli < n.GPUs[idx[b-1]].FreeMilli; b-- {
			idx[b], idx[b-1] = idx[b-1], idx[b]
		}
	}
	start := len(buf)
	// Per island (within one NUMA node when SameNUMA) that can host it;
	// when none can and the island is only preferred, per NUMA node when
	// that is required, else the node's tightest GPUs.
	buf = groupCandidates(n, s, idx, buf, true, s.SameNUMA)
	if len(buf) == start && !s.SameIsland && s.SameNUMA {
		return groupCandidates(n, s, idx, buf, false, true)
	}
	if len(buf) == start && !s.SameIsland && !s.SameNUMA && len(idx) >= s.NumGPU {
		var c Candidate
		for _, gj := range idx[:s.NumGPU] {
			c |= 1 << uint(gj)
		}
		buf = append(buf, c)
	}
	return buf
}

// groupCandidates appends, per group of GPUs (by island and/or NUMA node)
// that has NumGPU fitting ones, its tightest GPUs (idx is tightest first).
func groupCandidates(n *partition.Node, s *Shape, idx []int, buf []Candidate, island, numa bool) []Candidate {
	var seen [64]int // group keys already offered
	groups := 0
	for _, gi := range idx {
		key := localityKey(&n.GPUs[gi], island, numa)
		if slices.Contains(seen[:groups], key) {
			continue
		}
		if groups < len(seen) {
			seen[groups] = key
			groups++
		}
		var c Candidate
		taken := 0
		for _, gj := range idx {
			if taken < s.NumGPU && localityKey(&n.GPUs[gj], island, numa) == key {
				c |= 1 << uint(gj)
				taken++
			}
		}
		if taken == s.NumGPU {
			buf = append(buf, c)
		}
	}
	return buf
}

// grant turns a chosen candidate into what the node reserves.
func grant(n *partition.Node, s *Shape, c Candidate) partition.Grant {
	g := partition.Grant{CPU: s.CPUMilli, MemMiB: s.MemMiB, MIG: n.PickMIG(s.MIGProfile, s.NumMIG)}
	for _, i := range c.GPUs() {
		g.Shares = append(g.Shares, partition.Share{GPU: i, Milli: s.GPUMilli, MemMiB: s.GPUMemMiB})
	}
	return g
}
