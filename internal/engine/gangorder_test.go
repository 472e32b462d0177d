package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A Ready gang is one entry of the queue: by effective class, then first
// in first out against single pods — not ahead of every single pod
// because it is a gang.
func TestGangTakesItsPlaceInQueueOrder(t *testing.T) {
	for _, c := range []struct {
		name               string
		gangClass, soloCls priority.Class
		gangSub, soloSub   int
		want               string // who gets the node's two GPUs
	}{
		{"more urgent single first", priority.P2, priority.P1, 0, 1, "solo"},
		{"more urgent gang first", priority.P1, priority.P2, 1, 0, "gang"},
		{"same class, older single first", priority.P2, priority.P2, 1, 0, "solo"},
		{"same class, older gang first", priority.P2, priority.P2, 0, 1, "gang"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, baseConfig(), gpuNode("n1", 2))
			submit(t, e, member("g-a", "g", 2, c.gangClass, 1, c.gangSub), member("g-b", "g", 2, c.gangClass, 1, c.gangSub),
				gpus("solo", c.soloCls, 2, c.soloSub))
			e.Cycle(at(10))
			got := strings.Join(placed(e), " ")
			want := "solo@n1"
			if c.want == "gang" {
				want = "g-a@n1 g-b@n1"
			}
			if got != want {
				t.Errorf("placed %q, want %q", got, want)
			}
			if e.Pending() != map[string]int{"solo": 2, "gang": 1}[c.want] {
				t.Errorf("pending %d", e.Pending())
			}
		})
	}
}

// A stream of gangs does not starve a single pod: a 2-GPU pod waiting
// behind a full node gets the first two GPUs that free, though a new
// two-member gang of its class (or of a less urgent one) arrives every
// round and would fit them too.
func TestGangsDoNotStarveASinglePod(t *testing.T) {
	for _, gangClass := range []priority.Class{priority.P2, priority.P3} {
		e := newEngine(t, baseConfig(), gpuNode("n1", 4))
		var running []string
		for i := range 4 {
			p := gpus(fmt.Sprintf("r%d", i), priority.P2, 1, 0)
			submit(t, e, p)
			running = append(running, p.Key)
		}
		e.Cycle(at(0))
		placed(e)
		submit(t, e, gpus("big", priority.P2, 2, 1))
		bigAt := -1
		for round := 1; round <= 6 && bigAt < 0; round++ {
			now := 10 * round
			g := fmt.Sprintf("g%d", round)
			submit(t, e, member(g+"-a", g, 2, gangClass, 1, now), member(g+"-b", g, 2, gangClass, 1, now))
			for range 2 { // two GPUs free each round
				if err := e.Complete(running[0]); err != nil {
					t.Fatal(err)
				}
				running = running[1:]
			}
			e.Cycle(at(now))
			for _, ev := range e.Events() {
				if ev.Kind != Placed {
					continue
				}
				if ev.Pod.Key == "big" {
					bigAt = round
				}
				running = append(running, ev.Pod.Key)
			}
		}
		if bigAt != 1 {
			t.Errorf("gangs of %v: the 2-GPU pod started in round %d, want 1 (the first two GPUs freed)", gangClass, bigAt)
		}
	}
}

// Ageing applies to a gang's queue entry as to a pod: a P3 gang that has
// waited two steps competes as P1 and goes before fresh P2 pods that
// would take its GPUs.
func TestGangAgesPastFreshSinglePods(t *testing.T) {
	cfg := baseConfig()
	cfg.Queue.Ageing = priority.Ageing{Step: time.Minute, Ceiling: priority.P1}
	e := newEngine(t, cfg, gpuNode("n1", 2))
	submit(t, e, gpus("blocker", priority.P0, 2, 0))
	e.Cycle(at(0))
	placed(e)
	submit(t, e, member("g-a", "g", 2, priority.P3, 1, 0), member("g-b", "g", 2, priority.P3, 1, 0))
	e.Cycle(at(30)) // nothing fits; the gang is still P3
	if err := e.Complete("blocker"); err != nil {
		t.Fatal(err)
	}
	submit(t, e, gpus("fresh", priority.P2, 2, 119))
	e.Cycle(at(120))
	if got := strings.Join(placed(e), " "); got != "g-a@n1 g-b@n1" {
		t.Errorf("placed %q: want the aged gang (P1 by now) before the fresh P2 pod", got)
	}
}

// Gangs with locality get held capacity too. Two 4-GPU nodes of two
// NVLink islands (and two NUMA nodes) are kept full by a stream of 1-GPU
// pods: each round the oldest ends and a new one arrives, so one GPU is
// free at a time and a two-member group that must share a node, an
// island or a NUMA node never finds two free GPUs together. Once it has
// waited ReserveAfter, every member holds a placeholder on one node (and
// one island or NUMA node): freed GPUs there are held, the group starts.
// Without reservations it never starts.
func TestLocalityGangReservationStopsStarvation(t *testing.T) {
	for _, loc := range []gang.Locality{gang.SameNode, gang.SameIsland, gang.SameNUMA} {
		for _, reserve := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/reserve=%v", loc, reserve), func(t *testing.T) {
				cfg := baseConfig()
				if reserve {
					cfg.ReserveAfter, cfg.MaxReservations = 50*time.Second, 4
				}
				n1, n2 := gpuNode("n1", 4), gpuNode("n2", 4)
				n1.Islands, n1.NUMANodes, n2.Islands, n2.NUMANodes = 2, 2, 2, 2
				e := newEngine(t, cfg, n1, n2)
				var running []string
				for i := range 8 {
					p := gpus(fmt.Sprintf("s%d", i), priority.P2, 1, 0)
					submit(t, e, p)
					running = append(running, p.Key)
				}
				e.Cycle(at(0))
				if got := len(placed(e)); got != 8 {
					t.Fatalf("setup: %d placed", got)
				}
				a, b := member("g-a", "g", 2, priority.P2, 1, 1), member("g-b", "g", 2, priority.P2, 1, 1)
				a.Gang.Locality, b.Gang.Locality = loc, loc
				submit(t, e, a, b)
				started, reserved := false, map[string]int{}
				for step := 1; step <= 40 && !started; step++ {
					now := step * 10
					if err := e.Complete(running[0]); err != nil {
						t.Fatal(err)
					}
					running = running[1:]
					submit(t, e, gpus(fmt.Sprintf("new%d", step), priority.P2, 1, now))
					e.Cycle(at(now))
					for _, ev := range e.Events() {
						switch {
						case ev.Kind == Placed && strings.HasPrefix(ev.Pod.Key, "g-"):
							started = true
							checkTogether(t, e, loc)
						case ev.Kind == Placed:
							running = append(running, ev.Pod.Key)
						case ev.Kind == Reserved && strings.HasPrefix(ev.Pod.Key, "g-"):
							reserved[ev.Pod.Key] = ev.Node
						}
					}
				}
				if !reserve {
					if started {
						t.Errorf("without reservations the group started: the test does not starve it")
					}
					return
				}
				if !started || len(reserved) != 2 || reserved["g-a"] != reserved["g-b"] {
					t.Errorf("started %v, member reservations %v: want both members held on one node, then started", started, reserved)
				}
				if res := e.Reservations(); len(res) != 0 {
					t.Errorf("reservations %v left after the group started", res)
				}
			})
		}
	}
}

// checkTogether fails unless the running members of g share a node and,
// for island and NUMA groups, an island or NUMA node.
func checkTogether(t *testing.T, e *Engine, loc gang.Locality) {
	t.Helper()
	ra, okA := e.Running("g-a")
	rb, okB := e.Running("g-b")
	if !okA || !okB {
		t.Fatalf("a member started without the other")
	}
	if ra.Decision.Node != rb.Decision.Node {
		t.Fatalf("members on nodes %d and %d", ra.Decision.Node, rb.Decision.Node)
	}
	n := &e.cluster.Nodes[ra.Decision.Node]
	ga, gb := &n.GPUs[ra.Decision.Grant.Shares[0].GPU], &n.GPUs[rb.Decision.Grant.Shares[0].GPU]
	if (loc == gang.SameIsland && ga.Island != gb.Island) || (loc == gang.SameNUMA && ga.NUMA != gb.NUMA) {
		t.Fatalf("%v group split: GPUs %+v and %+v", loc, *ga, *gb)
	}
}

// Reservations hold capacity against backfill, not against more urgent
// work, for gangs as for pods: a P0 gang takes the GPU held for a waiting
// P3 pod before it would preempt or wait; a P3 pod behind does not.
func TestMoreUrgentGangMayUseALessUrgentReservation(t *testing.T) {
	cfg := baseConfig()
	cfg.ReserveAfter, cfg.MaxReservations = time.Second, 2
	e := newEngine(t, cfg, gpuNode("n1", 2))
	run := gpus("run", priority.P2, 1, 0)
	run.Preemptible = false
	submit(t, e, run)
	e.Cycle(at(0))
	submit(t, e, gpus("exp", priority.P3, 2, 1))
	e.Cycle(at(5)) // exp waits and holds n1's free GPU
	if res := e.Reservations(); len(res) != 1 {
		t.Fatalf("reservations %v, want exp's", res)
	}
	placed(e)
	submit(t, e, member("rt-a", "rt", 1, priority.P0, 1, 6), member("late-a", "late", 1, priority.P3, 1, 6))
	e.Cycle(at(7))
	if got := strings.Join(placed(e), " "); got != "rt-a@n1" {
		t.Errorf("placed %q, want rt-a@n1 on the GPU held for the less urgent exp (and not the group late, behind exp)", got)
	}
	if res := e.Reservations(); len(res) != 1 {
		t.Errorf("reservations %v: exp keeps its own", res)
	}
}
