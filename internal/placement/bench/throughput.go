// Package bench measures the placement engine: decision throughput and
// latency on a large synthetic cluster, the memory its state takes, and
// placement quality on the openb traces against the published results.
package bench

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/placement/sim"
)

// Synthetic describes a generated cluster: Nodes identical-shape machines
// with GPUs each, of Models models in equal parts.
type Synthetic struct {
	Nodes, GPUs, Models int
	CPU, MemMiB         int64
}

// Specs lists the synthetic cluster's nodes.
func (s Synthetic) Specs() []partition.NodeSpec {
	out := make([]partition.NodeSpec, s.Nodes)
	for i := range out {
		out[i] = partition.NodeSpec{
			Name: fmt.Sprintf("node-%05d", i), Model: fmt.Sprintf("M%d", i%max(1, s.Models)),
			CPU: s.CPU, MemMiB: s.MemMiB, GPUs: s.GPUs, GPUMemMiB: 81920, Islands: 2, NUMANodes: 2,
		}
	}
	return out
}

// Throughput is what one throughput run measured.
type Throughput struct {
	Policy        string
	Decisions     int
	Placed        int
	Elapsed       time.Duration
	P50, P99, Max time.Duration
	StateBytes    uint64 // heap held by cluster + scheduler after the run
	Shapes        int    // request shapes the score index holds
	UnallocPct    float64
}

// PerSecond is decisions per second.
func (t Throughput) PerSecond() float64 { return float64(t.Decisions) / t.Elapsed.Seconds() }

// Unconstrained returns the pods without their GPU model constraints, for
// clusters whose models have other names (the synthetic one).
func Unconstrained(pods []placement.Request) []placement.Request {
	out := slices.Clone(pods)
	for i := range out {
		out[i].Models = nil
	}
	return out
}

// RunThroughput places pods drawn from reqs onto the cluster of specs, in
// the simulator's arrival order, until their GPU requests reach fill ×
// capacity, timing every decision (schedule and reserve). At most limit
// decisions are made (0: no limit), so that the scanning baseline finishes.
func RunThroughput(specs []partition.NodeSpec, reqs []placement.Request, policy string, scan bool, fill float64, seed uint64, limit int) (Throughput, error) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	cluster, err := placement.NewCluster(specs)
	if err != nil {
		return Throughput{}, err
	}
	w := placement.NewWorkload(cluster, reqs, 0.95)
	pol, err := placement.NewPolicy(policy, cluster, placement.Options{Workload: w, Seed: seed})
	if err != nil {
		return Throughput{}, err
	}
	sched := placement.NewScheduler(cluster, pol, scan)
	arrivals := untilFull(sim.Arrivals(reqs, seed, fill, cluster.GPUCapacityMilli()), fill, cluster.GPUCapacityMilli())
	if limit > 0 && len(arrivals) > limit {
		arrivals = arrivals[:limit]
	}

	lat := make([]time.Duration, 0, len(arrivals))
	res := Throughput{Policy: policy}
	var allocated int64
	start := time.Now()
	for i := range arrivals {
		t0 := time.Now()
		_, err := sched.Place(&arrivals[i])
		lat = append(lat, time.Since(t0))
		if err == nil {
			res.Placed++
			allocated += int64(arrivals[i].NumGPU) * int64(arrivals[i].GPUMilli)
		}
	}
	res.Elapsed = time.Since(start)
	res.Decisions = len(arrivals)
	res.UnallocPct = 100 - 100*float64(allocated)/float64(cluster.GPUCapacityMilli())

	slices.Sort(lat)
	res.P50, res.P99, res.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	lat, arrivals = nil, nil

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc {
		res.StateBytes = after.HeapAlloc - before.HeapAlloc
	}
	res.Shapes = sched.IndexedShapes()
	runtime.KeepAlive(sched)
	runtime.KeepAlive(specs) // part of the baseline, not of the engine
	runtime.KeepAlive(reqs)
	return res, nil
}

// CompareIndexScan places the same arrivals with the score index and with a
// full scan, in lockstep on two copies of the cluster, and counts the
// decisions that differ (node or GPUs). The index is exact by construction;
// this is the check that it is.
func CompareIndexScan(specs []partition.NodeSpec, pods []placement.Request, policy string, seed uint64, tune float64, limit int) (compared, differ int, err error) {
	var scheds [2]*placement.Scheduler
	var arrivals []placement.Request
	for k, scan := range []bool{false, true} {
		c, err := placement.NewCluster(specs)
		if err != nil {
			return 0, 0, err
		}
		w := placement.NewWorkload(c, pods, 0.95)
		p, err := placement.NewPolicy(policy, c, placement.Options{Workload: w, Seed: seed})
		if err != nil {
			return 0, 0, err
		}
		scheds[k] = placement.NewScheduler(c, p, scan)
		arrivals = sim.Arrivals(pods, seed, tune, c.GPUCapacityMilli())
	}
	if limit > 0 && len(arrivals) > limit {
		arrivals = arrivals[:limit]
	}
	for i := range arrivals {
		a, errA := scheds[0].Place(&arrivals[i])
		b, errB := scheds[1].Place(&arrivals[i])
		compared++
		if (errA == nil) != (errB == nil) || (errA == nil && !sameDecision(a, b)) {
			differ++
		}
	}
	return compared, differ, nil
}

func sameDecision(a, b placement.Decision) bool {
	return a.Node == b.Node && slices.Equal(a.Grant.Shares, b.Grant.Shares)
}

// untilFull cuts the arrivals where their GPU requests would pass fill ×
// capacity (a trace larger than the cluster is not inflated, only cut).
func untilFull(pods []placement.Request, fill float64, capacityMilli int64) []placement.Request {
	limit := int64(fill * float64(capacityMilli))
	var total int64
	for i := range pods {
		total += int64(pods[i].NumGPU) * int64(pods[i].GPUMilli)
		if total > limit {
			return pods[:i]
		}
	}
	return pods
}
