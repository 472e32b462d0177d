package placement

// tessera is the project's default policy; see docs/scheduler.md for how it
// was derived from measurements of fgd.
type tessera struct {
	frag *Fragmentation
}

func init() {
	register("tessera", func(c *Cluster, o Options) Policy { return &tessera{frag: NewFragmentation(workloadOr(o))} })
}

func (p *tessera) Name() string        { return "tessera" }
func (p *tessera) Deterministic() bool { return true }

func (p *tessera) Rank(n NodeView, s *Shape, c Candidate) float64 {
	return p.frag.Node(n.Node, n.Model) - p.frag.After(n.Node, n.Model, s, c)
}

func (p *tessera) NodeScore(rank float64) int64 { return int64(100 * sigmoid(rank/1000)) }
