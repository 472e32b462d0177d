package placement

// spread is binpack's opposite: the least allocated node and the emptiest
// GPUs win, which keeps load even and leaves every GPU partly used.
type spread struct{}

func init() { register("spread", func(*Cluster, Options) Policy { return spread{} }) }

func (spread) Name() string        { return "spread" }
func (spread) Deterministic() bool { return true }

func (spread) Rank(n NodeView, s *Shape, c Candidate) float64 {
	return gpuLeft(n, s, c)*1e6 + cpuLeft(n, s)*1e3 + chosenFreeAfter(n, s, c)
}

func (spread) NodeScore(n NodeView, s *Shape, c Candidate, rank float64) int64 { return int64(rank) }
