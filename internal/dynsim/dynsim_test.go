package dynsim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement/sim"
	"github.com/tessera-gpu/tessera/internal/placement/trace"
	"github.com/tessera-gpu/tessera/internal/priority"
)

const shipped = "../placement/testdata/openb/"

func load(t testing.TB) (nodes []trace.Node, pods []trace.Pod) {
	nodes, err := trace.ReadNodesFile(shipped + "openb_node_list_gpu_node.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, err = trace.ReadPodsFile(shipped + "openb_pod_list_default.csv")
	if err != nil {
		t.Fatal(err)
	}
	return nodes, pods
}

func TestClassAndRunTimeRules(t *testing.T) {
	for _, c := range []struct {
		qos  string
		p0   bool
		want priority.Class
	}{{"LS", false, priority.P1}, {"LS", true, priority.P0}, {"Burstable", true, priority.P2}, {"Guaranteed", false, priority.P2}, {"BE", true, priority.P3}} {
		if got, err := ClassOfQoS(c.qos, c.p0); err != nil || got != c.want {
			t.Errorf("%s (p0 %v) = %v, %v; want %v", c.qos, c.p0, got, err, c.want)
		}
	}
	if _, err := ClassOfQoS("ls", false); err == nil || !strings.Contains(err.Error(), `"ls"`) {
		t.Errorf("unknown qos: %v", err)
	}
	for _, c := range []struct {
		p    trace.Pod
		want time.Duration
	}{
		{trace.Pod{Creation: 10, Scheduled: 20, Deletion: 120}, 100 * time.Second},
		{trace.Pod{Creation: 10, Scheduled: -1, Deletion: 70}, 60 * time.Second}, // never ran: wanted for 60 s
		{trace.Pod{Creation: 10, Scheduled: 10, Deletion: 10}, time.Second},      // at least 1 s
		{trace.Pod{Creation: 0, Scheduled: 0, Deletion: 1 << 30}, time.Hour},     // capped
	} {
		if got, err := RunTime(&c.p, time.Hour); err != nil || got != c.want {
			t.Errorf("%+v: %v, %v; want %v", c.p, got, err, c.want)
		}
	}
	if _, err := RunTime(&trace.Pod{Name: "x", Creation: 50, Scheduled: -1, Deletion: 10}, time.Hour); err == nil || !strings.Contains(err.Error(), "pod x") {
		t.Errorf("deletion before creation: %v", err)
	}
}

// The compression makes the offered load what was asked: arrivals' GPU
// work per unit of time over capacity.
func TestWorkloadOfferedLoad(t *testing.T) {
	nodes, pods := load(t)
	var capacity int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * 1000
	}
	cfg := WorkloadConfig{Load: 1.5, Horizon: 4 * time.Hour, MaxRun: 6 * time.Hour, P0Share: 0.02, Teams: 4, Seed: 42}
	jobs, info, err := BuildWorkload(pods, capacity, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var work float64
	var p0, ls int
	for _, j := range jobs {
		work += j.GPUs() * j.Run.Seconds()
		if j.Class == priority.P0 {
			p0++
		}
		if j.Class <= priority.P1 {
			ls++
		}
	}
	offered := work / cfg.Horizon.Seconds() / (float64(capacity) / 1000)
	if math.Abs(offered-1.5) > 0.1 {
		t.Errorf("offered load %.3f, want about 1.5 (%+v)", offered, info)
	}
	if share := float64(p0) / float64(ls); share < 0.015 || share > 0.025 {
		t.Errorf("P0 share of LS %.4f, want about 0.02", share)
	}
	for i := 1; i < len(jobs); i++ {
		if jobs[i].Arrive < jobs[i-1].Arrive || jobs[i].Arrive >= cfg.Horizon {
			t.Fatalf("arrivals out of order or past the horizon at %d", i)
		}
	}
	bad := append([]trace.Pod(nil), pods[:3]...)
	bad[1].QoS = "Gold"
	if _, _, err := BuildWorkload(bad, capacity, cfg); err == nil || !strings.Contains(err.Error(), bad[1].Name) {
		t.Errorf("bad qos: %v", err)
	}
}

// A short contended run of every mode: the assertions of make test. The
// targets themselves are measured by make bench at the default length.
func TestDynamicShort(t *testing.T) {
	nodes, pods := load(t)
	o := DefaultOptions()
	o.Workload.Horizon, o.Warmup, o.Drain = time.Hour, 20*time.Minute, 6*time.Hour
	res, _, err := Compare(sim.FromTrace(nodes, nil).Nodes, pods, o)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]*Result{}
	for _, r := range res {
		by[r.Mode] = r
		if r.MinRunViolations() != 0 || r.Unfinished != 0 || r.AllocPct <= 0 || r.AllocPct > 100 {
			t.Errorf("%s: %d preempted inside the minimum run time, %d unfinished, allocation %.2f %%", r.Mode, r.MinRunViolations(), r.Unfinished, r.AllocPct)
		}
	}
	fifo, full := by["fifo"], by["full"]
	if fifo.Preemptions() != 0 {
		t.Errorf("fifo preempted %d pods", fifo.Preemptions())
	}
	for _, c := range []priority.Class{priority.P0, priority.P1} {
		if full.Classes[c].P99 > fifo.Classes[c].P99 {
			t.Errorf("%v p99 wait: full %v, fifo %v", c, full.Classes[c].P99, fifo.Classes[c].P99)
		}
	}
}
