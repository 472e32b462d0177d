package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

func gangPreemptEngine(t *testing.T) *Engine {
	cfg := baseConfig()
	cfg.Preemption, cfg.RequeuePreempted = true, false
	return newEngine(t, cfg, gpuNode("n1", 2), gpuNode("n2", 2))
}

func freeMilli(e *Engine) int64 {
	var m int64
	for i := range e.cluster.Nodes {
		m += e.cluster.Nodes[i].FreeMilli()
	}
	return m
}

// A ready gang that fits nowhere preempts less urgent pods on as many nodes
// as its members need: the second member plans on what the first left.
func TestGangPreemptsAcrossNodes(t *testing.T) {
	e := gangPreemptEngine(t)
	submit(t, e, gpus("a", priority.P3, 1, 0), gpus("b", priority.P3, 1, 0), gpus("c", priority.P2, 1, 0), gpus("d", priority.P3, 1, 0))
	e.Cycle(at(1))
	placed(e)
	submit(t, e, member("g-1", "g", 2, priority.P1, 2, 100), member("g-2", "g", 2, priority.P1, 2, 100))
	e.Cycle(at(200))
	got := strings.Join(placed(e), " ")
	for _, want := range []string{"evict:a", "evict:b", "evict:c", "evict:d", "g-1@", "g-2@"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %q: want %s", got, want)
		}
	}
	if e.RunningCount() != 2 || freeMilli(e) != 0 {
		t.Errorf("running %d, free %d milli: want the gang alone on a full cluster", e.RunningCount(), freeMilli(e))
	}
}

// When not every member can get room, nobody is evicted and the cluster is
// as it was.
func TestGangPreemptionAllOrNobody(t *testing.T) {
	e := gangPreemptEngine(t)
	submit(t, e, gpus("low-1", priority.P3, 1, 0), gpus("low-2", priority.P3, 1, 0), gpus("hi-1", priority.P0, 1, 0), gpus("hi-2", priority.P0, 1, 0))
	e.Cycle(at(1))
	before := strings.Join(placed(e), " ")
	if !strings.Contains(before, "low-1@n1") && !strings.Contains(before, "low-1@n2") {
		t.Fatalf("setup: %q", before)
	}
	// Each member needs a whole node; only the P3 node can be emptied.
	submit(t, e, member("g-1", "g", 2, priority.P1, 2, 100), member("g-2", "g", 2, priority.P1, 2, 100))
	e.Cycle(at(200))
	if got := placed(e); len(got) != 0 {
		t.Errorf("events %v: want none (the second member has no plan)", got)
	}
	if e.RunningCount() != 4 || freeMilli(e) != 0 || e.Pending() != 2 {
		t.Errorf("running %d, free %d, pending %d: want the cluster untouched", e.RunningCount(), freeMilli(e), e.Pending())
	}
}

// The single-pod rules hold for a gang's victims: a pod inside its minimum
// run time is not taken, nor a member of a running gang alone.
func TestGangPreemptionKeepsRules(t *testing.T) {
	e := gangPreemptEngine(t)
	young := gpus("young", priority.P3, 2, 0)
	young.MinRun = time.Hour
	o1, o2 := member("o-1", "o", 2, priority.P3, 1, 0), member("o-2", "o", 2, priority.P3, 1, 0)
	o2.Preemptible = false // protects its whole gang
	submit(t, e, young, o1, o2)
	e.Cycle(at(1))
	placed(e)
	submit(t, e, member("g-1", "g", 2, priority.P1, 1, 100), member("g-2", "g", 2, priority.P1, 1, 100))
	e.Cycle(at(200))
	if got := placed(e); len(got) != 0 {
		t.Errorf("events %v: want no eviction (min run time, protected gang)", got)
	}
	if e.RunningCount() != 3 {
		t.Errorf("running %d, want 3", e.RunningCount())
	}
}

// No random sequence of single pods and gangs (with preemption for both,
// member deadlines and maximum waits) oversubscribes a GPU, loses a grant,
// breaks a preemption rule, or starts part of a gang.
func TestPropertyGangPreemption(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		cfg := Config{Queue: queue.Config{Ageing: priority.Ageing{Step: time.Minute, Ceiling: priority.P1}, EscalateTo: priority.P0, BackoffMax: 5 * time.Second, BackoffInitial: time.Second},
			Preemption: true, Cooldown: 2 * time.Minute, RequeuePreempted: rng.IntN(2) == 0}
		e := newEngine(t, cfg, smallCluster()...)
		now := t0
		var running []string
		size := map[string]int{} // gang → members
		n, gangsPlaced, forGangs := 0, 0, 0
		for step := 0; step < 600; step++ {
			switch op := rng.IntN(10); {
			case op < 3:
				n++
				_ = e.Submit(randomPod(rng, fmt.Sprint("p", n), now))
			case op == 3:
				n++
				g, k, class := fmt.Sprint("g", n), 2+rng.IntN(2), priority.Class(rng.IntN(4))
				size[g] = k
				for i := range k {
					p := randomPod(rng, fmt.Sprint(g, "-", i), now)
					p.Class, p.Gang = class, &gang.Spec{Name: g, MinMember: k}
					if rng.IntN(3) == 0 {
						p.MaxWait = time.Duration(rng.IntN(120)) * time.Second
					}
					_ = e.Submit(p)
				}
			case op < 6 && len(running) > 0:
				j := rng.IntN(len(running))
				if _, ok := e.Running(running[j]); ok {
					if err := e.Complete(running[j]); err != nil {
						t.Fatal(err)
					}
				}
				running = append(running[:j], running[j+1:]...)
			default:
				now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				e.Cycle(now)
			}
			started := map[string]int{}
			for _, ev := range e.Events() {
				switch ev.Kind {
				case Placed:
					running = append(running, ev.Pod.Key)
					if ev.Pod.Gang != nil {
						started[ev.Pod.Gang.Name]++
					}
				case Preempted:
					v, by := ev.Pod, ev.By
					if by.Gang != nil {
						forGangs++
					}
					if !v.Preemptible || !by.Class.Above(v.Class) {
						t.Fatalf("seed %d: %s (%v, preemptible %v) evicted for %s (%v)", seed, v.Key, v.Class, v.Preemptible, by.Key, by.Class)
					}
					if ev.Ran < v.MinRun {
						t.Fatalf("seed %d: %s evicted after %v, inside its minimum run time %v", seed, v.Key, ev.Ran, v.MinRun)
					}
				}
			}
			for g, k := range started {
				if k != size[g] {
					t.Fatalf("seed %d step %d: gang %s started %d of %d members", seed, step, g, k, size[g])
				}
				gangsPlaced++
			}
			checkBooks(t, e, step)
		}
		if gangsPlaced == 0 || forGangs == 0 {
			t.Errorf("seed %d: %d gangs started, %d pods evicted for gangs: the test exercised nothing", seed, gangsPlaced, forGangs)
		}
	}
}

// Planning members largest first alone spends an old pod on the large
// member and then a young one on the small member; planning the small
// member first lets it take the free GPU and the large one evict two young
// pods — as many victims, far less work lost. n1 runs "old" (started at 1)
// with one GPU free, n2 runs "young-1" and "young-2" (started at 5000); a
// gang of a 2-GPU and a 1-GPU member arrives at 6000.
func TestGangPreemptionChoosesTheCheaperOrder(t *testing.T) {
	e := gangPreemptEngine(t)
	submit(t, e, gpus("old", priority.P3, 1, 0), gpus("filler", priority.P3, 1, 0))
	e.Cycle(at(1))
	if got := strings.Join(placed(e), " "); got != "old@n1 filler@n1" {
		t.Fatalf("setup: %q", got)
	}
	submit(t, e, gpus("young-1", priority.P3, 1, 4000), gpus("young-2", priority.P3, 1, 4000))
	e.Cycle(at(5000))
	if err := e.Complete("filler"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(placed(e), " "); got != "young-1@n2 young-2@n2" {
		t.Fatalf("setup: %q", got)
	}
	submit(t, e, member("g-big", "g", 2, priority.P1, 2, 6000), member("g-small", "g", 2, priority.P1, 1, 6000))
	e.Cycle(at(6000))
	got := strings.Join(placed(e), " ")
	for _, want := range []string{"evict:young-1", "evict:young-2", "g-big@n2", "g-small@n1"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %q: want %s", got, want)
		}
	}
	if strings.Contains(got, "evict:old") {
		t.Errorf("events %q: the old pod was evicted though two young ones cost less", got)
	}
}
