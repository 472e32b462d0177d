package dynsim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// syntheticJobs: pods asking for whole or half GPUs, arriving faster than the
// cluster serves them on reserved memory alone.
func syntheticJobs(n int, seed uint64) []Job {
	r := rand.New(rand.NewPCG(seed, 1))
	var jobs []Job
	for i := range n {
		milli := []int32{250, 500, 1000}[r.IntN(3)]
		jobs = append(jobs, Job{Name: "p" + string(rune('a'+i%26)) + string(rune('0'+i/26%10)), Class: priority.Class(r.IntN(4)),
			Arrive: time.Duration(i) * 90 * time.Second, Run: time.Duration(30+r.IntN(90)) * time.Minute,
			Request: placement.Request{NumGPU: 1, GPUMilli: milli}})
	}
	return jobs
}

func TestBalloonComparisonKeepsTheRules(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n0", GPUs: 4, GPUMemMiB: 40960}, {Name: "n1", GPUs: 4, GPUMemMiB: 81920}}
	jobs := syntheticJobs(400, 3)
	cfg := DefaultBalloonConfig()
	cfg.ComputeBound = false // the lending mechanics: memory-only, so that borrowers exist
	r, err := CompareBalloons(nodes, jobs, time.Hour, 10*time.Hour, 12*time.Hour, cfg)
	if err != nil {
		t.Fatal(err)
	}
	off, on := r[0], r[1]
	t.Logf("off %+v", off)
	t.Logf("on  %+v", on)
	if off.PromiseBreaches != 0 || on.PromiseBreaches != 0 {
		t.Fatalf("a GPU was promised beyond its memory: off %d, on %d", off.PromiseBreaches, on.PromiseBreaches)
	}
	if off.Borrowers != 0 || off.OwnerWaits != 0 || off.OwnerAllocs != 0 || off.Evictions != 0 {
		t.Fatalf("balloons off borrowed or waited: %+v", off)
	}
	if on.Borrowers == 0 || on.OwnerAllocs == 0 {
		t.Fatalf("balloons on never lent: %+v", on)
	}
	if on.Arrived != off.Arrived || off.Arrived != len(jobs) {
		t.Fatalf("arrivals differ: %d vs %d of %d", off.Arrived, on.Arrived, len(jobs))
	}
	if on.CompletedAll < on.Completed || off.CompletedAll < off.Completed {
		t.Fatalf("completions: by the horizon %d, in all %d (off: %d of %d)", on.Completed, on.CompletedAll, off.CompletedAll, len(jobs))
	}
	again, _ := CompareBalloons(nodes, jobs, time.Hour, 10*time.Hour, 12*time.Hour, cfg)
	if again != r {
		t.Fatal("the same seed gave different results")
	}
	// A grace period past the wait bound turns owner waits into OOMs.
	cfg.Grace = 10 * time.Second
	slow, _ := CompareBalloons(nodes, jobs, time.Hour, 10*time.Hour, 12*time.Hour, cfg)
	if slow[1].OwnerWaits > 0 && slow[1].OwnerOOMs == 0 {
		t.Errorf("borrowers taking 10 s to leave, a 3 s bound, and no owner OOM: %+v", slow[1])
	}
}

func TestUsageDistributionMean(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var sum float64
	const n = 20000
	for range n {
		sum += betaDraw(r, 6, 4)
	}
	if m := sum / n; m < 0.58 || m > 0.62 {
		t.Errorf("Beta(6, 4) mean %.3f, want 0.6", m)
	}
}

// TestBalloonMemoryAccounting: the time-averaged shares add up. Used and idle
// (reserved, unused) memory together are at most the GPUs' memory; balloons off
// lend nothing; balloons on lend, and what settled owners could still lend is
// part of the idle memory (a floor is never below the usage).
func TestBalloonMemoryAccounting(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n0", GPUs: 4, GPUMemMiB: 40960}, {Name: "n1", GPUs: 4, GPUMemMiB: 81920}}
	cfg := DefaultBalloonConfig()
	cfg.ComputeBound = false // memory-only, so that something is lent
	r, err := CompareBalloons(nodes, syntheticJobs(400, 3), time.Hour, 10*time.Hour, 12*time.Hour, cfg)
	if err != nil {
		t.Fatal(err)
	}
	off, on := r[0], r[1]
	for _, x := range r {
		if x.MemUsedShare+x.MemIdleShare > 1.0001 || x.MemIdleShare <= 0 {
			t.Fatalf("balloons %v: used %.3f + idle %.3f of the memory", x.Balloons, x.MemUsedShare, x.MemIdleShare)
		}
	}
	if off.MemLendableShare != 0 || off.MemLentShare != 0 {
		t.Fatalf("balloons off: lendable %.3f, lent %.3f", off.MemLendableShare, off.MemLentShare)
	}
	if on.MemLentShare <= 0 || on.MemLentShare >= 1 || on.MemLendableShare > on.MemIdleShare {
		t.Fatalf("balloons on: lendable %.3f, lent %.3f, idle %.3f", on.MemLendableShare, on.MemLentShare, on.MemIdleShare)
	}
}

// TestComputeBoundBalloons: memory is asked in proportion to compute, so the
// compute bound changes nothing without borrowing (balloons off gives the same
// result); the memory-only model places borrowers beyond their GPU's compute,
// the compute-bound one never, and lends to fewer of them.
func TestComputeBoundBalloons(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n0", GPUs: 4, GPUMemMiB: 40960}, {Name: "n1", GPUs: 4, GPUMemMiB: 81920}}
	jobs := syntheticJobs(400, 3)
	cfg := DefaultBalloonConfig()
	if !cfg.ComputeBound {
		t.Fatal("the default model must place borrowers as the engine does: compute-bound")
	}
	cfg.ComputeBound = false
	free, err := CompareBalloons(nodes, jobs, time.Hour, 10*time.Hour, 12*time.Hour, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ComputeBound = true
	bound, err := CompareBalloons(nodes, jobs, time.Hour, 10*time.Hour, 12*time.Hour, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory only: %+v", free[1])
	t.Logf("compute-bound: %+v", bound[1])
	if free[0] != bound[0] {
		t.Fatalf("balloons off differ with the compute bound:\n%+v\n%+v", free[0], bound[0])
	}
	if free[0].ComputeOvercommits != 0 {
		t.Fatalf("balloons off overcommitted compute %d times", free[0].ComputeOvercommits)
	}
	if free[1].BorrowersOverCompute == 0 || free[1].BorrowersOverCompute > free[1].Borrowers || free[1].ComputeOvercommits < free[1].BorrowersOverCompute {
		t.Fatalf("memory-only: %d of %d borrowers (%d placements) beyond compute", free[1].BorrowersOverCompute, free[1].Borrowers, free[1].ComputeOvercommits)
	}
	if bound[1].ComputeOvercommits != 0 || bound[1].BorrowersOverCompute != 0 || bound[1].PromiseBreaches != 0 {
		t.Fatalf("compute-bound: %d compute overcommits, %d promise breaches", bound[1].ComputeOvercommits, bound[1].PromiseBreaches)
	}
	if bound[1].Borrowers >= free[1].Borrowers {
		t.Fatalf("compute-bound lent to %d borrowers, memory-only to %d", bound[1].Borrowers, free[1].Borrowers)
	}
}

const GiB uint64 = 1 << 30

// TestInflateNeverLowersACapBelowZero: the owner lending most comes first; when
// what the GPU lacks exceeds its whole cap, it goes to its floor and the next
// owner lends the rest (the cap once wrapped below zero to 16 EiB, which made
// the GPU look full for good and the time averages absurd).
func TestInflateNeverLowersACapBelowZero(t *testing.T) {
	s := &balloonSim{cfg: DefaultBalloonConfig(), on: true, now: time.Hour}
	g := &simGPU{physical: 14 * GiB}
	job := &Job{Name: "owner", Class: priority.P1}
	small := &simPod{job: job, owner: true, cap: 4 * GiB, usage: GiB / 2}        // floor 1 GiB: lends 3
	large := &simPod{job: job, owner: true, cap: 10 * GiB, usage: 71 * GiB / 10} // floor 8.1 GiB: lends 1.9
	for _, o := range []*simPod{small, large} {
		o.gpus = []*simGPU{g}
		g.pods = append(g.pods, o)
		g.promise += o.cap
	}
	need := 45 * GiB / 10
	s.inflate(g, need, priorityOf(&Job{Class: priority.P2}))
	if small.cap != GiB || small.ceiling != 4*GiB {
		t.Fatalf("small owner at %d MiB under %d MiB, want its 1 GiB floor under 4 GiB", small.cap>>20, small.ceiling>>20)
	}
	if large.cap != 10*GiB-(need-3*GiB) || large.ceiling != 10*GiB {
		t.Fatalf("large owner at %d MiB under %d MiB, want it lowered by the 1.5 GiB still missing", large.cap>>20, large.ceiling>>20)
	}
	if g.promise != small.cap+large.cap || g.room() != need {
		t.Fatalf("promised %d MiB, room %d MiB, want room for %d MiB", g.promise>>20, g.room()>>20, need>>20)
	}
}
