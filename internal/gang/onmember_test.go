package gang

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// listened installs a node filter that admits constraint "apart" only on
// nodes without a member the listener holds, as a group's hostname
// anti-affinity would, and returns what the listener holds (member →
// node) after every call.
func listened(tr *Tracker, s *placement.Scheduler) map[string]int {
	held := map[string]int{}
	c := s.Cluster()
	c.SetNodeFilter(func(key string, i int) (bool, int64) {
		if key != "apart" {
			return true, 0
		}
		for _, n := range held {
			if n == i {
				return false, 0
			}
		}
		return true, 0
	})
	tr.OnMember(func(group, member string, d placement.Decision, placed bool) {
		if placed {
			held[member] = d.Node
		} else {
			delete(held, member)
		}
		c.RefilterConstraint("apart")
	})
	return held
}

func apart(m Member) Member { m.Request.NodeConstraint = "apart"; return m }

// Each member the tracker places is heard before the next is placed, so a
// filter fed by the hook keeps the group apart; a group that cannot be
// kept apart takes nothing and every trial is heard taken back.
func TestOnMemberSeesEachTrialPlacement(t *testing.T) {
	for _, nodes := range []int{3, 2} {
		var specs []partition.NodeSpec
		for _, n := range []string{"a", "b", "c"}[:nodes] {
			specs = append(specs, node(n, 4, 1))
		}
		s := cluster(t, specs...)
		tr := NewTracker(s, time.Minute)
		held := listened(tr, s)
		before := snapshot(s)
		addAll(t, tr, Spec{Name: "g", MinMember: 3}, apart(worker("w0", 1)), apart(worker("w1", 1)), apart(worker("w2", 1)))
		got, err := tr.Reserve("g")
		if nodes == 2 {
			if !errors.Is(err, placement.ErrUnschedulable) || len(held) != 0 {
				t.Fatalf("2 nodes: err %v, still held %v", err, held)
			}
			if !reflect.DeepEqual(before, snapshot(s)) {
				t.Fatal("a group that did not fit kept capacity")
			}
			continue
		}
		if err != nil || len(got) != 3 || len(held) != 3 {
			t.Fatalf("3 nodes: err %v, got %v, heard %v", err, got, held)
		}
		seen := map[int]bool{}
		for m, d := range got {
			if seen[d.Node] || held[m] != d.Node {
				t.Fatalf("members share a node or were heard elsewhere: got %v, heard %v", got, held)
			}
			seen[d.Node] = true
		}
	}
}

// A group placed together (one node, one island) whose members refuse each
// other's node is refused as a whole, and nothing stays held.
func TestOnMemberRefusesTogetherGroupThatAvoidsItself(t *testing.T) {
	for _, loc := range []Locality{SameNode, SameIsland} {
		s := cluster(t, node("a", 4, 1), node("b", 4, 1))
		tr := NewTracker(s, time.Minute)
		held := listened(tr, s)
		before := snapshot(s)
		addAll(t, tr, Spec{Name: "g", MinMember: 2, Locality: loc}, apart(worker("w0", 1)), apart(worker("w1", 1)))
		if _, err := tr.Reserve("g"); err == nil || len(held) != 0 || !reflect.DeepEqual(before, snapshot(s)) {
			t.Fatalf("%s: err %v, held %v: a group that avoids itself cannot share a node", loc, err, held)
		}
	}
}

// Capacity given back by the timeout or by a deleted member is heard too.
func TestOnMemberHearsReleases(t *testing.T) {
	s := cluster(t, node("a", 4, 1), node("b", 4, 1), node("c", 4, 1))
	tr := NewTracker(s, time.Minute)
	held := listened(tr, s)
	addAll(t, tr, Spec{Name: "g", MinMember: 3}, apart(worker("w0", 1)), apart(worker("w1", 1)))
	if _, err := tr.Reserve("g"); err != nil || len(held) != 2 {
		t.Fatalf("early reservation: err %v, heard %v", err, held)
	}
	if err := tr.RemoveMember("g", "w0"); err != nil || len(held) != 1 {
		t.Fatalf("removed member: err %v, heard %v", err, held)
	}
	if x := tr.Expire(t0.Add(time.Hour)); len(x) != 1 || len(held) != 0 {
		t.Fatalf("expired %v, still heard %v", x, held)
	}
}
