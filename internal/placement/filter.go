package placement

import "github.com/tessera-gpu/tessera/internal/partition"

// Filter is one feasibility check: can node n (of GPU model id m) host a pod
// of shape s at all. Filters are cheap and run before any scoring.
type Filter struct {
	Name string
	Fits func(n *partition.Node, m uint8, s *Shape) bool
}

// Filters is the feasibility stage, in the order it runs; the first filter
// that fails names the reason a node was rejected.
var Filters = []Filter{
	{"cpu", func(n *partition.Node, _ uint8, s *Shape) bool { return n.FreeCPU >= s.CPUMilli }},
	{"memory", func(n *partition.Node, _ uint8, s *Shape) bool { return n.FreeMemMiB >= s.MemMiB }},
	{"gpu-model", func(n *partition.Node, m uint8, s *Shape) bool { return !s.usesGPUs() || s.Admits(m) }},
	{"mig", func(n *partition.Node, _ uint8, s *Shape) bool {
		return s.NumMIG == 0 || n.FreeMIG(s.MIGProfile) >= s.NumMIG
	}},
	{"gpu-share", func(n *partition.Node, _ uint8, s *Shape) bool {
		return s.NumGPU == 0 || countFitting(n, s) >= s.NumGPU
	}},
	{"nvlink-island", func(n *partition.Node, _ uint8, s *Shape) bool {
		return !s.SameIsland || s.NumGPU <= 1 || bestIslandCount(n, s) >= s.NumGPU
	}},
	{"numa-node", func(n *partition.Node, _ uint8, s *Shape) bool {
		return !s.SameNUMA || s.NumGPU <= 1 || bestGroupCount(n, s, func(g *partition.GPU) int { return localityKey(g, s.SameIsland, true) }) >= s.NumGPU
	}},
}

// localityKey groups GPUs by NVLink island, NUMA node or both.
func localityKey(g *partition.GPU, island, numa bool) int {
	k := 0
	if island {
		k = int(g.Island) & 63
	}
	if numa {
		k |= (int(g.NUMA) & 63) << 6
	}
	return k
}

// bestGroupCount is the most fitting GPUs any one group (by key) has.
func bestGroupCount(n *partition.Node, s *Shape, key func(g *partition.GPU) int) int {
	var per [64 * 64]int16
	best := 0
	for i := range n.GPUs {
		if g := &n.GPUs[i]; gpuFits(g, s) {
			k := key(g)
			per[k]++
			best = max(best, int(per[k]))
		}
	}
	return best
}

// feasible runs every filter; it returns the index of the first that fails,
// or -1.
func feasible(n *partition.Node, m uint8, s *Shape) int {
	for i := range Filters {
		if !Filters[i].Fits(n, m, s) {
			return i
		}
	}
	return -1
}

// gpuFits reports whether one GPU can take one of the shape's per-GPU shares.
func gpuFits(g *partition.GPU, s *Shape) bool {
	return !g.InMIGMode() && g.FreeMilli >= s.GPUMilli && g.FreeMemMiB >= s.GPUMemMiB
}

func countFitting(n *partition.Node, s *Shape) int {
	k := 0
	for i := range n.GPUs {
		if gpuFits(&n.GPUs[i], s) {
			k++
		}
	}
	return k
}

// bestIslandCount is the most fitting GPUs any one NVLink island has.
func bestIslandCount(n *partition.Node, s *Shape) int {
	var per [128]int
	best := 0
	for i := range n.GPUs {
		if gpuFits(&n.GPUs[i], s) {
			isl := int(n.GPUs[i].Island) & 127
			per[isl]++
			best = max(best, per[isl])
		}
	}
	return best
}
