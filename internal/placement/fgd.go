package placement

import "math"

// fgd is Fragmentation Gradient Descent (Weng et al., USENIX ATC'23): place
// the pod where it increases fragmentation least. Within a node the candidate
// with the smallest increase wins; across nodes the increase Δ is turned into
// the published simulator's integer score int(100·sigmoid(−Δ/1000)), so
// nodes whose increases differ by less than the score's resolution tie, and
// the tie goes to the first node in cluster order.
type fgd struct {
	frag *Fragmentation
}

func init() {
	register("fgd", func(c *Cluster, o Options) Policy { return &fgd{frag: NewFragmentation(workloadOr(o))} })
}

func workloadOr(o Options) *Workload {
	if o.Workload != nil {
		return o.Workload
	}
	return uniformWorkload()
}

func (p *fgd) Name() string        { return "fgd" }
func (p *fgd) Deterministic() bool { return true }

// Rank is −Δ: the fragmentation removed (negative: added) by the placement.
func (p *fgd) Rank(n NodeView, s *Shape, c Candidate) float64 {
	return p.frag.Node(n.Node, n.Model) - p.frag.After(n.Node, n.Model, s, c)
}

func (p *fgd) NodeScore(n NodeView, s *Shape, c Candidate, rank float64) int64 {
	return int64(100 * sigmoid(rank/1000))
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
