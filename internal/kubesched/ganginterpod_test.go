package kubesched

import (
	"fmt"
	"testing"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// oneWorkerPerNode creates a gang of n members that each ask one GPU and
// avoid their own group's label on the same hostname: "one worker per
// node", the way distributed training jobs spread their workers.
func (a *api) oneWorkerPerNode(group string, n int) []string {
	a.t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", group, i)
		a.pod(name, res(string(translate.ResourceGPU), "1"), labelled("app", group), avoid(group, hostname),
			ann(gang.GroupAnnotation, group, gang.MinMemberAnnotation, fmt.Sprint(n)))
		names = append(names, name)
	}
	return names
}

// Members of one gang see each other's anti-affinity while the group is
// reserved: a gang of 3 that avoids itself per hostname lands on 3
// distinct nodes, though bestfit would pack them on one node whose GPUs
// hold all three.
func TestGangMembersSeeEachOthersAntiAffinity(t *testing.T) {
	a := newAPI(t)
	for i := range 4 {
		name := fmt.Sprint("n", i)
		a.gpuNode(name, 4, 16*gib, "T4")
		a.zoned(name, "z0")
	}
	r := a.start(testConfig())
	names := a.oneWorkerPerNode("workers", 3)
	eventually(t, "the gang bound", func() bool {
		for _, n := range names {
			if a.get(n).Spec.NodeName == "" {
				return false
			}
		}
		return a.quiet()
	})
	nodes := map[string]string{}
	for _, n := range names {
		node := a.get(n).Spec.NodeName
		if other, taken := nodes[node]; taken {
			t.Fatalf("%s and %s both on %s: the gang's anti-affinity was not applied between its members", other, n, node)
		}
		nodes[node] = n
	}
	if v := a.violations(); len(v) > 0 {
		t.Fatalf("anti-affinity violated: %v", v)
	}
	a.checkCapacity(16 * gib)
	r.stop()
}

// A gang of 3 that wants one member per node on 2 nodes never fits
// together: all or nothing, none is bound (each node has GPUs for all
// three), every member is told why, and the members' trial placements are
// all taken back.
func TestGangThatCannotSpreadTakesNothing(t *testing.T) {
	a := newAPI(t)
	for i := range 2 {
		name := fmt.Sprint("n", i)
		a.gpuNode(name, 4, 16*gib, "T4")
		a.zoned(name, "z0")
	}
	r := a.start(testConfig())
	names := a.oneWorkerPerNode("workers", 3)
	eventually(t, "every member told why", func() bool {
		for _, n := range names {
			if !a.eventFor(n, "FailedScheduling", "pod group workers (min-member 3) is placed all or nothing: 0/2 nodes are available: a member fits alone, but the members do not fit together: each member placed counts for the next one's inter-pod affinity, anti-affinity and topology spread.") {
				return false
			}
		}
		return a.quiet()
	})
	for _, n := range names {
		if node := a.get(n).Spec.NodeName; node != "" {
			t.Fatalf("%s bound to %s though its group cannot be placed whole", n, node)
		}
		if a.bindsOf("default/"+n) != 0 {
			t.Fatalf("%s had a Binding posted", n)
		}
	}
	r.stop()
	// Every trial was taken back: nothing counts for the rules.
	if n, left := r.s.affinity.Placed(), len(r.s.trials); n != 0 || left != 0 {
		t.Fatalf("after the group failed the inter-pod index counts %d pods, %d trials left", n, left)
	}
}

// Topology spread applies between members as well: a gang of 4 that
// spreads over zones with max skew 1 puts 2 members in each zone, though bestfit would pack them on one node.
func TestGangMembersSpreadOverZones(t *testing.T) {
	a := newAPI(t)
	zoneOf := map[string]string{}
	for i := range 4 {
		name := fmt.Sprint("n", i)
		zoneOf[name] = fmt.Sprint("z", i%2)
		a.gpuNode(name, 4, 16*gib, "T4")
		a.zoned(name, zoneOf[name])
	}
	r := a.start(testConfig())
	var names []string
	for i := range 4 {
		name := fmt.Sprint("s", i)
		a.pod(name, res(string(translate.ResourceGPU), "1"), labelled("app", "spread"), spreadOver("spread", zoneKey, 1),
			ann(gang.GroupAnnotation, "spread", gang.MinMemberAnnotation, "4"))
		names = append(names, name)
	}
	eventually(t, "the gang bound", func() bool {
		for _, n := range names {
			if a.get(n).Spec.NodeName == "" {
				return false
			}
		}
		return a.quiet()
	})
	perZone := map[string]int{}
	for _, n := range names {
		perZone[zoneOf[a.get(n).Spec.NodeName]]++
	}
	if perZone["z0"] != 2 || perZone["z1"] != 2 {
		t.Fatalf("members per zone %v, want 2 and 2 (max skew 1)", perZone)
	}
	r.stop()
}
