package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// Random single pods and gangs of every locality in one queue, with
// reservations, ageing, preemption, deletions and completions: after
// every step the grants the engine holds (running pods and placeholders)
// add up to what the nodes have reserved, no GPU is oversubscribed, a gang
// starts whole and together where its locality says, and Pending counts
// what EachPending lists. Then the cluster drains: every pod still
// pending starts or is dropped (a group that cannot be placed even on an
// empty cluster times out) — no entry, single or gang, waits forever.
func TestPropertyGangsInTheQueue(t *testing.T) {
	localityReserved, localityStarted := 0, 0
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 12))
		cfg := Config{Queue: queue.Config{Ageing: priority.Ageing{Step: time.Minute, Ceiling: priority.P1}, EscalateTo: priority.P1, BackoffInitial: time.Second, BackoffMax: 5 * time.Second},
			ReserveAfter: 30 * time.Second, MaxReservations: 4, Preemption: rng.IntN(2) == 0, Cooldown: 2 * time.Minute,
			RequeuePreempted: rng.IntN(2) == 0, GangTimeout: 10 * time.Minute}
		nodes := smallCluster()
		for i := range nodes {
			nodes[i].NUMANodes = 2
		}
		e := newEngine(t, cfg, nodes...)
		now := t0
		var running, pendingMembers []string
		spec := map[string]gang.Spec{}
		n := 0
		check := func(step int) {
			t.Helper()
			started := map[string][]placement.Decision{}
			for _, ev := range e.Events() {
				switch {
				case ev.Kind == Placed:
					running = append(running, ev.Pod.Key)
					if g := ev.Pod.Gang; g != nil {
						started[g.Name] = append(started[g.Name], ev.Decision)
					}
				case ev.Kind == Reserved && ev.Pod.Gang != nil && ev.Pod.Gang.Locality != gang.Anywhere:
					localityReserved++
				}
			}
			for g, rs := range started {
				if s := spec[g]; len(rs) < s.MinMember {
					t.Fatalf("seed %d step %d: gang %s started %d members, min-member %d", seed, step, g, len(rs), s.MinMember)
				}
				if spec[g].Locality != gang.Anywhere {
					localityStarted++
					checkLocality(t, e, spec[g].Locality, rs)
				}
			}
			checkBooks(t, e, step)
			listed := 0
			e.EachPending(func(*Pod) { listed++ })
			if listed != e.Pending() {
				t.Fatalf("seed %d step %d: Pending %d, EachPending lists %d", seed, step, e.Pending(), listed)
			}
		}
		for step := 0; step < 600; step++ {
			switch op := rng.IntN(12); {
			case op < 3:
				n++
				_ = e.Submit(randomPod(rng, fmt.Sprint("p", n), now))
			case op < 5:
				n++
				g := fmt.Sprint("g", n)
				s := gang.Spec{Name: g, MinMember: 2 + rng.IntN(2), Locality: gang.Locality(rng.IntN(4))}
				spec[g] = s
				class := priority.Class(rng.IntN(4))
				for i := range s.MinMember {
					key := fmt.Sprint(g, "-", i)
					p := randomPod(rng, key, now)
					if s.Locality == gang.SameIsland || s.Locality == gang.SameNUMA {
						p = gpus(key, class, 1, 0) // whole GPUs, as such groups take
						p.Submitted = now
					}
					p.Class, p.Gang, p.Deadline = class, &s, time.Time{}
					if e.Submit(p) == nil {
						pendingMembers = append(pendingMembers, key)
					}
				}
			case op == 5 && len(pendingMembers) > 0:
				j := rng.IntN(len(pendingMembers))
				e.Delete(pendingMembers[j])
				pendingMembers = append(pendingMembers[:j], pendingMembers[j+1:]...)
			case op < 8 && len(running) > 0:
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
			check(step)
		}
		// Drain: nothing arrives, what runs ends.
		for round := 0; round < 200 && e.Pending() > 0; round++ {
			for _, k := range running {
				if _, ok := e.Running(k); ok {
					_ = e.Complete(k)
				}
			}
			running = running[:0]
			now = now.Add(time.Minute)
			e.Cycle(now)
			check(600 + round)
		}
		if e.Pending() > 0 {
			t.Errorf("seed %d: %d pods still pending on an empty cluster after the drain", seed, e.Pending())
		}
	}
	t.Logf("%d member reservations of groups with locality, %d such groups started", localityReserved, localityStarted)
	if localityReserved == 0 || localityStarted == 0 {
		t.Errorf("%d member reservations of groups with locality, %d such groups started: the test exercised nothing", localityReserved, localityStarted)
	}
}

// checkLocality fails unless the members share a node and, for island and
// NUMA groups, every member's GPUs share an island or NUMA node.
func checkLocality(t *testing.T, e *Engine, loc gang.Locality, ds []placement.Decision) {
	t.Helper()
	node, key := ds[0].Node, -1
	for _, d := range ds {
		if d.Node != node {
			t.Fatalf("%v group on nodes %d and %d", loc, node, d.Node)
		}
		for _, s := range d.Grant.Shares {
			g := &e.cluster.Nodes[node].GPUs[s.GPU]
			k := -1
			switch loc {
			case gang.SameIsland:
				k = int(g.Island)
			case gang.SameNUMA:
				k = int(g.NUMA)
			}
			if key >= 0 && k != key {
				t.Fatalf("%v group split over %d and %d", loc, key, k)
			}
			key = k
		}
	}
}
