package placement

import (
	"sort"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// Fragmentation measures, as the FGD paper defines it, how much of a node's
// idle GPU compute the target workload could not use. For each class: if the
// class is CPU-only, or excludes the node's GPU model, or the node cannot
// host it (too little free CPU, or fewer than NumGPU GPUs with GPUMilli
// free), all idle GPU compute of the node is fragmented; otherwise only the
// free compute of GPUs with less than GPUMilli free is. A node's
// fragmentation is the frequency-weighted sum over classes, in milli-GPUs.
//
// Node states repeat a lot (a cluster has few GPU models and pods come in few
// sizes), so results are memoised by (model, CPU level, sorted free GPU
// compute).
type Fragmentation struct {
	w        *Workload
	cpuSteps []int64 // distinct class CPU requests, ascending
	memo     map[fragKey]float64
}

// MemoLimit bounds the memo; it is cleared when full.
const MemoLimit = 1 << 20

type fragKey struct {
	model    uint8
	cpuLevel uint16
	gpus     uint8
	free     [8]int16
}

// NewFragmentation prepares fragmentation against workload w.
func NewFragmentation(w *Workload) *Fragmentation {
	f := &Fragmentation{w: w, memo: map[fragKey]float64{}}
	seen := map[int64]bool{}
	for _, c := range w.Classes {
		if !seen[c.CPUMilli] {
			seen[c.CPUMilli] = true
			f.cpuSteps = append(f.cpuSteps, c.CPUMilli)
		}
	}
	sort.Slice(f.cpuSteps, func(a, b int) bool { return f.cpuSteps[a] < f.cpuSteps[b] })
	return f
}

// Workload is the target workload.
func (f *Fragmentation) Workload() *Workload { return f.w }

// Node is the fragmentation of node n, whose GPUs are of model id m.
func (f *Fragmentation) Node(n *partition.Node, m uint8) float64 {
	return f.after(n, m, 0, 0, 0)
}

// After is the fragmentation of n once a pod of shape s holds GPUs c.
func (f *Fragmentation) After(n *partition.Node, m uint8, s *Shape, c Candidate) float64 {
	return f.after(n, m, s.CPUMilli, s.GPUMilli, c)
}

// Cluster is the fragmentation of every node together, in milli-GPUs.
func (f *Fragmentation) Cluster(c *Cluster) float64 {
	var sum float64
	for i := range c.Nodes {
		sum += f.Node(&c.Nodes[i], c.modelOf[i])
	}
	return sum
}

func (f *Fragmentation) after(n *partition.Node, m uint8, cpu int64, milli int32, c Candidate) float64 {
	freeCPU := n.FreeCPU - cpu
	var buf [64]int32
	free := buf[:0]
	for i := range n.GPUs {
		v := n.GPUs[i].FreeMilli
		if n.GPUs[i].InMIGMode() {
			v = 0
		}
		if c&(1<<uint(i)) != 0 {
			v -= milli
		}
		free = append(free, v)
	}
	if len(free) > 8 {
		return f.compute(m, freeCPU, free)
	}
	for a := 1; a < len(free); a++ {
		for b := a; b > 0 && free[b] < free[b-1]; b-- {
			free[b], free[b-1] = free[b-1], free[b]
		}
	}
	k := fragKey{model: m, gpus: uint8(len(free)), cpuLevel: uint16(sort.Search(len(f.cpuSteps), func(i int) bool { return f.cpuSteps[i] > freeCPU }))}
	for i, v := range free {
		k.free[i] = int16(v)
	}
	if v, ok := f.memo[k]; ok {
		return v
	}
	v := f.compute(m, freeCPU, free)
	if len(f.memo) >= MemoLimit {
		clear(f.memo)
	}
	f.memo[k] = v
	return v
}

func (f *Fragmentation) compute(m uint8, freeCPU int64, free []int32) float64 {
	var idle int64
	for _, v := range free {
		idle += int64(v)
	}
	if idle == 0 {
		return 0
	}
	var sum float64
	for i := range f.w.Classes {
		cl := &f.w.Classes[i]
		sum += cl.Freq * float64(classFrag(cl, m, freeCPU, free, idle))
	}
	return sum
}

// classFrag is the idle GPU compute class cl cannot use on a node.
func classFrag(cl *Class, m uint8, freeCPU int64, free []int32, idle int64) int64 {
	if cl.NumGPU == 0 || (!cl.AnyModel && cl.Models&(1<<m) == 0) || freeCPU < cl.CPUMilli {
		return idle
	}
	fits := 0
	var small int64
	for _, v := range free {
		if v >= cl.GPUMilli {
			fits++
		} else {
			small += int64(v)
		}
	}
	if fits < cl.NumGPU {
		return idle
	}
	return small
}
