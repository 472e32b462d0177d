package kubesched

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tessera-gpu/tessera/internal/kubesched/interpod"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

const hostname = "kubernetes.io/hostname"

func labelled(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func appSelector(v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}
}

func avoid(app, topologyKey string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: appSelector(app), TopologyKey: topologyKey}}}
	}
}

func near(app, topologyKey string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: appSelector(app), TopologyKey: topologyKey}}}
	}
}

func spreadOver(app, topologyKey string, maxSkew int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: maxSkew, TopologyKey: topologyKey, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: appSelector(app)})
	}
}

// zoned labels a node with its hostname and zone.
func (a *api) zoned(name, zone string) {
	a.t.Helper()
	a.editNode(name, func(n *corev1.Node) {
		n.Labels = map[string]string{hostname: name, "topology.kubernetes.io/zone": zone}
	})
}

const zoneKey = "topology.kubernetes.io/zone"

// violations lists pairs of bound pods where one's required anti-affinity
// selects the other in the same topology domain: what must never happen.
func (a *api) violations() []string {
	a.t.Helper()
	pods, err := a.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	nodes := map[string]map[string]string{}
	nl, _ := a.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	for _, n := range nl.Items {
		nodes[n.Name] = n.Labels
	}
	var out []string
	for _, x := range pods.Items {
		if x.Spec.NodeName == "" || x.Spec.Affinity == nil || x.Spec.Affinity.PodAntiAffinity == nil {
			continue
		}
		for _, t := range x.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			sel, _ := metav1.LabelSelectorAsSelector(t.LabelSelector)
			domain, ok := nodes[x.Spec.NodeName][t.TopologyKey]
			if !ok {
				continue
			}
			for _, y := range pods.Items {
				if y.Name == x.Name || y.Spec.NodeName == "" || !sel.Matches(labels.Set(y.Labels)) {
					continue
				}
				if v, ok := nodes[y.Spec.NodeName][t.TopologyKey]; ok && v == domain {
					out = append(out, fmt.Sprintf("%s on %s avoids %s on %s (%s=%s)", x.Name, x.Spec.NodeName, y.Name, y.Spec.NodeName, t.TopologyKey, domain))
				}
			}
		}
	}
	return out
}

// Many replicas with anti-affinity, waiting together and placed in one
// cycle (and more arriving while the scheduler runs), beside pods without
// terms that their anti-affinity selects: no two ever share a domain their
// terms forbid, whatever the mix; each group gets as many nodes as the
// rules allow, and a replica left waiting is told why in kube-scheduler's
// words.
func TestAntiAffinityNeverViolatedWhenPlacedTogether(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			a := newAPI(t)
			nodes := 3 + rng.IntN(4)
			for i := range nodes {
				name := fmt.Sprintf("n%d", i)
				a.gpuNode(name, 4, 16*gib, "T4")
				a.zoned(name, fmt.Sprint("z", i%2))
			}
			gpu := res(string(translate.ResourceGPU), "1")
			var names []string
			mk := func(name string, opts ...podOpt) {
				a.pod(name, append([]podOpt{gpu}, opts...)...)
				names = append(names, name)
			}
			for i := range nodes + 2 + rng.IntN(3) { // more replicas than nodes
				mk(fmt.Sprint("web", i), labelled("app", "web"), avoid("web", hostname))
			}
			for i := range 2 + rng.IntN(3) { // one per zone at most
				mk(fmt.Sprint("db", i), labelled("app", "db"), avoid("db", zoneKey))
			}
			for i := range 2 + rng.IntN(4) { // no terms, selected by web's
				mk(fmt.Sprint("plain", i), labelled("app", "web"))
			}
			r := a.start(testConfig())
			for i := range 3 { // arriving while the loop runs
				mk(fmt.Sprint("late", i), labelled("app", "web"), avoid("web", hostname))
			}
			eventually(t, "every pod placed or told why", func() bool {
				for _, n := range names {
					if a.get(n).Spec.NodeName == "" && !a.eventFor(n, "FailedScheduling", "anti-affinity") {
						return false
					}
				}
				return a.quiet()
			})
			if v := a.violations(); len(v) > 0 {
				t.Fatalf("anti-affinity violated:\n%s", strings.Join(v, "\n"))
			}
			// Every node holds an app=web pod (there are more replicas than
			// nodes; plain pods count alike for web's term), and the db
			// pods take one zone each.
			perNode, dbs := map[string]int{}, 0
			for _, n := range names {
				p := a.get(n)
				if p.Spec.NodeName == "" {
					continue
				}
				if p.Labels["app"] == "web" {
					perNode[p.Spec.NodeName]++
				} else {
					dbs++
				}
			}
			if len(perNode) != nodes || dbs != 2 {
				t.Fatalf("web-labelled pods on %d of %d nodes, %d db pods on 2 zones", len(perNode), nodes, dbs)
			}
			a.checkCapacity(16 * gib)
			r.stop()
		})
	}
}

// The 4th replica of a 3-node anti-affinity deployment stays pending and
// is told why as kube-scheduler words it; a pod that needs affinity to a
// pod that does not exist waits until one is bound (by another scheduler)
// and then goes to its zone.
func TestAffinityWordingAndWaitingForAMatch(t *testing.T) {
	a := newAPI(t)
	for i, z := range []string{"a", "a", "b"} {
		name := fmt.Sprintf("n%d", i+1)
		a.gpuNode(name, 4, 16*gib, "T4")
		a.zoned(name, z)
	}
	a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")
	for i := range 4 {
		a.pod(fmt.Sprint("web", i), gpu, labelled("app", "web"), avoid("web", hostname))
	}
	eventually(t, "the 4th replica told why", func() bool {
		bound := 0
		for i := range 4 {
			if a.get(fmt.Sprint("web", i)).Spec.NodeName != "" {
				bound++
			}
		}
		return bound == 3 && a.eventFor("web3", "FailedScheduling", "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.")
	})
	a.pod("client", gpu, labelled("app", "client"), near("db", zoneKey))
	eventually(t, "client told why", func() bool {
		return a.eventFor("client", "FailedScheduling", "0/3 nodes are available: 3 node(s) didn't match pod affinity rules.")
	})
	a.pod("db", labelled("app", "db"), scheduler("default-scheduler"), onNode("n3"))
	eventually(t, "client in the db's zone", func() bool { return a.get("client").Spec.NodeName == "n3" })
}

// A pod without terms that a pod placed later selects with its
// anti-affinity stays out of that pod's domain: its key is made to carry
// its labels when the terms appear (here it waited for a node label).
func TestExistingAntiAffinityKeepsPlainPodsAway(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 4, 16*gib, "T4")
	a.gpuNode("n2", 4, 16*gib, "T4")
	a.zoned("n1", "a")
	a.zoned("n2", "b")
	a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")
	a.pod("plain", gpu, labelled("app", "web"), nodeSelector("pool", "x"))
	eventually(t, "plain waits for its label", func() bool { return a.eventFor("plain", "FailedScheduling", "node affinity/selector") })
	a.pod("guard", gpu, labelled("app", "guard"), avoid("web", hostname))
	eventually(t, "guard bound", func() bool { return a.get("guard").Spec.NodeName != "" })
	guardOn := a.get("guard").Spec.NodeName
	for _, n := range []string{"n1", "n2"} {
		a.editNode(n, func(n *corev1.Node) { n.Labels["pool"] = "x" })
	}
	// bestfit would stack plain onto the guard's node.
	eventually(t, "plain bound", func() bool { return a.get("plain").Spec.NodeName != "" })
	if a.get("plain").Spec.NodeName == guardOn {
		t.Fatalf("plain placed beside guard on %s, whose anti-affinity selects it", guardOn)
	}
	// With room only on guard's node, a second plain pod waits and is told
	// why. A label only guard's node ever carries: the informers deliver
	// node and pod changes in no fixed order, and a pod seen before the
	// labels of the other node were taken away could have been bound there.
	a.editNode(guardOn, func(n *corev1.Node) { n.Labels["pool2"] = "y" })
	a.pod("plain2", gpu, labelled("app", "web"), nodeSelector("pool2", "y"))
	eventually(t, "plain2 told why", func() bool {
		return a.eventFor("plain2", "FailedScheduling", "1 node(s) didn't satisfy existing pods anti-affinity rules")
	})
}

// Topology spread with maxSkew 1 over zones: six replicas waiting
// together land two per zone, though bestfit would pack them.
func TestTopologySpreadOverZones(t *testing.T) {
	a := newAPI(t)
	for i, z := range []string{"a", "a", "b", "c"} {
		name := fmt.Sprintf("n%d", i+1)
		a.gpuNode(name, 8, 16*gib, "T4")
		a.zoned(name, z)
	}
	gpu := res(string(translate.ResourceGPU), "1")
	for i := range 6 {
		a.pod(fmt.Sprint("s", i), gpu, labelled("app", "s"), spreadOver("s", zoneKey, 1))
	}
	a.start(testConfig())
	zoneOf := map[string]string{"n1": "a", "n2": "a", "n3": "b", "n4": "c"}
	eventually(t, "all six bound", func() bool {
		for i := range 6 {
			if a.get(fmt.Sprint("s", i)).Spec.NodeName == "" {
				return false
			}
		}
		return true
	})
	per := map[string]int{}
	for i := range 6 {
		per[zoneOf[a.get(fmt.Sprint("s", i)).Spec.NodeName]]++
	}
	if per["a"] != 2 || per["b"] != 2 || per["c"] != 2 {
		t.Fatalf("per zone %v, want 2 each", per)
	}
}

// Pods without inter-pod terms, when no pod has any, never build an
// inter-pod state nor get a key of their own: the rules cost them nothing
// (the check the scale test makes without timing).
func (r *running) checkNoInterPodCost(t *testing.T) {
	t.Helper()
	r.stop()
	if n := r.s.affinity.States(); n != 0 {
		t.Fatalf("%d inter-pod states built for pods without terms", n)
	}
	for key, f := range r.s.fits {
		if f.pods != nil || strings.HasPrefix(key, "pods:") {
			t.Fatalf("constraint key %q carries pods' labels though no pod has terms", key)
		}
	}
}

var _ interpod.Cluster = view{}

// A restarted scheduler rebuilds what the inter-pod rules count from the
// API server alone: replicas bound before the restart keep new ones off
// their nodes.
func TestAntiAffinityAcrossRestart(t *testing.T) {
	a := newAPI(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		a.gpuNode(n, 4, 16*gib, "T4")
		a.zoned(n, "z")
	}
	gpu := res(string(translate.ResourceGPU), "1")
	r := a.start(testConfig())
	a.pod("web0", gpu, labelled("app", "web"), avoid("web", hostname))
	a.pod("web1", gpu, labelled("app", "web"), avoid("web", hostname))
	eventually(t, "two replicas bound", func() bool {
		return a.get("web0").Spec.NodeName != "" && a.get("web1").Spec.NodeName != ""
	})
	r.stop()
	a.start(testConfig())
	a.pod("web2", gpu, labelled("app", "web"), avoid("web", hostname))
	a.pod("web3", gpu, labelled("app", "web"), avoid("web", hostname))
	eventually(t, "one more bound, the last told why", func() bool {
		n2, n3 := a.get("web2").Spec.NodeName, a.get("web3").Spec.NodeName
		return (n2 == "") != (n3 == "") &&
			(a.eventFor("web2", "FailedScheduling", "3 node(s) didn't match pod anti-affinity rules") ||
				a.eventFor("web3", "FailedScheduling", "3 node(s) didn't match pod anti-affinity rules"))
	})
	if v := a.violations(); len(v) > 0 {
		t.Fatalf("anti-affinity violated across the restart:\n%s", strings.Join(v, "\n"))
	}
}

// relabel changes a pod's labels in the API server (kubectl label).
func (a *api) relabel(name string, kv ...string) {
	a.t.Helper()
	p := a.get(name)
	p.Labels = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		p.Labels[kv[i]] = kv[i+1]
	}
	if _, err := a.client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// A bound pod's labels are read again when they change, as kube-scheduler
// reads the current pods: a pod relabelled into a group that an incoming
// pod's anti-affinity avoids keeps it off that node, and one relabelled out
// of it (kubectl label pod x app-, to take it out of a Service) no longer
// does.
func TestRelabelledBoundPodCountsByItsNewLabels(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 4, 16*gib, "T4")
	a.gpuNode("n2", 4, 16*gib, "T4")
	a.zoned("n1", "a")
	a.zoned("n2", "b")
	a.pod("other", labelled("app", "other"), scheduler("default-scheduler"), onNode("n1"))
	a.pod("web", labelled("app", "web"), scheduler("default-scheduler"), onNode("n2"))
	a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")
	// An anti-affinity pod (placed first) makes the scheduler read pods of
	// app=web; it can only go to n1.
	a.pod("probe", gpu, labelled("app", "probe"), avoid("web", hostname))
	eventually(t, "probe bound", func() bool { return a.get("probe").Spec.NodeName != "" })
	if n := a.get("probe").Spec.NodeName; n != "n1" {
		t.Fatalf("probe on %s beside web", n)
	}
	a.deletePod("probe")
	a.relabel("other", "app", "web") // n1 now holds a web pod too
	a.pod("late", gpu, labelled("app", "late"), avoid("web", hostname))
	eventually(t, "late told why", func() bool {
		return a.eventFor("late", "FailedScheduling", "2 node(s) didn't match pod anti-affinity rules") ||
			a.get("late").Spec.NodeName != ""
	})
	if n := a.get("late").Spec.NodeName; n != "" {
		t.Fatalf("late bound on %s, where a pod relabelled app=web runs", n)
	}
	a.relabel("web", "app", "quarantined") // n2 holds no web pod any more
	eventually(t, "late bound once web is relabelled", func() bool { return a.get("late").Spec.NodeName == "n2" })
}

// Terminating pods (a rolling update's old replicas in their grace
// period) do not count for topology spread, as in kube-scheduler's
// PodTopologySpread (#87621): two old replicas terminating in zone a do
// not push both new ones into zone b; a replica that starts terminating
// while bound stops counting then.
func TestTerminatingPodsDoNotCountForSpread(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 8, 16*gib, "T4")
	a.gpuNode("n2", 8, 16*gib, "T4")
	a.zoned("n1", "a")
	a.zoned("n2", "b")
	a.pod("old0", labelled("app", "s"), scheduler("default-scheduler"), onNode("n1"), terminating())
	a.pod("old1", labelled("app", "s"), scheduler("default-scheduler"), onNode("n1"))
	a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")
	// old1 starts terminating while the scheduler runs.
	p := a.get("old1")
	now := metav1.Now()
	p.DeletionTimestamp = &now
	if _, err := a.client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		a.pod(fmt.Sprint("new", i), gpu, labelled("app", "s"), spreadOver("s", zoneKey, 1))
	}
	eventually(t, "both new replicas bound", func() bool {
		return a.get("new0").Spec.NodeName != "" && a.get("new1").Spec.NodeName != ""
	})
	if n0, n1 := a.get("new0").Spec.NodeName, a.get("new1").Spec.NodeName; n0 == n1 {
		t.Fatalf("both new replicas on %s: the terminating replicas in zone a were counted", n0)
	}
}

// A pod on a node without an inventory counts in that node's topology
// domain; when the node goes (a failed CPU node deleted, its pods
// collected afterwards) or moves to another domain, the pod stops counting
// where it no longer is, instead of forbidding its old domain forever.
func TestPodOnAVanishedNodeStopsCounting(t *testing.T) {
	for _, change := range []string{"deleted", "relabelled"} {
		t.Run(change, func(t *testing.T) {
			a := newAPI(t)
			a.gpuNode("n1", 4, 16*gib, "T4")
			a.zoned("n1", "a")
			cpu := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu1", Labels: map[string]string{hostname: "cpu1", zoneKey: "a"}}}
			if _, err := a.client.CoreV1().Nodes().Create(context.Background(), cpu, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			a.pod("db", labelled("app", "db"), scheduler("default-scheduler"), onNode("cpu1"))
			a.start(testConfig())
			gpu := res(string(translate.ResourceGPU), "1")
			a.pod("probe", gpu, labelled("app", "probe"), avoid("db", zoneKey))
			eventually(t, "probe refused zone a", func() bool {
				return a.eventFor("probe", "FailedScheduling", "1 node(s) didn't match pod anti-affinity rules")
			})
			if change == "deleted" {
				if err := a.client.CoreV1().Nodes().Delete(context.Background(), "cpu1", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			} else {
				a.editNode("cpu1", func(n *corev1.Node) { n.Labels[zoneKey] = "b" })
			}
			eventually(t, "probe bound once db's node left zone a", func() bool {
				if change == "deleted" {
					if _, err := a.client.CoreV1().Pods("default").Get(context.Background(), "db", metav1.GetOptions{}); err == nil {
						a.deletePod("db") // the pod garbage collector, after the node went
					}
				}
				return a.get("probe").Spec.NodeName == "n1"
			})
		})
	}
}

// Keys and terms of pods that are gone are dropped: Jobs whose pods carry
// a label of their own (job-name) and terms over it give every Job a key
// and a set of terms; a scheduler running for months must not keep them
// all (memory, and every pod without terms asked against each).
func TestKeysOfGonePodsAreDropped(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 8, 16*gib, "T4")
	a.zoned("n1", "a")
	r := a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")
	const jobs, perBatch = 160, 8
	for b := 0; b < jobs; b += perBatch {
		for j := b; j < b+perBatch; j++ {
			a.pod(fmt.Sprint("job", j), gpu, labelled("job-name", fmt.Sprint("job", j)), spreadOver("x", zoneKey, 1),
				func(p *corev1.Pod) {
					p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"job-name": fmt.Sprint("job", j)}}, TopologyKey: hostname}}}}
				})
		}
		eventually(t, "a batch bound", func() bool {
			for j := b; j < b+perBatch; j++ {
				if a.get(fmt.Sprint("job", j)).Spec.NodeName == "" {
					return false
				}
			}
			return true
		})
		for j := b; j < b+perBatch; j++ {
			a.deletePod(fmt.Sprint("job", j))
		}
	}
	a.pod("last", gpu, labelled("app", "last"))
	eventually(t, "every job forgotten", func() bool {
		return a.get("last").Spec.NodeName != "" // the deletes came before it
	})
	r.stop()
	if n := len(r.s.fits); n > jobs/2 {
		t.Fatalf("%d constraint keys kept after %d jobs came and went", n, jobs)
	}
	if n := r.s.affinity.Targets(); n > jobs/2 {
		t.Fatalf("%d pods' terms kept after %d jobs came and went", n, jobs)
	}
}

// A spread constraint with nodeTaintsPolicy Honor counts the domains of
// the nodes whose taints the pod tolerates: a taint taken off a node makes
// its domain count (empty, so the minimum drops to 0) at once.
func TestSpreadHonouringTaintsFollowsTaintChanges(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 8, 16*gib, "T4")
	a.gpuNode("n2", 8, 16*gib, "T4")
	a.zoned("n1", "a")
	a.zoned("n2", "b")
	a.editNode("n2", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
	})
	a.pod("s0", labelled("app", "s"), scheduler("default-scheduler"), onNode("n1"))
	a.start(testConfig())
	gpu := res(string(translate.ResourceGPU), "1")
	honour := func(p *corev1.Pod) {
		h := corev1.NodeInclusionPolicyHonor
		for i := range p.Spec.TopologySpreadConstraints {
			p.Spec.TopologySpreadConstraints[i].NodeTaintsPolicy = &h
		}
	}
	a.pod("s1", gpu, labelled("app", "s"), spreadOver("s", zoneKey, 1), honour)
	eventually(t, "s1 bound in the only eligible zone", func() bool { return a.get("s1").Spec.NodeName == "n1" })
	// A probe that only the untainted n2 admits shows the scheduler has
	// seen the taint go before s2 (the key s1 used) is created: a pod read
	// before that update would rightly have gone to n1.
	// (No label changes with it: a label change alone rebuilds the states.)
	a.editNode("n2", func(n *corev1.Node) { n.Spec.Taints = nil })
	a.pod("probe", gpu, labelled("app", "probe"), nodeSelector(hostname, "n2"))
	eventually(t, "probe bound on n2", func() bool { return a.get("probe").Spec.NodeName == "n2" })
	a.pod("s2", gpu, labelled("app", "s"), spreadOver("s", zoneKey, 1), honour)
	eventually(t, "s2 bound", func() bool { return a.get("s2").Spec.NodeName != "" })
	if n := a.get("s2").Spec.NodeName; n != "n2" {
		t.Fatalf("s2 on %s: zone a holds 2 and zone b, untainted, 0 (maxSkew 1)", n)
	}
}
