package placement

import "fmt"

// ScheduleOn decides where r would go on node i alone, without reserving:
// the pipeline's decision if node i were the only node (cordoned nodes
// refuse). Preemption uses it to check a plan before returning it (release
// the victims, ask, reserve them back); gangs use it to keep members on the
// node they share.
func (s *Scheduler) ScheduleOn(node int, r *Request) (Decision, error) {
	if err := r.Validate(); err != nil {
		return Decision{}, err
	}
	if node < 0 || node >= len(s.cluster.Nodes) {
		return Decision{}, fmt.Errorf("pod %s: no node %d", r.Name, node)
	}
	sh := s.cluster.ShapeOf(r)
	n := &s.cluster.Nodes[node]
	if s.cluster.cordoned[node] {
		return Decision{}, fmt.Errorf("pod %s on node %s: %w (cordoned)", r.Name, n.Name, ErrUnschedulable)
	}
	if f := feasible(n, s.cluster.modelOf[node], &sh); f >= 0 {
		return Decision{}, fmt.Errorf("pod %s on node %s: %w (fails %s)", r.Name, n.Name, ErrUnschedulable, Filters[f].Name)
	}
	score, c := s.evalNode(node, &sh)
	if score == infeasible {
		return Decision{}, fmt.Errorf("pod %s on node %s: %w (no candidate GPU set)", r.Name, n.Name, ErrUnschedulable)
	}
	return Decision{Node: node, NodeName: n.Name, Grant: grant(&sh, c)}, nil
}
