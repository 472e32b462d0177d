package dynsim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A small hand-checked run: one 1-GPU job runs 30 min of a 1 h horizon on
// a 2-GPU node (mean allocation 25 %), and a job the engine refuses (a
// 2-GPU request of half GPUs) must be reported, not vanish.
func TestSimulateSmallRunIsAccounted(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n1", Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: 2, GPUMemMiB: 40960}}
	jobs := []Job{
		{Name: "ok", Class: priority.P1, Team: "team-0", Arrive: 0, Run: 30 * time.Minute,
			Request: placement.Request{Name: "ok", CPUMilli: 1000, MemMiB: 1024, NumGPU: 1, GPUMilli: 1000}},
		{Name: "bad", Class: priority.P3, Team: "team-0", Arrive: time.Minute, Run: time.Minute,
			Request: placement.Request{Name: "bad", CPUMilli: 1000, MemMiB: 1024, NumGPU: 2, GPUMilli: 500}},
	}
	mode, err := Modes("fifo", priority.Ageing{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Simulate(nodes, jobs, time.Hour, Config{Mode: mode, Tick: 10 * time.Second, Drain: time.Hour, Policy: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.AllocPct-25) > 0.01 {
		t.Errorf("mean allocation %.3f %%, want 25 %%", r.AllocPct)
	}
	if got := r.Rejected(); got != 1 {
		t.Errorf("rejected %d, want 1", got)
	}
	var table, bench bytes.Buffer
	WriteTable(&table, []*Result{r})
	WriteBench(&bench, r)
	if !strings.Contains(table.String(), "rejected 1") {
		t.Errorf("the table does not report the refused job:\n%s", table.String())
	}
	if !strings.Contains(bench.String(), "BENCH sched.dynamic.fifo.rejected 1 pods") {
		t.Errorf("no rejected BENCH line:\n%s", bench.String())
	}
}

// A pod evicted and requeued waits again: that second wait counts in its
// class's statistics (its wait is all the time it spent pending). A P3 job
// starts at once, is evicted after 20 min by a P1 job that runs 30 min,
// and restarts when that ends: it waited 30 min in all.
func TestPreemptedPodsSecondWaitCounts(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n1", Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: 1, GPUMemMiB: 40960}}
	req := func(name string) placement.Request {
		return placement.Request{Name: name, CPUMilli: 1000, MemMiB: 1024, NumGPU: 1, GPUMilli: 1000}
	}
	jobs := []Job{
		{Name: "exp", Class: priority.P3, Team: "team-0", Arrive: 0, Run: time.Hour, Request: req("exp")},
		{Name: "infer", Class: priority.P1, Team: "team-0", Arrive: 20 * time.Minute, Run: 30 * time.Minute, Request: req("infer")},
	}
	mode, err := Modes("priority_noaging", priority.Ageing{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Simulate(nodes, jobs, 2*time.Hour, Config{Mode: mode, Tick: 10 * time.Second, Drain: 2 * time.Hour, Policy: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Preemptions(); got != 1 {
		t.Fatalf("preemptions %d, want 1", got)
	}
	p3 := r.Classes[priority.P3]
	if len(p3.waits) != 1 || p3.Max != 30*time.Minute || p3.P99 != 30*time.Minute {
		t.Errorf("P3: %d waits, p99 %v, max %v; want one wait of 30m0s", len(p3.waits), p3.P99, p3.Max)
	}
	if p1 := r.Classes[priority.P1]; p1.Max != 0 {
		t.Errorf("P1 max wait %v, want 0", p1.Max)
	}
}

// A pod evicted and still pending when the run ends counts its first wait
// plus the current one.
func TestEvictedPodStillPendingCountsAllItsWaiting(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n1", Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: 1, GPUMemMiB: 40960}}
	req := func(name string) placement.Request {
		return placement.Request{Name: name, CPUMilli: 1000, MemMiB: 1024, NumGPU: 1, GPUMilli: 1000}
	}
	jobs := []Job{
		{Name: "exp", Class: priority.P3, Team: "team-0", Arrive: 0, Run: time.Hour, Request: req("exp")},
		{Name: "infer", Class: priority.P1, Team: "team-0", Arrive: 20 * time.Minute, Run: 10 * time.Hour, Request: req("infer")},
	}
	mode, err := Modes("priority_noaging", priority.Ageing{})
	if err != nil {
		t.Fatal(err)
	}
	// Arrivals end at 20 min; the drain stops the run 1 h later.
	r, err := Simulate(nodes, jobs, 30*time.Minute, Config{Mode: mode, Tick: 10 * time.Second, Drain: time.Hour, Policy: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	p3 := r.Classes[priority.P3]
	if p3.waiting != 1 || len(p3.waits) != 1 {
		t.Fatalf("P3: %d waiting, %d waits; want the evicted pod pending with one entry", p3.waiting, len(p3.waits))
	}
	// Evicted at 20 min; the last cycle is at 30 min + 1 h of drain (the
	// clock stops one tick after it).
	if lo, hi := 70*time.Minute, 70*time.Minute+10*time.Second; p3.Max < lo || p3.Max > hi {
		t.Errorf("P3 max wait %v, want %v..%v", p3.Max, lo, hi)
	}
}

// The pod log has one row per reported pod that started, with its own
// wait (not a sorted statistic): the P3 job of the eviction scenario
// started at 0, was evicted once by a P1 pod and waited 30 min in all
// (requeued 20 min after its submission, past the 10 min reservation
// threshold, it held a reservation meanwhile); the P1 job started at 20 min
// without waiting.
func TestPodLogRecordsEachPodsWaitAndEvictions(t *testing.T) {
	nodes := []partition.NodeSpec{{Name: "n1", Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: 1, GPUMemMiB: 40960}}
	req := func(name string) placement.Request {
		return placement.Request{Name: name, CPUMilli: 1000, MemMiB: 1024, NumGPU: 1, GPUMilli: 1000}
	}
	jobs := []Job{
		{Name: "exp", Class: priority.P3, Team: "team-0", Arrive: 0, Run: time.Hour, Request: req("exp")},
		{Name: "infer", Class: priority.P1, Team: "team-0", Arrive: 20 * time.Minute, Run: 30 * time.Minute, Request: req("infer")},
	}
	mode, err := Modes("priority_noaging", priority.Ageing{})
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if _, err := Simulate(nodes, jobs, 2*time.Hour, Config{Mode: mode, Tick: 10 * time.Second, Drain: 2 * time.Hour, Policy: "binpack", PodLog: &log}); err != nil {
		t.Fatal(err)
	}
	want := podLogHeader +
		"priority_noaging,exp,P3,1,1000,3600,0.000,0,1800.000,1,0,1,0,0,true\n" +
		"priority_noaging,infer,P1,1,1000,1800,1200.000,1200,0.000,0,0,0,0,0,false\n"
	if log.String() != want {
		t.Errorf("pod log:\n%s\nwant:\n%s", log.String(), want)
	}
}
