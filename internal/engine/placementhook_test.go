package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// OnPlacement hears each placement as the cycle makes it, so a filter that
// reads which pods run where (here: one "spread" pod per node, as
// anti-affinity would) and is refiltered from the hook keeps pods placed in
// the same cycle apart; a completed pod frees its node for the rule too.
func TestOnPlacementKeepsPodsOfOneCycleApart(t *testing.T) {
	var specs []partition.NodeSpec
	for _, n := range []string{"n0", "n1", "n2"} {
		specs = append(specs, partition.NodeSpec{Name: n, Model: "A100", CPU: 64000, MemMiB: 65536, GPUs: 4, GPUMemMiB: 40960})
	}
	c, err := placement.NewCluster(specs)
	if err != nil {
		t.Fatal(err)
	}
	occupied := map[int]int{}
	c.SetNodeFilter(func(key string, i int) (bool, int64) { return key != "spread" || occupied[i] == 0, 0 })
	pol, _ := placement.NewPolicy("binpack", c, placement.Options{})
	e, err := New(Config{}, placement.NewScheduler(c, pol, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	heard := 0
	e.OnPlacement(func(p *Pod, node int, placed bool) {
		heard++
		if p.Request.NodeConstraint != "spread" {
			return
		}
		if placed {
			occupied[node]++
		} else {
			occupied[node]--
		}
		c.RefilterConstraint("spread")
		e.ClusterChanged()
	})
	now := time.Unix(100, 0)
	for _, k := range []string{"a", "b", "c", "d"} {
		p := &Pod{Key: k, Class: priority.P2, Submitted: now, Request: placement.Request{Name: k, CPUMilli: 100, NumGPU: 1, GPUMilli: 100, NodeConstraint: "spread"}}
		if err := e.Submit(p); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(now)
	nodes := map[int]bool{}
	for _, k := range []string{"a", "b", "c"} {
		r, ok := e.Running(k)
		if !ok {
			t.Fatalf("%s not placed", k)
		}
		if nodes[r.Decision.Node] {
			t.Fatalf("two spread pods on node %d in one cycle (binpack would stack them)", r.Decision.Node)
		}
		nodes[r.Decision.Node] = true
	}
	if _, ok := e.Running("d"); ok || heard != 3 {
		t.Fatalf("d placed with every node taken (heard %d placements)", heard)
	}
	if err := e.Complete("b"); err != nil {
		t.Fatal(err)
	}
	e.Cycle(now.Add(time.Minute))
	if _, ok := e.Running("d"); !ok || heard != 5 {
		t.Fatalf("d not placed on the node b freed (heard %d)", heard)
	}
}

// A gang's members are heard one by one (OnTrial) as the tracker places
// them while the group is reserved, so the same filter keeps them apart: on 3 nodes
// the 3 members take one node each; on 2 nodes the group does not fit
// whole, nothing starts, and every trial placement is taken back (the
// hook's books end empty).
func TestOnPlacementKeepsGangMembersApart(t *testing.T) {
	for _, nodes := range []int{3, 2} {
		var specs []partition.NodeSpec
		for i := range nodes {
			specs = append(specs, partition.NodeSpec{Name: fmt.Sprint("n", i), Model: "A100", CPU: 64000, MemMiB: 65536, GPUs: 4, GPUMemMiB: 40960})
		}
		c, err := placement.NewCluster(specs)
		if err != nil {
			t.Fatal(err)
		}
		at := map[string]int{} // pod → node, as the inter-pod index counts it
		occupied := func(i int) bool {
			for _, n := range at {
				if n == i {
					return true
				}
			}
			return false
		}
		c.SetNodeFilter(func(key string, i int) (bool, int64) { return key != "spread" || !occupied(i), 0 })
		pol, _ := placement.NewPolicy("binpack", c, placement.Options{})
		e, err := New(Config{}, placement.NewScheduler(c, pol, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		trials, started := 0, 0
		e.OnTrial(func(p *Pod, node int, held bool) {
			if held {
				trials++
				at[p.Key] = node
			} else {
				delete(at, p.Key)
			}
			c.RefilterConstraint("spread")
		})
		e.OnPlacement(func(p *Pod, node int, placed bool) {
			if n, ok := at[p.Key]; placed && (!ok || n != node) {
				t.Errorf("%s started on node %d, not where its trial was held (%v)", p.Key, node, at)
			}
			started++
		})
		now := time.Unix(100, 0)
		for _, k := range []string{"w0", "w1", "w2"} {
			p := &Pod{Key: k, Class: priority.P2, Submitted: now, Gang: &gang.Spec{Name: "workers", MinMember: 3},
				Request: placement.Request{Name: k, CPUMilli: 100, NumGPU: 1, GPUMilli: 1000, NodeConstraint: "spread"}}
			if err := e.Submit(p); err != nil {
				t.Fatal(err)
			}
		}
		e.Cycle(now)
		used := map[int]string{}
		for _, k := range []string{"w0", "w1", "w2"} {
			r, ok := e.Running(k)
			if nodes == 2 {
				if ok {
					t.Fatalf("%s started on node %d: a group of 3 that wants a node each does not fit 2 nodes", k, r.Decision.Node)
				}
				continue
			}
			if !ok {
				t.Fatalf("%s not placed on %d nodes", k, nodes)
			}
			if other, taken := used[r.Decision.Node]; taken {
				t.Fatalf("%s and %s both on node %d (binpack would stack them)", other, k, r.Decision.Node)
			}
			used[r.Decision.Node] = k
		}
		if nodes == 2 && (len(at) != 0 || trials == 0 || started != 0) {
			t.Fatalf("after a failed group the hook still counts %v (%d trials, %d started)", at, trials, started)
		}
		if nodes == 3 && (trials != 3 || started != 3) {
			t.Fatalf("%d trials and %d starts heard for a group of 3 that fits", trials, started)
		}
	}
}
