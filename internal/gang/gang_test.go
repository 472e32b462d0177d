package gang

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func cluster(t *testing.T, specs ...partition.NodeSpec) *placement.Scheduler {
	t.Helper()
	c, err := placement.NewCluster(specs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := placement.NewPolicy("spread", c, placement.Options{}) // spread: members would scatter if let
	if err != nil {
		t.Fatal(err)
	}
	return placement.NewScheduler(c, p, false)
}

func node(name string, gpus, islands int) partition.NodeSpec {
	return partition.NodeSpec{Name: name, Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: gpus, GPUMemMiB: 40960, Islands: islands}
}

func worker(name string, gpus int) Member {
	return Member{Name: name, Request: placement.Request{CPUMilli: 1000, NumGPU: gpus, GPUMilli: 1000}}
}

func snapshot(s *placement.Scheduler) []partition.Node {
	out := slices.Clone(s.Cluster().Nodes)
	for i := range out {
		out[i].GPUs = slices.Clone(out[i].GPUs)
	}
	return out
}

func addAll(t *testing.T, tr *Tracker, spec Spec, ms ...Member) {
	t.Helper()
	for _, m := range ms {
		if err := tr.Add(spec, m, t0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAllOrNothing: a group that does not fit whole takes nothing (the
// members that did fit are rolled back); one that fits takes everything.
func TestAllOrNothing(t *testing.T) {
	s := cluster(t, node("a", 4, 1), node("b", 4, 1))
	tr := NewTracker(s, time.Minute)
	spec := Spec{Name: "g", MinMember: 3, Members: 3}
	addAll(t, tr, spec, worker("w0", 4), worker("w1", 4), worker("w2", 1))
	before := snapshot(s)
	if _, err := tr.Reserve("g"); !errors.Is(err, placement.ErrUnschedulable) || !strings.Contains(err.Error(), "member w") {
		t.Fatalf("err = %v, want unschedulable naming the member", err)
	}
	if !reflect.DeepEqual(before, snapshot(s)) {
		t.Fatal("a failed group reservation left capacity taken")
	}
	if st, _ := tr.Status("g"); st.Reserved != 0 || st.Complete {
		t.Errorf("status = %+v", st)
	}
	// A smaller group fits whole.
	tr2 := NewTracker(s, time.Minute)
	spec2 := Spec{Name: "h", MinMember: 2}
	addAll(t, tr2, spec2, worker("x0", 4), worker("x1", 3))
	got, err := tr2.Reserve("h")
	if err != nil || len(got) != 2 {
		t.Fatalf("Reserve = %v, %v", got, err)
	}
	if free := s.Cluster().Nodes[0].FreeMilli() + s.Cluster().Nodes[1].FreeMilli(); free != 1000 {
		t.Errorf("free after the group = %d milli, want 1000", free)
	}
	if st, _ := tr2.Status("h"); !st.Complete {
		t.Errorf("status = %+v", st)
	}
}

// TestTimeoutReleasesPartialGroup: a group that holds capacity for its
// present members but never reaches min-member gives it back at the
// timeout, not before; a complete group is never expired.
func TestTimeoutReleasesPartialGroup(t *testing.T) {
	s := cluster(t, node("a", 8, 1))
	tr := NewTracker(s, 5*time.Minute)
	spec := Spec{Name: "g", MinMember: 3}
	addAll(t, tr, spec, worker("w0", 2), worker("w1", 2))
	if tr.Ready("g") {
		t.Fatal("2 of 3 is not ready")
	}
	if _, err := tr.Reserve("g"); err != nil { // hold capacity early
		t.Fatal(err)
	}
	if free := s.Cluster().Nodes[0].FreeMilli(); free != 4000 {
		t.Fatalf("free = %d", free)
	}
	if exp := tr.Expire(t0.Add(4 * time.Minute)); len(exp) != 0 {
		t.Fatalf("expired early: %v", exp)
	}
	exp := tr.Expire(t0.Add(5 * time.Minute))
	if len(exp) != 1 || exp[0].Released != 2 || !errors.Is(exp[0].Err, ErrTimedOut) || !strings.Contains(exp[0].Err.Error(), "2 of min-member 3 present") {
		t.Fatalf("expired = %+v", exp)
	}
	if free := s.Cluster().Nodes[0].FreeMilli(); free != 8000 {
		t.Errorf("free after timeout = %d, want everything back", free)
	}
	if _, ok := tr.Status("g"); ok {
		t.Error("expired group still tracked")
	}
	// Complete groups stay.
	spec2 := Spec{Name: "c", MinMember: 1}
	addAll(t, tr, spec2, worker("z", 1))
	if _, err := tr.Reserve("c"); err != nil {
		t.Fatal(err)
	}
	if exp := tr.Expire(t0.Add(time.Hour)); len(exp) != 0 {
		t.Errorf("complete group expired: %v", exp)
	}
	tr.Done("c")
	if s.Cluster().Nodes[0].FreeMilli() != 7000 {
		t.Error("Done must keep the bound members' reservations")
	}
}

// TestMinMemberStartsWithoutTheExtras: a group of min-member 2 with 3
// members present, on a node with room for 2, starts with 2; it took
// nothing (every present member or none) and could only time out.
func TestMinMemberStartsWithoutTheExtras(t *testing.T) {
	s := cluster(t, node("a", 4, 1))
	for _, loc := range []Locality{Anywhere, SameNode, SameIsland, SameNUMA} {
		tr := NewTracker(s, time.Minute)
		spec := Spec{Name: "g", MinMember: 2, Locality: loc}
		addAll(t, tr, spec, worker("w0", 2), worker("w1", 2), worker("w2", 2))
		got, err := tr.Reserve("g")
		if err != nil || len(got) != 2 || got["w0"].Grant.Shares == nil || got["w1"].Grant.Shares == nil {
			t.Fatalf("%s: Reserve = %v, %v; want w0 and w1", loc, got, err)
		}
		if st, _ := tr.Status("g"); !st.Complete || st.Reserved != 2 {
			t.Errorf("%s: status %+v", loc, st)
		}
		before := snapshot(s)
		if _, err := tr.Reserve("g"); err == nil {
			t.Errorf("%s: w2 reserved on a full node", loc)
		}
		if !reflect.DeepEqual(before, snapshot(s)) {
			t.Errorf("%s: the failed extra changed the cluster", loc)
		}
		for _, m := range []string{"w0", "w1", "w2"} {
			if err := tr.RemoveMember("g", m); err != nil {
				t.Fatal(err)
			}
		}
		if free := s.Cluster().Nodes[0].FreeMilli(); free != 4000 {
			t.Fatalf("%s: free %d after the group left", loc, free)
		}
	}
}

// TestLaterMembersRollBackAlone: members that arrive after the group holds
// capacity are reserved together; their failure leaves the earlier ones.
func TestLaterMembersRollBackAlone(t *testing.T) {
	s := cluster(t, node("a", 4, 1))
	tr := NewTracker(s, time.Minute)
	spec := Spec{Name: "g", MinMember: 1}
	addAll(t, tr, spec, worker("w0", 2))
	if _, err := tr.Reserve("g"); err != nil {
		t.Fatal(err)
	}
	addAll(t, tr, spec, worker("w1", 1), worker("w2", 2))
	if _, err := tr.Reserve("g"); err == nil {
		t.Fatal("3 more GPUs on a node with 2 free")
	}
	if st, _ := tr.Status("g"); st.Reserved != 1 || s.Cluster().Nodes[0].FreeMilli() != 2000 {
		t.Errorf("status %+v, free %d", st, s.Cluster().Nodes[0].FreeMilli())
	}
	if err := tr.RemoveMember("g", "w2"); err != nil {
		t.Fatal(err)
	}
	if got, err := tr.Reserve("g"); err != nil || len(got) != 1 {
		t.Fatalf("Reserve = %v, %v", got, err)
	}
	if err := tr.RemoveMember("g", "w0"); err != nil || s.Cluster().Nodes[0].FreeMilli() != 3000 {
		t.Errorf("RemoveMember of a reserved member: %v, free %d", err, s.Cluster().Nodes[0].FreeMilli())
	}
	if err := tr.RemoveMember("g", "nope"); err == nil || !strings.Contains(err.Error(), "no member nope") {
		t.Errorf("err = %v", err)
	}
}

func TestSameNode(t *testing.T) {
	s := cluster(t, node("a", 4, 1), node("b", 4, 1), node("c", 4, 1))
	if err := s.Cluster().Reserve(mustPlace(t, s, "filler", 1)); err != nil { // spread would avoid this node
		t.Fatal(err)
	}
	tr := NewTracker(s, time.Minute)
	spec := Spec{Name: "g", MinMember: 3, Locality: SameNode}
	addAll(t, tr, spec, worker("w0", 1), worker("w1", 1), Member{Name: "half", Request: placement.Request{CPUMilli: 100, NumGPU: 1, GPUMilli: 500}})
	got, err := tr.Reserve("g")
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[int]bool{}
	for _, d := range got {
		nodes[d.Node] = true
	}
	if len(nodes) != 1 {
		t.Fatalf("members on %d nodes: %v", len(nodes), got)
	}
	// A group too big for any one node fails whole, though it fits spread out.
	tr2 := NewTracker(s, time.Minute)
	spec2 := Spec{Name: "big", MinMember: 2, Locality: SameNode}
	addAll(t, tr2, spec2, worker("x0", 3), worker("x1", 3))
	before := snapshot(s)
	if _, err := tr2.Reserve("big"); !errors.Is(err, placement.ErrUnschedulable) {
		t.Errorf("err = %v", err)
	}
	if !reflect.DeepEqual(before, snapshot(s)) {
		t.Error("failed same-node group left capacity taken")
	}
}

func mustPlace(t *testing.T, s *placement.Scheduler, name string, gpus int) placement.Decision {
	t.Helper()
	d, err := s.Schedule(&placement.Request{Name: name, CPUMilli: 100, NumGPU: gpus, GPUMilli: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSameIsland(t *testing.T) {
	// 8 GPUs in 2 islands of 4; GPU 0 and 4 taken: each island has 3 free.
	s := cluster(t, node("a", 8, 2))
	for _, gpu := range []int{0, 4} {
		if err := s.Cluster().Reserve(placement.Decision{Node: 0, Grant: partition.Grant{Shares: []partition.Share{{GPU: gpu, Milli: 1000}}}}); err != nil {
			t.Fatal(err)
		}
	}
	tr := NewTracker(s, time.Minute)
	spec := Spec{Name: "g", MinMember: 2, Locality: SameIsland}
	addAll(t, tr, spec, worker("w0", 2), worker("w1", 1))
	got, err := tr.Reserve("g")
	if err != nil {
		t.Fatal(err)
	}
	islands := map[int8]int{}
	for _, d := range got {
		for _, sh := range d.Grant.Shares {
			islands[s.Cluster().Nodes[0].GPUs[sh.GPU].Island]++
		}
	}
	if len(islands) != 1 || len(got["w0"].Grant.Shares) != 2 || len(got["w1"].Grant.Shares) != 1 {
		t.Fatalf("decisions %v span islands %v", got, islands)
	}
	// 4 more GPUs: 3 free on the other island, 0 on this: no island holds them.
	tr2 := NewTracker(s, time.Minute)
	addAll(t, tr2, Spec{Name: "h", MinMember: 2, Locality: SameIsland}, worker("x0", 2), worker("x1", 2))
	if _, err := tr2.Reserve("h"); !errors.Is(err, placement.ErrUnschedulable) || !strings.Contains(err.Error(), "NVLink island") {
		t.Errorf("err = %v", err)
	}
	if err := tr2.Add(Spec{Name: "h", MinMember: 2, Locality: SameIsland}, Member{Name: "s", Request: placement.Request{NumGPU: 1, GPUMilli: 300}}, t0); err == nil || !strings.Contains(err.Error(), "whole GPUs") {
		t.Errorf("share in an island group: %v", err)
	}
}

func TestBadGroups(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{GroupAnnotation: "g", MinMemberAnnotation: "0"}, "below 1"},
		{map[string]string{GroupAnnotation: "g", MinMemberAnnotation: "-3"}, "below 1"},
		{map[string]string{GroupAnnotation: "g", MinMemberAnnotation: "two"}, `"two" is not an integer`},
		{map[string]string{GroupAnnotation: "g"}, "min-member missing"},
		{map[string]string{MinMemberAnnotation: "2"}, "without tessera.io/pod-group"},
		{map[string]string{GroupAnnotation: "", MinMemberAnnotation: "2"}, "empty group name"},
		{map[string]string{GroupAnnotation: "g", MinMemberAnnotation: "2", LocalityAnnotation: "rack"}, `"rack"`},
	} {
		if _, _, err := FromAnnotations(tc.ann); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.ann, err, tc.want)
		}
	}
	s, ok, err := FromAnnotations(map[string]string{GroupAnnotation: "g", MinMemberAnnotation: " 4 ", LocalityAnnotation: "nvlink-island"})
	if err != nil || !ok || s.MinMember != 4 || s.Locality != SameIsland {
		t.Errorf("good annotations: %+v %v %v", s, ok, err)
	}
	if _, ok, err := FromAnnotations(map[string]string{"other": "x"}); ok || err != nil {
		t.Error("a pod without a group")
	}
	if err := (Spec{Name: "g", MinMember: 5, Members: 4}).Validate(); err == nil || !strings.Contains(err.Error(), "exceeds the group's 4 members") {
		t.Errorf("min > members: %v", err)
	}

	tr := NewTracker(cluster(t, node("a", 1, 1)), time.Minute)
	spec := Spec{Name: "g", MinMember: 2, Members: 2}
	addAll(t, tr, spec, worker("w0", 1))
	for _, tc := range []struct {
		spec Spec
		m    Member
		want string
	}{
		{spec, worker("w0", 1), "added twice"},
		{Spec{Name: "g", MinMember: 3, Members: 3}, worker("w1", 1), "earlier members said"},
		{spec, Member{Name: "w1", Request: placement.Request{NumGPU: 2, GPUMilli: 500}}, "whole GPUs"},
	} {
		if err := tr.Add(tc.spec, tc.m, t0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%v): err = %v, want %q", tc.m.Name, err, tc.want)
		}
	}
	addAll(t, tr, spec, worker("w1", 1))
	if err := tr.Add(spec, worker("w2", 1), t0); err == nil || !strings.Contains(err.Error(), "one more than") {
		t.Errorf("third member of 2: %v", err)
	}
	if _, err := tr.Reserve("nope"); err == nil {
		t.Error("unknown group")
	}
}

// TestRandomGroupsNeverHalfPlaced: many groups over a small cluster: each
// Reserve either gives every present member a reservation or none, and the
// cluster's free capacity always equals capacity minus what the groups hold.
func TestRandomGroupsNeverHalfPlaced(t *testing.T) {
	s := cluster(t, node("a", 8, 2), node("b", 8, 2), node("c", 4, 1))
	tr := NewTracker(s, time.Minute)
	held := map[string]int64{}
	total := func() int64 {
		var f int64
		for i := range s.Cluster().Nodes {
			f += s.Cluster().Nodes[i].FreeMilli()
		}
		return f
	}
	capacity := total()
	ok, failed := 0, 0
	for i := range 200 {
		name := fmt.Sprintf("g%d", i)
		spec := Spec{Name: name, MinMember: 1 + i%3, Locality: Locality(i % 3)}
		var want int64
		for k := range spec.MinMember {
			gpus := 1 + (i+k)%3
			want += int64(gpus) * 1000
			addAll(t, tr, spec, worker(fmt.Sprintf("%s-%d", name, k), gpus))
		}
		got, err := tr.Reserve(name)
		var sum int64
		for _, d := range got {
			for _, sh := range d.Grant.Shares {
				sum += int64(sh.Milli)
			}
		}
		if err == nil {
			ok++
			if sum != want {
				t.Fatalf("%s: reserved %d of %d milli", name, sum, want)
			}
			held[name] = sum
		} else {
			failed++
			tr.Expire(t0.Add(time.Hour)) // drop it
		}
		if i%7 == 6 { // some groups end
			for n := range held {
				if err := releaseGroup(tr, n); err != nil {
					t.Fatal(err)
				}
				delete(held, n)
				break
			}
		}
		var h int64
		for _, v := range held {
			h += v
		}
		if total() != capacity-h {
			t.Fatalf("after %s: free %d, want %d", name, total(), capacity-h)
		}
	}
	if ok == 0 || failed == 0 {
		t.Errorf("ok %d, failed %d: both paths must run", ok, failed)
	}
}

// releaseGroup ends a complete group: its members leave one by one.
func releaseGroup(tr *Tracker, name string) error {
	g := tr.groups[name]
	for len(g.members) > 0 {
		if err := tr.RemoveMember(name, g.members[0].Name); err != nil {
			return err
		}
	}
	return nil
}

// FuzzFromAnnotations: no annotation values make the parser panic, and
// whatever it accepts is a valid spec.
func FuzzFromAnnotations(f *testing.F) {
	f.Add("g", "2", "")
	f.Add("g", "0", "node")
	f.Add("", "x", "nvlink-island")
	f.Add("g", "3", "numa-node")
	f.Fuzz(func(t *testing.T, group, min, locality string) {
		s, ok, err := FromAnnotations(map[string]string{GroupAnnotation: group, MinMemberAnnotation: min, LocalityAnnotation: locality})
		if err != nil {
			return
		}
		if !ok || s.Validate() != nil || s.MinMember < 1 {
			t.Fatalf("accepted %+v (ok %v)", s, ok)
		}
	})
}

// A numa-node group's GPUs hang off one host NUMA node: 8 GPUs in 4
// NVLink islands (pairs) and 2 NUMA nodes, GPUs 0 and 4 taken — no island
// has 3 free, each NUMA node has. Members that want more than a NUMA node
// has free are refused with the reason; the annotation reads numa-node.
func TestSameNUMA(t *testing.T) {
	spec := node("a", 8, 4)
	spec.NUMANodes = 2
	s := cluster(t, spec)
	for _, gpu := range []int{0, 4} {
		if err := s.Cluster().Reserve(placement.Decision{Node: 0, Grant: partition.Grant{Shares: []partition.Share{{GPU: gpu, Milli: 1000}}}}); err != nil {
			t.Fatal(err)
		}
	}
	tr := NewTracker(s, time.Minute)
	addAll(t, tr, Spec{Name: "g", MinMember: 2, Locality: SameNUMA}, worker("w0", 2), worker("w1", 1))
	got, err := tr.Reserve("g")
	if err != nil {
		t.Fatal(err)
	}
	numa := map[int8]int{}
	for _, d := range got {
		for _, sh := range d.Grant.Shares {
			numa[s.Cluster().Nodes[0].GPUs[sh.GPU].NUMA]++
		}
	}
	if len(numa) != 1 || len(got["w0"].Grant.Shares) != 2 || len(got["w1"].Grant.Shares) != 1 {
		t.Fatalf("decisions %v span NUMA nodes %v", got, numa)
	}
	tr2 := NewTracker(s, time.Minute)
	addAll(t, tr2, Spec{Name: "h", MinMember: 2, Locality: SameNUMA}, worker("x0", 2), worker("x1", 2))
	if _, err := tr2.Reserve("h"); !errors.Is(err, placement.ErrUnschedulable) || !strings.Contains(err.Error(), "NUMA node") {
		t.Errorf("4 GPUs with 3 free on one NUMA node: err = %v", err)
	}
	if sp, ok, err := FromAnnotations(map[string]string{GroupAnnotation: "g", MinMemberAnnotation: "2", LocalityAnnotation: "numa-node"}); err != nil || !ok || sp.Locality != SameNUMA {
		t.Errorf("numa-node annotation: %+v, %v, %v", sp, ok, err)
	}
}
