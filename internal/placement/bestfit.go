package placement

// bestfit places the pod where it leaves the least capacity over: the node
// with the smallest sum of free CPU and free GPU fractions after placement,
// and on it the GPUs left with the least free compute.
type bestfit struct{}

func init() { register("bestfit", func(*Cluster, Options) Policy { return bestfit{} }) }

func (bestfit) Name() string        { return "bestfit" }
func (bestfit) Deterministic() bool { return true }

func (bestfit) Rank(n NodeView, s *Shape, c Candidate) float64 {
	left := cpuLeft(n, s) + gpuLeft(n, s, c)
	return -left*1e6 - chosenFreeAfter(n, s, c)
}

func (bestfit) NodeScore(n NodeView, s *Shape, c Candidate, rank float64) int64 { return int64(rank) }

// cpuLeft is the node's free CPU fraction after placement.
func cpuLeft(n NodeView, s *Shape) float64 {
	if n.CPU == 0 {
		return 0
	}
	return float64(n.FreeCPU-s.CPUMilli) / float64(n.CPU)
}

// gpuLeft is the node's free GPU compute fraction after placement.
func gpuLeft(n NodeView, s *Shape, c Candidate) float64 {
	if len(n.GPUs) == 0 {
		return 0
	}
	free := n.FreeMilli() - int64(s.GPUMilli)*int64(popcount(c))
	return float64(free) / float64(1000*len(n.GPUs))
}

// chosenFreeAfter is the free compute, in GPUs, the chosen GPUs keep.
func chosenFreeAfter(n NodeView, s *Shape, c Candidate) float64 {
	var sum int32
	for m := uint64(c); m != 0; m &= m - 1 {
		sum += n.GPUs[trailingZeros(m)].FreeMilli - s.GPUMilli
	}
	return float64(sum) / 1000
}
