package interpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// cluster is a fixed set of nodes; every node is a candidate.
type cluster struct {
	nodes []*corev1.Node
	ns    map[string]labels.Set
}

func (c *cluster) Node(name string) *corev1.Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}
func (c *cluster) Candidates() []*corev1.Node           { return c.nodes }
func (c *cluster) NamespaceLabels(ns string) labels.Set { return c.ns[ns] }

// zones: n1, n2 in zone a; n3 in zone b; n4 without a zone label.
func zones() *cluster {
	mk := func(name, zone string) *corev1.Node {
		l := map[string]string{"kubernetes.io/hostname": name}
		if zone != "" {
			l["zone"] = zone
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	return &cluster{nodes: []*corev1.Node{mk("n1", "a"), mk("n2", "a"), mk("n3", "b"), mk("n4", "")},
		ns: map[string]labels.Set{"team-x": {"team": "x"}, "default": {}}}
}

type podOpt func(*corev1.Pod)

func pod(ns, name string, lbl map[string]string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func app(v string) map[string]string { return map[string]string{"app": v} }

func selects(v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}
}

func antiAffinity(v, key string) podOpt {
	return func(p *corev1.Pod) {
		aff(p).PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: selects(v), TopologyKey: key}}}
	}
}

func affinity(t corev1.PodAffinityTerm) podOpt {
	return func(p *corev1.Pod) {
		aff(p).PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{t}}
	}
}

func preferAffinity(w int32, v, key string) podOpt {
	return func(p *corev1.Pod) {
		aff(p).PodAffinity = &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: w, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: selects(v), TopologyKey: key}}}}
	}
}

func spread(c corev1.TopologySpreadConstraint) podOpt {
	return func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c) }
}

func zoneSpread(v string, skew int32, when corev1.UnsatisfiableConstraintAction) corev1.TopologySpreadConstraint {
	return corev1.TopologySpreadConstraint{MaxSkew: skew, TopologyKey: "zone", WhenUnsatisfiable: when, LabelSelector: selects(v)}
}

func aff(p *corev1.Pod) *corev1.Affinity {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	return p.Spec.Affinity
}

// rules admits every node except those named.
type rules map[string]bool

func (r rules) MatchesAffinity(n *corev1.Node) bool { return !r[n.Name] }
func (r rules) ToleratesTaints(*corev1.Node) bool   { return true }

func describe(t *testing.T, p *corev1.Pod) *Pod {
	t.Helper()
	d, err := Describe(p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Each rule, as kube-scheduler's filters apply it: pods placed on nodes,
// an incoming pod, and every node's refusal.
func TestRefusals(t *testing.T) {
	one := int32(1)
	three := int32(3)
	ignore := corev1.NodeInclusionPolicyIgnore
	type placement struct {
		pod  *corev1.Pod
		node string
	}
	cases := []struct {
		name     string
		placed   []placement
		incoming *corev1.Pod
		rules    rules
		want     [4]string // n1..n4
	}{
		{
			name:     "anti-affinity per host refuses the node holding a match",
			placed:   []placement{{pod("default", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), antiAffinity("web", "kubernetes.io/hostname")),
			want:     [4]string{AntiAffinityMismatch, "", "", ""},
		},
		{
			name:     "anti-affinity per zone refuses the whole zone; a node without the key is not in it",
			placed:   []placement{{pod("default", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), antiAffinity("web", "zone")),
			want:     [4]string{AntiAffinityMismatch, AntiAffinityMismatch, "", ""},
		},
		{
			name:     "anti-affinity selects pods of its own namespace only",
			placed:   []placement{{pod("team-x", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), antiAffinity("web", "zone")),
		},
		{
			name:     "an existing pod's anti-affinity refuses a pod without terms",
			placed:   []placement{{pod("default", "db1", app("db"), antiAffinity("web", "zone")), "n3"}},
			incoming: pod("default", "w1", app("web")),
			want:     [4]string{"", "", ExistingAntiAffinity, ""},
		},
		{
			name:     "affinity needs a matching pod in the node's domain, and the topology key on the node",
			placed:   []placement{{pod("default", "db1", app("db")), "n3"}},
			incoming: pod("default", "w1", app("web"), affinity(corev1.PodAffinityTerm{LabelSelector: selects("db"), TopologyKey: "zone"})),
			want:     [4]string{AffinityMismatch, AffinityMismatch, "", AffinityMismatch},
		},
		{
			name:     "the first pod of a group that attracts itself goes anywhere with the key",
			incoming: pod("default", "w1", app("web"), affinity(corev1.PodAffinityTerm{LabelSelector: selects("web"), TopologyKey: "zone"})),
			want:     [4]string{"", "", "", AffinityMismatch},
		},
		{
			name:     "affinity to pods that exist nowhere refuses every node",
			incoming: pod("default", "w1", app("web"), affinity(corev1.PodAffinityTerm{LabelSelector: selects("db"), TopologyKey: "zone"})),
			want:     [4]string{AffinityMismatch, AffinityMismatch, AffinityMismatch, AffinityMismatch},
		},
		{
			name:   "namespaceSelector selects namespaces by label",
			placed: []placement{{pod("team-x", "db1", app("db")), "n1"}},
			incoming: pod("default", "w1", app("web"), affinity(corev1.PodAffinityTerm{LabelSelector: selects("db"), TopologyKey: "zone",
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}})),
			want: [4]string{"", "", AffinityMismatch, AffinityMismatch},
		},
		{
			name:     "namespaces by name",
			placed:   []placement{{pod("team-x", "db1", app("db")), "n3"}},
			incoming: pod("default", "w1", app("web"), affinity(corev1.PodAffinityTerm{LabelSelector: selects("db"), TopologyKey: "zone", Namespaces: []string{"team-x"}})),
			want:     [4]string{AffinityMismatch, AffinityMismatch, "", AffinityMismatch},
		},
		{
			name:     "spread maxSkew 1: a zone one pod ahead refuses the next; a node without the key is refused",
			placed:   []placement{{pod("default", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), spread(zoneSpread("web", 1, corev1.DoNotSchedule))),
			want:     [4]string{SpreadMismatch, SpreadMismatch, "", SpreadMissingLabel},
		},
		{
			name:     "spread balanced: every zone admits",
			placed:   []placement{{pod("default", "w1", app("web")), "n1"}, {pod("default", "w2", app("web")), "n3"}},
			incoming: pod("default", "w3", app("web"), spread(zoneSpread("web", 1, corev1.DoNotSchedule))),
			want:     [4]string{"", "", "", SpreadMissingLabel},
		},
		{
			name:   "spread minDomains above the domains there are counts the minimum as 0",
			placed: []placement{{pod("default", "w1", app("web")), "n1"}, {pod("default", "w2", app("web")), "n3"}},
			incoming: pod("default", "w3", app("web"), spread(corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: selects("web"), MinDomains: &three})),
			want: [4]string{SpreadMismatch, SpreadMismatch, SpreadMismatch, SpreadMissingLabel},
		},
		{
			name:     "spread honours node affinity by default: a zone the pod may not use is no domain",
			placed:   []placement{{pod("default", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), spread(zoneSpread("web", 1, corev1.DoNotSchedule))),
			rules:    rules{"n3": true},
			want:     [4]string{"", "", "", SpreadMissingLabel},
		},
		{
			name:   "spread with nodeAffinityPolicy Ignore counts that zone",
			placed: []placement{{pod("default", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), spread(corev1.TopologySpreadConstraint{MaxSkew: one, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: selects("web"), NodeAffinityPolicy: &ignore})),
			rules: rules{"n3": true},
			want:  [4]string{SpreadMismatch, SpreadMismatch, "", SpreadMissingLabel},
		},
		{
			name:     "spread counts only pods the selector matches in the pod's namespace",
			placed:   []placement{{pod("default", "d1", app("db")), "n1"}, {pod("team-x", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), spread(zoneSpread("web", 1, corev1.DoNotSchedule))),
			want:     [4]string{"", "", "", SpreadMissingLabel},
		},
		{
			name:     "ScheduleAnyway never refuses",
			placed:   []placement{{pod("default", "w1", app("web")), "n1"}},
			incoming: pod("default", "w2", app("web"), spread(zoneSpread("web", 1, corev1.ScheduleAnyway))),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := zones()
			x := NewIndex(c)
			for _, pl := range tc.placed {
				x.Place(describe(t, pl.pod), pl.node)
			}
			x.Want("k", describe(t, tc.incoming), tc.rules)
			s := x.State("k")
			for i, n := range c.nodes {
				if got := s.Refusal(n); got != tc.want[i] {
					t.Errorf("%s: refusal %q, want %q", n.Name, got, tc.want[i])
				}
			}
		})
	}
}

// A state follows pods placed and removed after it was built, and tells
// which keys changed; pods it does not read change nothing.
func TestStateFollowsPlacements(t *testing.T) {
	c := zones()
	x := NewIndex(c)
	x.Want("web", describe(t, pod("default", "w", app("web"), antiAffinity("web", "zone"))), nil)
	s := x.State("web")
	if got := s.Refusal(c.nodes[0]); got != "" {
		t.Fatalf("empty cluster refuses: %q", got)
	}
	if changed := x.Place(describe(t, pod("default", "other", app("db"))), "n1"); len(changed) != 0 {
		t.Fatalf("an unselected pod changed %v", changed)
	}
	if changed := x.Place(describe(t, pod("default", "w1", app("web"))), "n2"); len(changed) != 1 || changed[0] != "web" {
		t.Fatalf("a selected pod changed %v, want [web]", changed)
	}
	if got := s.Refusal(c.nodes[0]); got != AntiAffinityMismatch {
		t.Fatalf("n1 after w1 joined zone a: %q", got)
	}
	x.Unplace("default/w1")
	if got := s.Refusal(c.nodes[0]); got != "" {
		t.Fatalf("n1 after w1 left: %q", got)
	}
	// The state is shared by pods of one key: the pod that stands for them,
	// once placed, counts like any other.
	x.Place(s.pod, "n3")
	if got := s.Refusal(c.nodes[2]); got != AntiAffinityMismatch {
		t.Fatalf("n3 after the key's own pod was placed there: %q", got)
	}
	x.Unplace(s.pod.Key)
	// Moving a pod (placed again elsewhere) counts it once, where it is now.
	w1 := describe(t, pod("default", "w1", app("web")))
	x.Place(w1, "n1")
	x.Place(w1, "n3")
	if s.Refusal(c.nodes[0]) != "" || s.Refusal(c.nodes[2]) != AntiAffinityMismatch {
		t.Fatalf("after a move: n1 %q, n3 %q", s.Refusal(c.nodes[0]), s.Refusal(c.nodes[2]))
	}
}

// Preferred terms and ScheduleAnyway rank nodes: kube-scheduler's scores,
// normalised to 0..100.
func TestPreferences(t *testing.T) {
	c := zones()
	x := NewIndex(c)
	x.Place(describe(t, pod("default", "db1", app("db"))), "n3")
	x.Want("near-db", describe(t, pod("default", "w", app("web"), preferAffinity(50, "db", "zone"))), nil)
	s := x.State("near-db")
	if got := []int64{s.Preference(c.nodes[0]), s.Preference(c.nodes[2])}; got[0] != 0 || got[1] != 100 {
		t.Fatalf("preferred affinity: n1 %d, n3 %d; want 0, 100", got[0], got[1])
	}
	// Soft spread: zone a holds two web pods, zone b none: b ranks first.
	x.Place(describe(t, pod("default", "w1", app("web"))), "n1")
	x.Place(describe(t, pod("default", "w2", app("web"))), "n2")
	x.Want("spread", describe(t, pod("default", "w3", app("web"), spread(zoneSpread("web", 1, corev1.ScheduleAnyway)))), nil)
	sp := x.State("spread")
	a, b, none := sp.Preference(c.nodes[0]), sp.Preference(c.nodes[2]), sp.Preference(c.nodes[3])
	if !(b > a) || none != 0 {
		t.Fatalf("soft spread: zone a %d, zone b %d, no zone %d; want b > a and 0 without the key", a, b, none)
	}
	// A later placement in zone b changes the ranking.
	x.Place(describe(t, pod("default", "w4", app("web"))), "n3")
	x.Place(describe(t, pod("default", "w5", app("web"))), "n3")
	x.Place(describe(t, pod("default", "w6", app("web"))), "n3")
	if a2, b2 := sp.Preference(c.nodes[0]), sp.Preference(c.nodes[2]); !(a2 > b2) {
		t.Fatalf("after zone b filled: zone a %d, zone b %d; want a > b", a2, b2)
	}
}

// Pods whose terms select others are registered once per distinct term
// set; Targeted finds the pods they select.
func TestTargeting(t *testing.T) {
	x := NewIndex(zones())
	if x.Target("none", describe(t, pod("default", "plain", app("web")))) {
		t.Fatal("a pod without terms registered as targeting")
	}
	anti := describe(t, pod("default", "db", app("db"), antiAffinity("web", "zone")))
	if !x.Target("sig", anti) || x.Target("sig", anti) {
		t.Fatal("a new term set is new once")
	}
	if !x.Targeted(describe(t, pod("default", "w", app("web")))) {
		t.Fatal("web pod not targeted")
	}
	if x.Targeted(describe(t, pod("default", "c", app("cache")))) || x.Targeted(describe(t, pod("team-x", "w", app("web")))) {
		t.Fatal("a pod the terms do not select is targeted")
	}
}

// Bad selectors are errors naming the field.
func TestDescribeRejectsBadSelectors(t *testing.T) {
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
	p := pod("default", "p", nil, affinity(corev1.PodAffinityTerm{LabelSelector: bad, TopologyKey: "zone"}))
	if _, err := Describe(p); err == nil || !strings.Contains(err.Error(), "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]") {
		t.Fatalf("err = %v", err)
	}
	q := pod("default", "q", nil, spread(corev1.TopologySpreadConstraint{MaxSkew: 0, TopologyKey: "zone", LabelSelector: selects("a")}))
	if _, err := Describe(q); err == nil || !strings.Contains(err.Error(), "spec.topologySpreadConstraints[0]") {
		t.Fatalf("err = %v", err)
	}
}

// A pod is counted out of the domain it was counted in, though its node
// went or moved to another domain meanwhile: the old domain is not held
// forever, and a node's change drops the states (NodeChanged).
func TestPodCountedOutWhereItWasCountedIn(t *testing.T) {
	for _, change := range []string{"deleted", "relabelled"} {
		t.Run(change, func(t *testing.T) {
			c := zones()
			x := NewIndex(c)
			x.Want("web", describe(t, pod("default", "w", app("web"), antiAffinity("web", "zone"))), nil)
			s := x.State("web")
			x.Place(describe(t, pod("default", "w1", app("web"))), "n3")
			if got := s.Refusal(c.nodes[2]); got != AntiAffinityMismatch {
				t.Fatalf("n3 beside w1: %q", got)
			}
			n3 := c.nodes[2]
			if change == "deleted" {
				c.nodes = c.nodes[:2:2]
			} else {
				moved := n3.DeepCopy()
				moved.Labels["zone"] = "a"
				c.nodes = []*corev1.Node{c.nodes[0], c.nodes[1], moved, c.nodes[3]}
			}
			if changed := x.NodeChanged("n3"); len(changed) != 1 || changed[0] != "web" {
				t.Fatalf("node change changed %v, want [web]", changed)
			}
			x.Unplace("default/w1")
			s = x.State("web")
			for _, n := range append(c.nodes, n3) {
				if got := s.Refusal(n); got != "" {
					t.Fatalf("%s (zone %s) still refused after w1 left: %q", n.Name, n.Labels["zone"], got)
				}
			}
		})
	}
}
