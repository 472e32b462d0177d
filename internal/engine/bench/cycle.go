// Package bench measures the scheduling engine's cycle: pods per second
// through pop, admission, fit, place or fail, and requeue, on a large
// cluster with a large pending queue.
package bench

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/placement/sim"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// CycleSetup describes one measurement.
type CycleSetup struct {
	Nodes   []partition.NodeSpec
	Pods    []placement.Request // shapes to draw pods from
	Pending int                 // pods waiting when the measurement starts
	Rounds  int                 // cycles over the whole queue
	// FreedPerRound running pods end before each round, so some pending
	// pods fit and the rest fail.
	FreedPerRound int
	Engine        engine.Config
	Seed          uint64
}

// CycleResult is what was measured.
type CycleResult struct {
	Attempts, Placed, Preempted int
	Elapsed                     time.Duration
	// CPU is the process's CPU time over the timed cycles (garbage
	// collection included): on a shared machine the wall time counts the
	// other jobs too, the CPU time only this one.
	CPU              time.Duration
	Running, Pending int
}

// PerSecond is pods attempted per second.
func (r CycleResult) PerSecond() float64 { return float64(r.Attempts) / r.Elapsed.Seconds() }

// PerCPUSecond is pods attempted per second of CPU time.
func (r CycleResult) PerCPUSecond() float64 { return float64(r.Attempts) / r.CPU.Seconds() }

// processCPU is the CPU time the process used so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CycleConfig is the cycle the throughput target names — pop, fit, place
// or fail, requeue — with ageing, backoff and bounded reservations on and
// preemption off; FullConfig adds preemption, bounded to 16 victim searches
// per cycle (a search plans on every node with evictable pods: tens of
// milliseconds on a full cluster of thousands of nodes), measured apart.
func CycleConfig() engine.Config {
	c := FullConfig()
	c.Preemption = false
	return c
}

// FullConfig is CycleConfig with preemption.
func FullConfig() engine.Config {
	return engine.Config{
		Queue:        queue.Config{Ageing: priority.Ageing{Step: 10 * time.Minute, Ceiling: priority.P1}, EscalateTo: priority.P1, BackoffInitial: time.Second, BackoffMax: 10 * time.Second},
		ReserveAfter: 5 * time.Minute, MaxReservations: 16,
		Preemption: true, PreemptionSearches: 16, Cooldown: 30 * time.Minute, RequeuePreempted: true,
	}
}

// RunCycle fills the cluster to capacity through the engine (untimed), then
// queues Pending more pods of random classes and times Rounds full cycles:
// before each, FreedPerRound random running pods end (untimed), then every
// pending pod is popped and tried once.
func RunCycle(s CycleSetup) (CycleResult, error) {
	c, err := placement.NewCluster(s.Nodes)
	if err != nil {
		return CycleResult{}, err
	}
	pol, err := placement.NewPolicy("tessera", c, placement.Options{Workload: placement.NewWorkload(c, s.Pods, 0.95)})
	if err != nil {
		return CycleResult{}, err
	}
	e, err := engine.New(s.Engine, placement.NewScheduler(c, pol, false), nil)
	if err != nil {
		return CycleResult{}, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0xbe4c))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var running []string
	n := 0
	submit := func(r placement.Request, class priority.Class) error {
		n++
		r.Name = fmt.Sprintf("pod-%d", n)
		return e.Submit(&engine.Pod{Key: r.Name, Request: r, Class: class, Submitted: now, Preemptible: class >= priority.P2, MinRun: 10 * time.Minute})
	}
	// Fill: the simulator's arrival order until the GPU requests reach capacity.
	for _, r := range sim.Arrivals(s.Pods, s.Seed, 1.0, c.GPUCapacityMilli()) {
		if err := submit(r, priority.Class(2+rng.IntN(2))); err != nil {
			return CycleResult{}, err
		}
	}
	e.Cycle(now)
	for _, ev := range e.Events() {
		if ev.Kind == engine.Placed {
			running = append(running, ev.Pod.Key)
		}
	}
	for _, key := range pendingKeys(e) {
		e.Delete(key)
	}
	for i := 0; i < s.Pending; i++ {
		if err := submit(s.Pods[rng.IntN(len(s.Pods))], priority.Class(rng.IntN(priority.NumClasses))); err != nil {
			return CycleResult{}, err
		}
	}
	now = now.Add(time.Hour) // past every minimum run time
	var res CycleResult
	for round := 0; round < s.Rounds; round++ {
		for k := 0; k < s.FreedPerRound && len(running) > 0; k++ {
			j := rng.IntN(len(running))
			if err := e.Complete(running[j]); err != nil {
				return res, err
			}
			running[j] = running[len(running)-1]
			running = running[:len(running)-1]
		}
		now = now.Add(10 * time.Second) // every backoff has ended
		t, cpu := time.Now(), processCPU()
		res.Attempts += e.Cycle(now)
		res.Elapsed += time.Since(t)
		res.CPU += processCPU() - cpu
		for _, ev := range e.Events() {
			switch ev.Kind {
			case engine.Placed:
				res.Placed++
				running = append(running, ev.Pod.Key)
			case engine.Preempted:
				res.Preempted++
				running = remove(running, ev.Pod.Key)
			}
		}
	}
	res.Running, res.Pending = e.RunningCount(), e.Pending()
	return res, nil
}

func pendingKeys(e *engine.Engine) []string {
	var out []string
	e.EachPending(func(p *engine.Pod) { out = append(out, p.Key) })
	return out
}

func remove(keys []string, k string) []string {
	for i, x := range keys {
		if x == k {
			keys[i] = keys[len(keys)-1]
			return keys[:len(keys)-1]
		}
	}
	return keys
}
