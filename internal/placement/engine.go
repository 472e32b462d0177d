package placement

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrUnschedulable is returned (wrapped) when no node can host a request.
var ErrUnschedulable = errors.New("no node can host the pod")

// Scheduler runs the pipeline for one policy over one cluster. It is not safe
// for concurrent use: decisions are made one at a time, as a Kubernetes
// scheduling cycle makes them, and each must be reserved before the next.
type Scheduler struct {
	cluster *Cluster
	policy  Policy
	index   *Index // nil: every decision scans every node
	buf     []Candidate
}

// NewScheduler builds a scheduler. Deterministic policies get a score index
// unless scan is true (scan exists to check the index against).
func NewScheduler(c *Cluster, p Policy, scan bool) *Scheduler {
	s := &Scheduler{cluster: c, policy: p}
	if p.Deterministic() && !scan {
		s.index = NewIndex(c, s.evalNode)
	}
	return s
}

// Cluster is the cluster the scheduler places on.
func (s *Scheduler) Cluster() *Cluster { return s.cluster }

// IndexedShapes is how many request shapes the score index caches (0 when
// the scheduler scans).
func (s *Scheduler) IndexedShapes() int {
	if s.index == nil {
		return 0
	}
	return s.index.Shapes()
}

// Policy is the scheduler's policy.
func (s *Scheduler) Policy() Policy { return s.policy }

const infeasible = math.MinInt64

// evalNode filters, chooses and scores node i for shape sh. It returns
// infeasible when the node cannot host the pod.
func (s *Scheduler) evalNode(i int, sh *Shape) (int64, Candidate) {
	n := &s.cluster.Nodes[i]
	m := s.cluster.modelOf[i]
	fits, pref := s.cluster.nodeFit(i, sh.Constraint)
	if s.cluster.cordoned[i] || !fits || feasible(n, m, sh) >= 0 {
		return infeasible, 0
	}
	s.buf = candidates(n, sh, s.buf[:0])
	if len(s.buf) == 0 {
		return infeasible, 0
	}
	v := NodeView{Index: i, Model: m, Node: n}
	best, bestRank := s.buf[0], math.Inf(-1)
	for _, c := range s.buf {
		if r := s.policy.Rank(v, sh, c); r > bestRank {
			best, bestRank = c, r
		}
	}
	return s.policy.NodeScore(v, sh, best, bestRank) + pref<<preferenceShift, best
}

// Schedule decides where r goes without reserving anything.
func (s *Scheduler) Schedule(r *Request) (Decision, error) {
	if err := r.Validate(); err != nil {
		return Decision{}, err
	}
	sh := s.cluster.ShapeOf(r)
	d, ok := s.decide(&sh)
	if !ok {
		return Decision{}, fmt.Errorf("pod %s: %w (%s)", r.Name, ErrUnschedulable, s.explain(&sh))
	}
	return d, nil
}

// decide picks the best node for shape sh (through the index when there is
// one) and the policy's choice of GPUs on it; false when no node fits.
func (s *Scheduler) decide(sh *Shape) (Decision, bool) {
	node := -1
	if s.index != nil {
		node = s.index.Best(sh)
	} else {
		node = s.scan(sh)
	}
	if node < 0 {
		return Decision{}, false
	}
	_, c := s.evalNode(node, sh)
	return Decision{Node: node, NodeName: s.cluster.Nodes[node].Name, Grant: grant(&s.cluster.Nodes[node], sh, c)}, true
}

// Place schedules r and reserves the result.
func (s *Scheduler) Place(r *Request) (Decision, error) {
	d, err := s.Schedule(r)
	if err != nil {
		return d, err
	}
	return d, s.cluster.Reserve(d)
}

func (s *Scheduler) scan(sh *Shape) int {
	if ns, ok := s.policy.(NodeSampler); ok {
		return s.sample(ns, sh)
	}
	best, bestScore := -1, int64(infeasible)
	for i := range s.cluster.Nodes {
		if sc, _ := s.evalNode(i, sh); sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

func (s *Scheduler) sample(ns NodeSampler, sh *Shape) int {
	chosen, k := -1, 0
	for i := range s.cluster.Nodes {
		if ok, _ := s.cluster.nodeFit(i, sh.Constraint); !ok || s.cluster.cordoned[i] || feasible(&s.cluster.Nodes[i], s.cluster.modelOf[i], sh) >= 0 {
			continue
		}
		if k++; ns.Keep(k) {
			chosen = i
		}
	}
	if chosen >= 0 {
		if sc, _ := s.evalNode(chosen, sh); sc == infeasible {
			return -1 // feasible by the filters but no candidate GPU set
		}
	}
	return chosen
}

// explain counts, per filter, the nodes it rejected: what an operator asks
// when a pod stays pending.
func (s *Scheduler) explain(sh *Shape) string {
	counts := make([]int, len(Filters))
	cordoned, refused := 0, 0
	for i := range s.cluster.Nodes {
		if s.cluster.cordoned[i] {
			cordoned++
		} else if ok, _ := s.cluster.nodeFit(i, sh.Constraint); !ok {
			refused++
		} else if f := feasible(&s.cluster.Nodes[i], s.cluster.modelOf[i], sh); f >= 0 {
			counts[f]++
		}
	}
	var parts []string
	if cordoned > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes cordoned", cordoned))
	}
	if refused > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes refuse the pod's node constraints", refused))
	}
	for i, k := range counts {
		if k > 0 {
			parts = append(parts, fmt.Sprintf("%d nodes fail %s", k, Filters[i].Name))
		}
	}
	if len(parts) == 0 {
		return "no candidate GPU set"
	}
	return strings.Join(parts, ", ")
}
