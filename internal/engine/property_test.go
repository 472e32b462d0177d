package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

func smallCluster() []partition.NodeSpec {
	var out []partition.NodeSpec
	for i := 0; i < 6; i++ {
		out = append(out, partition.NodeSpec{Name: fmt.Sprint("n", i), Model: []string{"A100", "T4"}[i%2],
			CPU: 32000, MemMiB: 1 << 18, GPUs: 2 + 2*(i%2), GPUMemMiB: 16384, Islands: 2})
	}
	return out
}

func randomPod(rng *rand.Rand, key string, now time.Time) *Pod {
	p := &Pod{Key: key, Class: priority.Class(rng.IntN(4)), Submitted: now, Preemptible: rng.IntN(4) > 0,
		MinRun: time.Duration(rng.IntN(3)) * time.Minute, Team: fmt.Sprint("t", rng.IntN(2))}
	p.Request = placement.Request{Name: key, CPUMilli: int64(1+rng.IntN(8)) * 1000, MemMiB: 1024}
	switch rng.IntN(4) {
	case 0:
		p.Request.NumGPU, p.Request.GPUMilli = 1+rng.IntN(4), 1000
	case 1:
		p.Request.NumGPU, p.Request.GPUMilli, p.Request.GPUMemMiB = 1, int32(100*(1+rng.IntN(9))), int32(1024*rng.IntN(8))
	case 2:
		p.Request.NumGPU, p.Request.GPUMilli, p.Request.Models = 1, 1000, []string{"T4"}
	}
	if rng.IntN(10) == 0 {
		p.Deadline = now.Add(time.Duration(rng.IntN(600)) * time.Second)
	}
	return p
}

// checkBooks adds every grant the engine holds per node and GPU and
// compares with the nodes: nothing oversubscribed, nothing lost.
func checkBooks(t *testing.T, e *Engine, step int) {
	t.Helper()
	type held struct {
		cpu, mem int64
		milli    []int64
		memGPU   []int64
	}
	per := make([]held, len(e.cluster.Nodes))
	for i, n := range e.cluster.Nodes {
		per[i] = held{milli: make([]int64, len(n.GPUs)), memGPU: make([]int64, len(n.GPUs))}
	}
	for _, d := range e.HeldGrants() {
		h := &per[d.Node]
		h.cpu += d.Grant.CPU
		h.mem += d.Grant.MemMiB
		for _, s := range d.Grant.Shares {
			h.milli[s.GPU] += int64(s.Milli)
			h.memGPU[s.GPU] += int64(s.MemMiB)
		}
	}
	for i, n := range e.cluster.Nodes {
		h := per[i]
		if h.cpu != n.CPU-n.FreeCPU || h.mem != n.MemMiB-n.FreeMemMiB || h.cpu > n.CPU {
			t.Fatalf("step %d node %s: grants hold %dm CPU / %d MiB, node says %dm / %d MiB used", step, n.Name, h.cpu, h.mem, n.CPU-n.FreeCPU, n.MemMiB-n.FreeMemMiB)
		}
		for g := range n.GPUs {
			if h.milli[g] > partition.MilliPerGPU || h.memGPU[g] > int64(n.GPUs[g].MemMiB) {
				t.Fatalf("step %d node %s GPU %d oversubscribed: %d milli, %d MiB", step, n.Name, g, h.milli[g], h.memGPU[g])
			}
			if h.milli[g] != int64(partition.MilliPerGPU-n.GPUs[g].FreeMilli) {
				t.Fatalf("step %d node %s GPU %d: grants hold %d milli, node says %d", step, n.Name, g, h.milli[g], partition.MilliPerGPU-n.GPUs[g].FreeMilli)
			}
		}
	}
}

// No random sequence of arrivals, completions, deletions and cycles (with
// preemption, reservations, ageing, deadlines) oversubscribes a GPU, loses
// a grant, or preempts against the rules.
func TestPropertyNoOversubscriptionNoRuleBroken(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{Queue: queue.Config{Ageing: priority.Ageing{Step: time.Minute, Ceiling: priority.P1}, EscalateTo: priority.P0, BackoffMax: 5 * time.Second, BackoffInitial: time.Second},
			ReserveAfter: 30 * time.Second, MaxReservations: 2, Preemption: true, Cooldown: 2 * time.Minute, RequeuePreempted: rng.IntN(2) == 0}
		e := newEngine(t, cfg, smallCluster()...)
		now := t0
		var running []string
		n := 0
		for step := 0; step < 600; step++ {
			switch op := rng.IntN(10); {
			case op < 4:
				n++
				_ = e.Submit(randomPod(rng, fmt.Sprint("p", n), now))
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
			}
			for _, ev := range e.Events() {
				switch ev.Kind {
				case Placed:
					running = append(running, ev.Pod.Key)
				case Preempted:
					v, by := ev.Pod, ev.By
					if !v.Preemptible || !by.Class.Above(v.Class) {
						t.Fatalf("seed %d: %s (%v, preemptible %v) evicted for %s (%v)", seed, v.Key, v.Class, v.Preemptible, by.Key, by.Class)
					}
					if ev.Ran < v.MinRun {
						t.Fatalf("seed %d: %s evicted after %v, inside its minimum run time %v", seed, v.Key, ev.Ran, v.MinRun)
					}
				}
			}
			checkBooks(t, e, step)
		}
	}
}

// A long randomised simulation: bursts of arrivals of every class above
// capacity, among them pods too big for most nodes; with ageing and
// reservations every pod starts, and none waits beyond a bound, while
// without them some pod is still waiting when the same run ends (the test
// can fail).
func TestNoPodWaitsForever(t *testing.T) {
	type outcome struct {
		maxWait   time.Duration
		unstarted int
	}
	run := func(seed uint64, full bool) outcome {
		rng := rand.New(rand.NewPCG(seed, 11))
		cfg := Config{Queue: queue.Config{EscalateTo: priority.P0}, Preemption: true, Cooldown: 10 * time.Minute, RequeuePreempted: true}
		if full {
			cfg.Queue.Ageing = priority.Ageing{Step: 5 * time.Minute, Ceiling: priority.P1}
			cfg.ReserveAfter, cfg.MaxReservations = 5*time.Minute, 2
		}
		e := newEngine(t, cfg, smallCluster()...)
		ends := map[string]time.Time{}
		arrived := map[string]time.Time{}
		started := map[string]bool{}
		now := t0
		n := 0
		var maxWait time.Duration
		for tick := 0; tick < 8*360; tick++ { // 8 h of 10 s ticks
			now = now.Add(10 * time.Second)
			if tick < 4*360 { // 4 h of arrivals, then 4 h to drain
				for k := rng.IntN(12) - 8; k > 0; k-- { // bursts of 1-3 pods, one per 20 s on average: above capacity
					n++
					p := randomPod(rng, fmt.Sprint("p", n), now)
					p.Deadline, p.MinRun = time.Time{}, time.Minute
					if p.Class == priority.P1 && rng.IntN(3) > 0 {
						p.Class = priority.P3 // lots of low-priority work
					}
					if e.Submit(p) == nil {
						arrived[p.Key] = now
					}
				}
			}
			for k, end := range ends {
				if !end.After(now) {
					if err := e.Complete(k); err != nil {
						t.Fatal(err)
					}
					delete(ends, k)
				}
			}
			e.Cycle(now)
			for _, ev := range e.Events() {
				switch ev.Kind {
				case Placed:
					ends[ev.Pod.Key] = now.Add(time.Duration(2+rng.IntN(10)) * time.Minute)
					if !started[ev.Pod.Key] {
						started[ev.Pod.Key] = true
						maxWait = max(maxWait, now.Sub(arrived[ev.Pod.Key]))
					}
				case Preempted:
					delete(ends, ev.Pod.Key)
				}
			}
		}
		o := outcome{maxWait: maxWait}
		e.EachPending(func(p *Pod) {
			if !started[p.Key] {
				o.unstarted++
				o.maxWait = max(o.maxWait, now.Sub(arrived[p.Key]))
			}
		})
		return o
	}
	starvedWithout := 0
	for seed := uint64(1); seed <= 3; seed++ {
		full := run(seed, true)
		if full.unstarted > 0 || full.maxWait > 4*time.Hour {
			t.Errorf("seed %d with ageing and reservations: %d pods never started, longest wait %v", seed, full.unstarted, full.maxWait)
		}
		bare := run(seed, false)
		if bare.unstarted > 0 || bare.maxWait > full.maxWait {
			starvedWithout++
		}
		t.Logf("seed %d: longest wait %v with ageing and reservations, %v (%d never started) without", seed, full.maxWait, bare.maxWait, bare.unstarted)
	}
	if starvedWithout == 0 {
		t.Error("without ageing and reservations no pod waited longer: the workload does not test starvation")
	}
}
