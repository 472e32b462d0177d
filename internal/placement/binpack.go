package placement

import "math/bits"

// binpack fills GPUs before opening new ones: the node whose GPUs are most
// allocated after placement wins, and on it the most used GPUs that fit.
type binpack struct{}

func init() { register("binpack", func(*Cluster, Options) Policy { return binpack{} }) }

func (binpack) Name() string        { return "binpack" }
func (binpack) Deterministic() bool { return true }

func (binpack) Rank(n NodeView, s *Shape, c Candidate) float64 {
	return (1-gpuLeft(n, s, c))*1e6 + (1-cpuLeft(n, s))*1e3 - chosenFreeAfter(n, s, c)
}

func (binpack) NodeScore(n NodeView, s *Shape, c Candidate, rank float64) int64 { return int64(rank) }

func popcount(c Candidate) int   { return bits.OnesCount64(uint64(c)) }
func trailingZeros(m uint64) int { return bits.TrailingZeros64(m) }
