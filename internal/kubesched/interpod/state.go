package interpod

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Cluster is what the rules read about nodes and namespaces.
type Cluster interface {
	// Node is a node the API server knows (nil when unknown): a pod on any
	// node counts for affinity in its topology domain.
	Node(name string) *corev1.Node
	// Candidates are the nodes pods may be placed on: their topology
	// values are the spread domains, and preferences are normalised over
	// them.
	Candidates() []*corev1.Node
	// NamespaceLabels are a namespace's labels, for namespaceSelector.
	NamespaceLabels(ns string) labels.Set
}

// NodeRules are the incoming pod's node constraints, which decide (by the
// spread constraints' nodeAffinityPolicy and nodeTaintsPolicy) whose pods
// and which domains count.
type NodeRules interface {
	MatchesAffinity(n *corev1.Node) bool
	ToleratesTaints(n *corev1.Node) bool
}

// pair is a topology domain: a label key and its value.
type pair struct{ key, value string }

// State is one incoming pod's view of the placed pods, kept up to date as
// pods come and go: kube-scheduler's PreFilter and PreScore states, made
// incremental. Pods equal in namespace, labels and terms share one.
type State struct {
	pod     *Pod
	rules   NodeRules
	cluster Cluster
	// affinity counts, per domain of the pod's required affinity terms,
	// placed pods that match all of them; anti the placed pods its
	// required anti-affinity terms select; existing the placed pods whose
	// required anti-affinity selects it.
	affinity, anti, existing map[pair]int
	// score is the preferred terms' weight per domain (both directions).
	score map[pair]int64
	// spread counts matching pods per domain value, per constraint;
	// eligible[hard] says which nodes' pods and domains count.
	spread   []map[string]int
	eligible [2]map[string]bool
	// prefs are normalised preferences by node name (nil: to compute).
	prefs map[string]int64
	// lastUsed is the index's clock when the state was last read.
	lastUsed uint64
}

func newState(p *Pod, rules NodeRules, c Cluster) *State {
	s := &State{pod: p, rules: rules, cluster: c, affinity: map[pair]int{}, anti: map[pair]int{}, existing: map[pair]int{}, score: map[pair]int64{}}
	s.spread = make([]map[string]int, len(p.spread))
	for i := range s.spread {
		s.spread[i] = map[string]int{}
	}
	if len(p.spread) > 0 {
		s.eligible = [2]map[string]bool{{}, {}}
		for _, n := range c.Candidates() {
			for h, hard := range []bool{false, true} {
				if s.eligibleNode(n, hard) {
					s.eligible[h][n.Name] = true
					for i, sc := range p.spread {
						if sc.hard == hard {
							s.spread[i][n.Labels[sc.topologyKey]] += 0 // the domain exists, maybe empty
						}
					}
				}
			}
		}
	}
	return s
}

// eligibleNode: a node whose pods and domain count for the constraints of
// one kind (hard or soft) has every one of their topology keys and passes
// their inclusion policies.
func (s *State) eligibleNode(n *corev1.Node, hard bool) bool {
	for _, c := range s.pod.spread {
		if c.hard != hard {
			continue
		}
		if _, ok := n.Labels[c.topologyKey]; !ok {
			return false
		}
		if c.honorAffinity && s.rules != nil && !s.rules.MatchesAffinity(n) {
			return false
		}
		if c.honorTaints && s.rules != nil && !s.rules.ToleratesTaints(n) {
			return false
		}
	}
	return true
}

// apply counts placed pod o on node n in (sign 1) or out (sign -1); it
// reports whether anything this state reads changed.
func (s *State) apply(o *Pod, n *corev1.Node, sign int) bool {
	if n == nil {
		return false
	}
	nsLabels := s.cluster.NamespaceLabels
	changed := false
	add := func(m map[pair]int, key string) {
		v, ok := n.Labels[key]
		if !ok {
			return
		}
		p := pair{key, v}
		if m[p] += sign; m[p] == 0 {
			delete(m, p) // an empty map means "no such pod anywhere"
		}
		changed = true
	}
	addScore := func(key string, w int64) {
		v, ok := n.Labels[key]
		if !ok {
			return
		}
		p := pair{key, v}
		if s.score[p] += int64(sign) * w; s.score[p] == 0 {
			delete(s.score, p)
		}
		changed = true
	}
	p := s.pod
	if len(p.affinity) > 0 && allMatch(p.affinity, o, nsLabels) {
		for _, t := range p.affinity {
			add(s.affinity, t.topologyKey)
		}
	}
	for _, t := range p.antiAffinity {
		if t.matches(o, nsLabels) {
			add(s.anti, t.topologyKey)
		}
	}
	for _, t := range o.antiAffinity {
		if t.matches(p, nsLabels) {
			add(s.existing, t.topologyKey)
		}
	}
	for _, t := range p.prefAffinity {
		if t.matches(o, nsLabels) {
			addScore(t.topologyKey, t.weight)
		}
	}
	for _, t := range p.prefAntiAffinity {
		if t.matches(o, nsLabels) {
			addScore(t.topologyKey, -t.weight)
		}
	}
	for _, t := range o.affinity {
		if t.matches(p, nsLabels) {
			addScore(t.topologyKey, hardPodAffinityWeight)
		}
	}
	for _, t := range o.prefAffinity {
		if t.matches(p, nsLabels) {
			addScore(t.topologyKey, t.weight)
		}
	}
	for _, t := range o.prefAntiAffinity {
		if t.matches(p, nsLabels) {
			addScore(t.topologyKey, -t.weight)
		}
	}
	for i, c := range p.spread {
		if o.Terminating || o.Namespace != p.Namespace || !s.eligible[b2i(c.hard)][n.Name] || !c.selector.Matches(o.Labels) {
			continue
		}
		s.spread[i][n.Labels[c.topologyKey]] += sign
		changed = true
	}
	if changed {
		s.prefs = nil
	}
	return changed
}

func allMatch(ts []term, o *Pod, nsLabels func(string) labels.Set) bool {
	for i := range ts {
		if !ts[i].matches(o, nsLabels) {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Refusal is why node n refuses the pod ("" when it admits it), checked
// in kube-scheduler's filter order: PodTopologySpread, then
// InterPodAffinity (affinity, anti-affinity, existing pods'
// anti-affinity).
func (s *State) Refusal(n *corev1.Node) string {
	p := s.pod
	for i, c := range p.spread {
		if !c.hard {
			continue
		}
		v, ok := n.Labels[c.topologyKey]
		if !ok {
			return SpreadMissingLabel
		}
		self := 0
		if c.selector.Matches(p.Labels) {
			self = 1
		}
		if skew := s.spread[i][v] + self - s.minMatch(i); skew > int(c.maxSkew) {
			return SpreadMismatch
		}
	}
	if len(p.affinity) > 0 && !s.affinitySatisfied(n) {
		return AffinityMismatch
	}
	for _, t := range p.antiAffinity {
		if v, ok := n.Labels[t.topologyKey]; ok && s.anti[pair{t.topologyKey, v}] > 0 {
			return AntiAffinityMismatch
		}
	}
	for tp := range s.existing {
		if v, ok := n.Labels[tp.key]; ok && v == tp.value {
			return ExistingAntiAffinity
		}
	}
	return ""
}

// minMatch is the fewest matching pods in a domain of constraint i (0
// while fewer domains than minDomains exist).
func (s *State) minMatch(i int) int {
	c := s.pod.spread[i]
	if int32(len(s.spread[i])) < c.minDomains {
		return 0
	}
	least := math.MaxInt32
	for _, k := range s.spread[i] {
		least = min(least, k)
	}
	if least == math.MaxInt32 {
		return 0 // no domain at all: nothing to be skewed against
	}
	return least
}

// affinitySatisfied: every term's topology is on the node and holds a
// matching pod; or no matching pod exists anywhere and the pod matches
// its own terms (the first of a group that attracts itself).
func (s *State) affinitySatisfied(n *corev1.Node) bool {
	exist := true
	for _, t := range s.pod.affinity {
		v, ok := n.Labels[t.topologyKey]
		if !ok {
			return false
		}
		if s.affinity[pair{t.topologyKey, v}] <= 0 {
			exist = false
		}
	}
	if exist {
		return true
	}
	return len(s.affinity) == 0 && allMatch(s.pod.affinity, s.pod, s.cluster.NamespaceLabels)
}

// Preference is node n's rank for the pod from its preferred terms and
// ScheduleAnyway constraints: kube-scheduler's InterPodAffinity and
// PodTopologySpread scores, each normalised to 0..100 over the candidate
// nodes and summed.
func (s *State) Preference(n *corev1.Node) int64 {
	if len(s.score) == 0 && !s.hasSoftSpread() {
		return 0
	}
	if s.prefs == nil {
		s.normalise(s.cluster)
	}
	return s.prefs[n.Name]
}

func (s *State) hasSoftSpread() bool {
	for _, c := range s.pod.spread {
		if !c.hard {
			return true
		}
	}
	return false
}

const maxNodeScore = 100

// normalise computes every candidate's preference.
func (s *State) normalise(c Cluster) {
	nodes := c.Candidates()
	s.prefs = make(map[string]int64, len(nodes))
	affinity := make([]int64, len(nodes))
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for i, n := range nodes {
		for tp, w := range s.score {
			if v, ok := n.Labels[tp.key]; ok && v == tp.value {
				affinity[i] += w
			}
		}
		lo, hi = min(lo, affinity[i]), max(hi, affinity[i])
	}
	for i, n := range nodes {
		if hi > lo {
			s.prefs[n.Name] = maxNodeScore * (affinity[i] - lo) / (hi - lo)
		}
	}
	if !s.hasSoftSpread() {
		return
	}
	// PodTopologySpread: fewer matching pods in a node's domains is
	// better; nodes without the topology keys score 0.
	spread := make([]int64, len(nodes))
	ignored := make([]bool, len(nodes))
	lo, hi = int64(math.MaxInt64), 0
	for i, n := range nodes {
		if !s.eligibleKeys(n) {
			ignored[i] = true
			continue
		}
		var sum float64
		for k, sc := range s.pod.spread {
			if sc.hard {
				continue
			}
			sum += float64(s.spread[k][n.Labels[sc.topologyKey]])*spreadWeight(len(s.spread[k])) + float64(sc.maxSkew-1)
		}
		spread[i] = int64(math.Round(sum))
		lo, hi = min(lo, spread[i]), max(hi, spread[i])
	}
	for i, n := range nodes {
		switch {
		case ignored[i]:
		case hi == 0:
			s.prefs[n.Name] += maxNodeScore
		default:
			s.prefs[n.Name] += maxNodeScore * (hi + lo - spread[i]) / hi
		}
	}
}

// eligibleKeys: the node has every soft constraint's topology key.
func (s *State) eligibleKeys(n *corev1.Node) bool {
	for _, c := range s.pod.spread {
		if _, ok := n.Labels[c.topologyKey]; !c.hard && !ok {
			return false
		}
	}
	return true
}
