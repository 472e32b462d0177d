package placement

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// A node filter keeps pods off refused nodes, sends them to preferred
// nodes first, and is asked again for a node refiltered; the index gives
// exactly the scan's answer throughout.
func TestNodeFilterRefusesPrefersAndRefilters(t *testing.T) {
	var specs []partition.NodeSpec
	for i := range 6 {
		specs = append(specs, node(fmt.Sprint("n", i), "A100", 32000, 4))
	}
	refused := map[string]map[int]bool{"gpu-pool": {0: true, 1: true, 2: true}}
	prefer := map[string]map[int]int64{"gpu-pool": {5: 10}}
	asked := 0
	filter := func(key string, i int) (bool, int64) {
		asked++
		return !refused[key][i], prefer[key][i]
	}
	build := func(scan bool) *Scheduler {
		c, err := NewCluster(specs)
		if err != nil {
			t.Fatal(err)
		}
		c.SetNodeFilter(filter)
		p, _ := NewPolicy("bestfit", c, Options{})
		return NewScheduler(c, p, scan)
	}
	indexed, scanned := build(false), build(true)
	place := func(r Request) (Decision, error) {
		a, errA := indexed.Place(&r)
		b, errB := scanned.Place(&r)
		if (errA == nil) != (errB == nil) || a.Node != b.Node {
			t.Fatalf("index and scan differ for %s: %v/%v, nodes %d/%d", r.Name, errA, errB, a.Node, b.Node)
		}
		return a, errA
	}
	pool := func(name string) Request {
		return Request{Name: name, CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, NodeConstraint: "gpu-pool"}
	}
	// Preferred node 5 takes the pool's pods while it has room.
	for k := range 4 {
		d, err := place(pool(fmt.Sprint("p", k)))
		if err != nil || d.Node != 5 {
			t.Fatalf("pod %d went to node %d (%v), want the preferred node 5", k, d.Node, err)
		}
	}
	// Then nodes 3 and 4, never 0-2.
	for k := 4; k < 12; k++ {
		d, err := place(pool(fmt.Sprint("p", k)))
		if err != nil || d.Node < 3 {
			t.Fatalf("pod %d went to node %d (%v): refused nodes are 0-2", k, d.Node, err)
		}
	}
	_, err := place(pool("p12"))
	if err == nil || !strings.Contains(err.Error(), "3 nodes refuse the pod's node constraints") {
		t.Fatalf("pool full: got %v, want the refusal counted", err)
	}
	// A pod without constraints still uses nodes 0-2.
	if d, err := place(Request{Name: "free", NumGPU: 1, GPUMilli: 1000}); err != nil || d.Node > 2 {
		t.Fatalf("unconstrained pod: node %d, %v", d.Node, err)
	}
	// Node 1 joins the pool: after a refilter the next pool pod goes there.
	delete(refused["gpu-pool"], 1)
	indexed.Cluster().RefilterNode(1)
	scanned.Cluster().RefilterNode(1)
	before := asked
	if d, err := place(pool("p13")); err != nil || d.Node != 1 {
		t.Fatalf("after the refilter: node %d, %v, want 1", d.Node, err)
	}
	if asked == before {
		t.Fatal("the refiltered node was not asked again")
	}
	if !indexed.Cluster().NodeAdmits(1, &Request{NodeConstraint: "gpu-pool"}) || indexed.Cluster().Admits(0, &Request{NodeConstraint: "gpu-pool"}) {
		t.Fatal("NodeAdmits/Admits disagree with the filter")
	}
}

// RefilterConstraint makes the filter be asked again for one constraint on
// every node (its answers depend on pods placed elsewhere), through the
// index as through a scan; other constraints keep their memoised answers.
func TestRefilterConstraintAsksAgainForThatConstraintOnly(t *testing.T) {
	var specs []partition.NodeSpec
	for i := range 4 {
		specs = append(specs, node(fmt.Sprint("n", i), "A100", 32000, 4))
	}
	refused := map[int]bool{}
	asked := map[string]int{}
	filter := func(key string, i int) (bool, int64) {
		asked[key]++
		return key != "spread" || !refused[i], 0
	}
	for _, scan := range []bool{false, true} {
		c, err := NewCluster(specs)
		if err != nil {
			t.Fatal(err)
		}
		c.SetNodeFilter(filter)
		p, _ := NewPolicy("bestfit", c, Options{})
		s := NewScheduler(c, p, scan)
		r := Request{Name: "a", CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, NodeConstraint: "spread"}
		other := Request{Name: "b", CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, NodeConstraint: "other"}
		d, err := s.Place(&r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Place(&other); err != nil {
			t.Fatal(err)
		}
		// The node the pod went to now refuses pods of its constraint
		// (as anti-affinity would): without a refilter the memo keeps it.
		refused[d.Node] = true
		clear(asked)
		c.RefilterConstraint("spread")
		r.Name = "a2"
		d2, err := s.Place(&r)
		if err != nil || d2.Node == d.Node {
			t.Fatalf("scan=%v: after the refilter the pod went to node %d (%v), refused node %d", scan, d2.Node, err, d.Node)
		}
		if asked["spread"] < len(specs)-1 {
			t.Fatalf("scan=%v: asked %d times for the refiltered constraint", scan, asked["spread"])
		}
		other.Name = "b2"
		if _, err := s.Place(&other); err != nil || asked["other"] != 0 {
			t.Fatalf("scan=%v: another constraint asked %d times after the refilter (%v)", scan, asked["other"], err)
		}
		clear(refused)
	}
}
