package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
	"github.com/tessera-gpu/tessera/internal/quota"
)

// reclaimable reports whether running pod r may be evicted to give pod p's
// queue its guarantee at now: r is of another queue of p's cohort that
// borrows (quota.Books.Borrowing), preemptible, past its minimum run time
// and not evicted within the cooldown (the preemption rules).
func reclaimable(e *Engine, b *quota.Books, p *Pod, r *Running, now time.Time) bool {
	cohort := b.CohortOf(p.Team)
	return r.Pod.Preemptible && b.QueueOf(r.Pod.Team) != b.QueueOf(p.Team) && b.CohortOf(r.Pod.Team) == cohort &&
		b.Borrowing(r.Pod.Key) && now.Sub(r.Started) >= r.Pod.MinRun &&
		(r.Pod.preemptedAt.IsZero() || now.Sub(r.Pod.preemptedAt) >= e.cfg.Cooldown)
}

// guaranteeViolated says whether pending pod p is denied its queue's
// guarantee at now, and where: p's queue is quota-managed and p fits
// within its nominal quota (Books.WithinGuarantee: its usage plus p's is
// at most nominal on every limited resource), p fits on no node as the
// node is, but on some node it would fit if the pods there that borrow
// from p's cohort for other queues, and that preemption may take, were
// gone. Those borrowers hold capacity that p's guarantee entitles it to.
func guaranteeViolated(e *Engine, b *quota.Books, p *Pod, now time.Time) (string, bool) {
	if b.QueueOf(p.Team) == quota.Unmanaged || !b.WithinGuarantee(p.Team, usageBefore(p)) {
		return "", false
	}
	if _, ok := e.sched.Find(&p.Request); ok {
		return "", false // free capacity: the next cycle places it, no reclaim needed
	}
	for i := range e.cluster.Nodes {
		node := e.cluster.Nodes[i]
		node.GPUs = append(node.GPUs[:0:0], node.GPUs...)
		var held []string
		for _, r := range e.onNode[i] {
			if reclaimable(e, b, p, r, now) {
				if err := node.Release(r.Decision.Grant); err != nil {
					panic(err)
				}
				held = append(held, r.Pod.Key)
			}
		}
		if len(held) > 0 && e.cluster.FitsState(i, &node, &p.Request) {
			return fmt.Sprintf("node %s, borrowers %v", node.Name, held), true
		}
	}
	return "", false
}

// The engine with quotas: no random sequence of arrivals, completions,
// deletions and cycles (several queues in a cohort, one with a lending
// limit and a fair weight, one without a cohort, unmanaged pods;
// preemption, deadlines, evicted pods requeued or not) oversubscribes a
// GPU, evicts against the rules, or leaves a guarantee violated for longer
// than a cycle.
//
// "A guarantee violated" (guaranteeViolated): a pending pod p of a
// quota-managed queue Q fits within Q's nominal quota, fits on no node as
// the nodes are, and would fit on some node if the pods there of other
// queues of Q's cohort that borrow, and that preemption may take
// (preemptible, past their minimum run time and cooldown), were gone.
//
// "Longer than a cycle": it is checked after every operation. A violation
// may appear after any of them (a completion leaves room that borrowers
// hold the rest of), and also inside a cycle after p was tried: a pod
// tried later (a borrower, tried after the guarantees; a pod evicting
// others) can make a queue borrow again, so the end of the cycle shows a
// violation the engine could not see when it tried p. The next whole
// cycle tries p in that state (no backoff, no bound on victim searches)
// and must end it: a pod still denied after two whole cycles since it was
// first seen denied fails the test. Ageing and reservations are off: they
// let a less urgent pod go first or hold capacity, on purpose
// (TestPropertyNoOversubscriptionNoRuleBroken covers them without quotas).
// With reclaim disabled in planPreemption the test fails.
func TestPropertyQuotaGuaranteesHold(t *testing.T) {
	sc := schedv1.Default()
	sc.Queues = []schedv1.QueueConfig{
		{Name: "a", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 5000}},
		{Name: "b", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 3000}, FairWeight: 2},
		{Name: "c", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 2000}, LendingLimit: &schedv1.Resources{GPUMilli: 1000}},
		{Name: "solo", Nominal: schedv1.Resources{GPUMilli: 2000}},
	}
	teams := []string{"a", "b", "c", "solo", ""}
	violations, reclaims := 0, 0
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 13))
		books, err := quota.New(sc)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := placement.NewCluster(smallCluster())
		pol, _ := placement.NewPolicy("binpack", c, placement.Options{})
		cfg := Config{Queue: queue.Config{EscalateTo: priority.P0}, Preemption: true, Cooldown: 2 * time.Minute, RequeuePreempted: rng.IntN(2) == 0}
		e, err := New(cfg, placement.NewScheduler(c, pol, false), &QuotaAdmission{Books: books, Cluster: c})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		var running []string
		firstSeen := map[string]int{} // violating pod → cycles run when first seen
		cycles, n := 0, 0
		for step := 0; step < 600; step++ {
			switch op := rng.IntN(10); {
			case op < 4:
				n++
				p := randomPod(rng, fmt.Sprint("p", n), now)
				p.Team = teams[rng.IntN(len(teams))]
				_ = e.Submit(p)
			case op < 6 && len(running) > 0:
				j := rng.IntN(len(running))
				if _, ok := e.Running(running[j]); ok {
					if err := e.Complete(running[j]); err != nil {
						t.Fatal(err)
					}
				}
				running = append(running[:j], running[j+1:]...)
			case op == 6:
				e.Delete(fmt.Sprint("p", 1+rng.IntN(n+1)))
			default:
				now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				e.Cycle(now)
				cycles++
			}
			for _, ev := range e.Events() {
				switch ev.Kind {
				case Placed:
					running = append(running, ev.Pod.Key)
				case Preempted:
					v, by := ev.Pod, ev.By
					lower := by.Class.Above(v.Class)
					reclaim := books.QueueOf(v.Team) != books.QueueOf(by.Team) && books.QueueOf(v.Team) != quota.Unmanaged &&
						books.CohortOf(v.Team) == books.CohortOf(by.Team) && books.CohortOf(v.Team) != ""
					if !v.Preemptible || (!lower && !reclaim) {
						t.Fatalf("seed %d step %d: %s (%v, queue %q, preemptible %v) evicted for %s (%v, queue %q): neither a lower class nor a reclaim in the cohort",
							seed, step, v.Key, v.Class, v.Team, v.Preemptible, by.Key, by.Class, by.Team)
					}
					if ev.Ran < v.MinRun {
						t.Fatalf("seed %d: %s evicted after %v, inside its minimum run time %v", seed, v.Key, ev.Ran, v.MinRun)
					}
					if !lower {
						reclaims++
					}
				}
			}
			checkBooks(t, e, step)
			seen := map[string]bool{}
			e.EachPending(func(p *Pod) {
				where, bad := guaranteeViolated(e, books, p, now)
				if !bad {
					return
				}
				seen[p.Key] = true
				violations++
				if first, ok := firstSeen[p.Key]; !ok {
					firstSeen[p.Key] = cycles
				} else if cycles >= first+2 {
					st, _ := books.Status(books.QueueOf(p.Team))
					t.Fatalf("seed %d step %d: pod %s of queue %s (%v, within its guarantee: usage %v of nominal %v) still denied after two whole cycles since it was first seen denied: %s could make room",
						seed, step, p.Key, p.Team, p.Class, st.Usage, st.Nominal, where)
				}
			})
			for k := range firstSeen {
				if !seen[k] {
					delete(firstSeen, k)
				}
			}
		}
	}
	// The workload must exercise the property: guarantees were denied for
	// a while and the engine reclaimed.
	if violations == 0 || reclaims == 0 {
		t.Errorf("%d transient violations, %d reclaims over all seeds: the workload does not test guarantees", violations, reclaims)
	}
	t.Logf("%d transient violations, %d reclaim evictions", violations, reclaims)
}
