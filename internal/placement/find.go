package placement

import "github.com/tessera-gpu/tessera/internal/partition"

// Find is Schedule for a caller that retries: it says only whether the
// request fits, without the per-filter explanation Schedule builds by
// visiting every node (the cost a scheduling loop must not pay for each pod
// that stays pending). The decision is the one Schedule would return.
func (s *Scheduler) Find(r *Request) (Decision, bool) {
	if r.Validate() != nil {
		return Decision{}, false
	}
	sh := s.cluster.ShapeOf(r)
	return s.decide(&sh)
}

// ScheduleOn decides where on node i the request goes, as the policy would
// choose among that node's GPUs; false when the node cannot host it (or is
// cordoned). A capacity reservation held for a pod uses it to place the pod
// on the node it waited for.
func (s *Scheduler) ScheduleOn(i int, r *Request) (Decision, bool) {
	if i < 0 || i >= len(s.cluster.Nodes) || r.Validate() != nil {
		return Decision{}, false
	}
	sh := s.cluster.ShapeOf(r)
	sc, c := s.evalNode(i, &sh)
	if sc == infeasible {
		return Decision{}, false
	}
	return Decision{Node: i, NodeName: s.cluster.Nodes[i].Name, Grant: grant(&s.cluster.Nodes[i], &sh, c)}, true
}

// FitsState reports whether a node of node i's GPU model, in state n (a
// copy the caller changed, e.g. with some pods' grants released), could host
// the request. Preemption uses it to test a victim set before evicting
// anyone.
func (c *Cluster) FitsState(i int, n *partition.Node, r *Request) bool {
	if i < 0 || i >= len(c.Nodes) || c.cordoned[i] {
		return false
	}
	sh := c.ShapeOf(r)
	if ok, _ := c.nodeFit(i, sh.Constraint); !ok {
		return false
	}
	m := c.modelOf[i]
	if feasible(n, m, &sh) >= 0 {
		return false
	}
	var buf [8]Candidate
	return len(candidates(n, &sh, buf[:0])) > 0
}

// Admits reports whether node i's GPU model is one the request accepts,
// the node is not cordoned and its NodeFilter admits the request's node
// constraints.
func (c *Cluster) Admits(i int, r *Request) bool {
	if c.cordoned[i] {
		return false
	}
	sh := c.ShapeOf(r)
	if ok, _ := c.nodeFit(i, sh.Constraint); !ok {
		return false
	}
	return !sh.usesGPUs() || sh.Admits(c.modelOf[i])
}
