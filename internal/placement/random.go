package placement

import "math/rand/v2"

// random places each pod on a uniformly random feasible node and GPU set: the
// baseline every other policy must beat.
type random struct{ rng *rand.Rand }

func init() {
	register("random", func(c *Cluster, o Options) Policy {
		return &random{rng: rand.New(rand.NewPCG(o.Seed, 0x5eed))}
	})
}

func (p *random) Name() string                             { return "random" }
func (p *random) Deterministic() bool                      { return false }
func (p *random) Rank(NodeView, *Shape, Candidate) float64 { return p.rng.Float64() }

// Keep makes the node choice uniform over feasible nodes.
func (p *random) Keep(k int) bool { return p.rng.IntN(k) == 0 }

// NodeScore draws afresh rather than reuse the best candidate's draw: the
// maximum of more draws is larger, which would favour nodes with more
// distinct GPU states over a uniform choice.
func (p *random) NodeScore(NodeView, *Shape, Candidate, float64) int64 {
	return int64(p.rng.Float64() * (1 << 53))
}
