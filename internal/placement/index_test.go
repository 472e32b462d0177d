package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// The index must answer exactly what a scan answers, through placements,
// releases and evictions of cached shapes.
func TestIndexMatchesScan(t *testing.T) {
	for _, policy := range []string{"bestfit", "binpack", "spread", "fgd", "tessera"} {
		t.Run(policy, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			var specs []partition.NodeSpec
			for i := 0; i < 40; i++ {
				specs = append(specs, partition.NodeSpec{
					Name: fmt.Sprint("n", i), Model: []string{"A", "B", "C"}[i%3], CPU: int64(8000 + 8000*(i%5)),
					MemMiB: 1 << 18, GPUs: []int{1, 2, 4, 8}[i%4], GPUMemMiB: 16384, Islands: 1 + i%2,
				})
			}
			var pods []Request
			for i := 0; i < 600; i++ {
				r := randomRequest(rng, i)
				if rng.IntN(4) == 0 {
					r.Models = []string{"A"}
				}
				pods = append(pods, r)
			}
			var scheds [2]*Scheduler
			for k := range scheds {
				c, _ := NewCluster(specs)
				p, _ := NewPolicy(policy, c, Options{Workload: NewWorkload(c, pods, 0.95)})
				scheds[k] = NewScheduler(c, p, k == 1)
			}
			scheds[0].index.MaxShapes = 8 // force evictions and rebuilds
			var live []Decision
			for i := range pods {
				a, errA := scheds[0].Place(&pods[i])
				b, errB := scheds[1].Place(&pods[i])
				if (errA == nil) != (errB == nil) || (errA == nil && (a.Node != b.Node || fmt.Sprint(a.Grant) != fmt.Sprint(b.Grant))) {
					t.Fatalf("pod %d: index chose %+v (%v), scan chose %+v (%v)", i, a, errA, b, errB)
				}
				if errA == nil {
					live = append(live, a)
				}
				if len(live) > 0 && rng.IntN(3) == 0 { // pods also leave
					j := rng.IntN(len(live))
					for _, s := range scheds {
						if err := s.Cluster().Release(live[j]); err != nil {
							t.Fatal(err)
						}
					}
					live = append(live[:j], live[j+1:]...)
				}
			}
			if scheds[0].index.Shapes() > 8 {
				t.Errorf("index holds %d shapes, limit 8", scheds[0].index.Shapes())
			}
		})
	}
}

// randomRequest is a CPU-only pod (2 in 10), a single-GPU share (6 in 10) or
// a pod of 1-4 whole GPUs, with some CPU and memory.
func randomRequest(rng *rand.Rand, i int) Request {
	r := Request{Name: fmt.Sprint("p", i), CPUMilli: int64(rng.IntN(8)) * 1000, MemMiB: int64(rng.IntN(4)) * 1024}
	switch k := rng.IntN(10); {
	case k < 6:
		r.NumGPU, r.GPUMilli = 1, int32(50*(1+rng.IntN(20)))
	case k < 8:
		r.NumGPU, r.GPUMilli, r.SameIsland = 1+rng.IntN(4), 1000, rng.IntN(2) == 0
	}
	return r
}

func TestIndexSingleNodeAndEmptyCluster(t *testing.T) {
	for _, n := range []int{0, 1} {
		var specs []partition.NodeSpec
		for i := 0; i < n; i++ {
			specs = append(specs, partition.NodeSpec{Name: "only", Model: "A", CPU: 1000, MemMiB: 1, GPUs: 1})
		}
		c, _ := NewCluster(specs)
		p, _ := NewPolicy("tessera", c, Options{})
		s := NewScheduler(c, p, false)
		r := Request{Name: "p", NumGPU: 1, GPUMilli: 500}
		_, err := s.Place(&r)
		if (err == nil) != (n == 1) {
			t.Errorf("%d nodes: err = %v", n, err)
		}
	}
}

func TestIndexFollowsJoinsAndCordons(t *testing.T) {
	c := testCluster(t, node("a", "T4", 64000, 2))
	p, _ := NewPolicy("fgd", c, Options{})
	s := NewScheduler(c, p, false)
	r := Request{Name: "p", CPUMilli: 1000, NumGPU: 2, GPUMilli: 1000}
	if d, err := s.Place(&r); err != nil || d.NodeName != "a" {
		t.Fatalf("first pod: %+v %v", d, err)
	}
	if _, err := s.Schedule(&r); err == nil {
		t.Fatal("a full cluster took another 2-GPU pod")
	}
	i, err := c.AddNode(node("b", "T4", 64000, 2))
	if err != nil || i != 1 {
		t.Fatalf("AddNode: %d %v", i, err)
	}
	if _, err := c.AddNode(node("b", "T4", 1, 1)); err == nil {
		t.Fatal("a second node named b was added")
	}
	c.Cordon(1, true)
	if _, err := s.Schedule(&r); err == nil || !strings.Contains(err.Error(), "1 nodes cordoned") {
		t.Fatalf("cordoned node was used or not explained: %v", err)
	}
	c.Cordon(1, false)
	if d, err := s.Schedule(&r); err != nil || d.NodeName != "b" {
		t.Fatalf("after uncordon: %+v %v", d, err)
	}
	if j, ok := c.NodeIndex("b"); !ok || j != 1 {
		t.Fatal("NodeIndex(b)")
	}
}

// A randomized differential check of the index against a full scan through
// every operation that changes what a node can take: placements, releases,
// nodes joining (some of a GPU model the policy has never seen) and
// cordons. Each step compares the decision of every deterministic policy.
func TestIndexMatchesScanThroughJoinsAndCordons(t *testing.T) {
	models := []string{"A", "B", "C"}
	spec := func(rng *rand.Rand, i int, model string) partition.NodeSpec {
		return partition.NodeSpec{
			Name: fmt.Sprint("n", i), Model: model, CPU: int64(4000 + 4000*rng.IntN(6)),
			MemMiB: 1 << 16, GPUs: []int{0, 1, 2, 4, 8}[rng.IntN(5)], GPUMemMiB: 16384, Islands: 1 + rng.IntN(2),
		}
	}
	request := func(rng *rand.Rand, i int) Request {
		r := randomRequest(rng, i)
		switch rng.IntN(5) {
		case 0:
			r.Models = []string{models[rng.IntN(len(models))]}
		case 1:
			r.Models = []string{"A", "D"} // D joins later
		}
		return r
	}
	for _, policy := range []string{"bestfit", "binpack", "spread", "fgd", "tessera"} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprint(policy, "/", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 99))
				var specs []partition.NodeSpec
				for i := 0; i < 12; i++ {
					specs = append(specs, spec(rng, i, models[i%len(models)]))
				}
				// Few shapes, so that cached ones are asked again after
				// their nodes changed, and a few more than the index keeps.
				var pool, history []Request
				for i := 0; i < 8; i++ {
					pool = append(pool, request(rng, i))
				}
				for i := 0; i < 200; i++ {
					history = append(history, pool[rng.IntN(len(pool))])
				}
				var scheds [2]*Scheduler
				for k := range scheds {
					c, err := NewCluster(specs)
					if err != nil {
						t.Fatal(err)
					}
					p, _ := NewPolicy(policy, c, Options{Workload: NewWorkload(c, history, 0.95)})
					scheds[k] = NewScheduler(c, p, k == 1)
				}
				scheds[0].index.MaxShapes = 6
				var live []Decision
				joined := len(specs)
				for step := 0; step < 1500; step++ {
					switch op := rng.IntN(20); {
					case op == 0 && joined < 64: // a node joins; a quarter of them of a new model
						model := models[rng.IntN(len(models))]
						if rng.IntN(4) == 0 {
							model = "D"
						}
						s := spec(rng, joined, model)
						joined++
						for _, sc := range scheds {
							if _, err := sc.Cluster().AddNode(s); err != nil {
								t.Fatal(err)
							}
						}
					case op == 1: // cordon or uncordon
						i, on := rng.IntN(joined), rng.IntN(2) == 0
						for _, sc := range scheds {
							sc.Cluster().Cordon(i, on)
						}
					case op < 7 && len(live) > 0: // a pod leaves
						j := rng.IntN(len(live))
						for _, sc := range scheds {
							if err := sc.Cluster().Release(live[j]); err != nil {
								t.Fatal(err)
							}
						}
						live = append(live[:j], live[j+1:]...)
					default:
						r := pool[rng.IntN(len(pool))]
						a, errA := scheds[0].Place(&r)
						b, errB := scheds[1].Place(&r)
						if (errA == nil) != (errB == nil) || (errA == nil && (a.Node != b.Node || fmt.Sprint(a.Grant) != fmt.Sprint(b.Grant))) {
							t.Fatalf("step %d, %+v: index chose %+v (%v), scan chose %+v (%v)", step, r, a, errA, b, errB)
						}
						if errA == nil {
							live = append(live, a)
						}
					}
				}
			})
		}
	}
}

// A node that joins later, of a model the workload's classes name, must be
// measured as it would be had it been there from the start: the classes
// restricted to its model can use it.
func TestJoinedNodeOfWorkloadModelIsMeasuredLikeAnOriginal(t *testing.T) {
	history := []Request{
		{Name: "a", CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, Models: []string{"A100"}},
		{Name: "b", CPUMilli: 1000, NumGPU: 1, GPUMilli: 500, Models: []string{"A100"}},
		{Name: "c", CPUMilli: 1000, NumGPU: 1, GPUMilli: 500},
	}
	from := func(c *Cluster, err error) *Cluster {
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	original := from(NewCluster([]partition.NodeSpec{node("t4", "T4", 64000, 2), node("a100", "A100", 64000, 2)}))
	want := NewFragmentation(NewWorkload(original, history, 1)).Node(&original.Nodes[1], original.ModelOf(1))

	grown := from(NewCluster([]partition.NodeSpec{node("t4", "T4", 64000, 2)}))
	f := NewFragmentation(NewWorkload(grown, history, 1))
	i, err := grown.AddNode(node("a100", "A100", 64000, 2))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Node(&grown.Nodes[i], grown.ModelOf(i)); got != want {
		t.Fatalf("fragmentation of the A100 node that joined later = %v, want %v as when it was there from the start", got, want)
	}
}
