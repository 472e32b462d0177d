package arbiter

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// tenantSpec is one core allocation of a test state directory: its share on
// each GPU it spans.
type tenantSpec struct {
	name   string
	gpus   []string
	pct    uint32
	hard   bool
	prio   int32
	writer *regiontest.Compute
}

// writeStateDir lays the tenants' files out as the device plugin does.
func writeStateDir(t *testing.T, ts []*tenantSpec) string {
	t.Helper()
	state := t.TempDir()
	for _, ts := range ts {
		e := statedir.Entry{Key: "core-" + ts.name, Kind: "core", Dir: filepath.Join(statedir.Containers(state), "core-"+ts.name)}
		if err := os.MkdirAll(e.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		pol := uint64(region.PolicyGuaranteed)
		if ts.hard {
			pol = region.PolicyHard
		}
		var devs []region.DeviceLimit
		for _, g := range ts.gpus {
			devs = append(devs, region.DeviceLimit{UUID: g, CoreLimitPct: ts.pct, Policy: pol, Priority: ts.prio})
		}
		if err := region.WriteLimits(e.CoreLimits(), devs); err != nil {
			t.Fatal(err)
		}
		if err := region.CreateRegion(e.CoreRegion()); err != nil {
			t.Fatal(err)
		}
		w, err := regiontest.MapCompute(e.CoreRegion())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ts.writer = w
	}
	return state
}

// TestStepAllocatesNothing: between rescans a step over several tenants on
// two GPUs, whose hooks keep reporting GPU time and demand (turns change
// hands, deadlines are given, a tenant goes idle and comes back), allocates
// nothing: the arbiter's own process runs without the garbage collector.
func TestStepAllocatesNothing(t *testing.T) {
	const gpuA, gpuB = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"
	ts := []*tenantSpec{
		{name: "a1", gpus: []string{gpuA}, pct: 30, prio: 2},
		{name: "a2", gpus: []string{gpuA}, pct: 50, hard: true, prio: 2},
		{name: "a0", gpus: []string{gpuA}, pct: 20, prio: 0},
		{name: "b1", gpus: []string{gpuB}, pct: 25, prio: 1},
		{name: "ab", gpus: []string{gpuA, gpuB}, pct: 40, prio: 2}, // one container on both GPUs
	}
	a := &Arbiter{StateDir: writeStateDir(t, ts), Tick: time.Millisecond, Rescan: time.Hour, Policy: testPolicy()}
	defer a.Close()
	a.Policy.TurnGrace = 2 * time.Millisecond
	now, mono := time.Now(), Monotonic()
	busy := make([]uint64, len(ts))
	step := 0
	tick := func() {
		step++
		now, mono = now.Add(time.Millisecond), mono+uint64(time.Millisecond)
		for i, tn := range ts {
			if tn.name == "a0" && step%200 >= 10 {
				continue // a P0 tenant in bursts, idle past the hold between
			}
			busy[i] += uint64(300 * time.Microsecond)
			for d := range tn.gpus {
				tn.writer.Set(d, busy[i], mono, 1)
			}
		}
		a.Step(now, mono)
	}
	for range 300 { // the files are mapped, the maps and slices have grown
		tick()
	}
	if len(a.gpus) != 2 {
		t.Fatalf("%d GPUs arbitrated, want 2", len(a.gpus))
	}
	handovers, holder := 0, a.gpus[gpuA].sched.Holder()
	allocs := testing.AllocsPerRun(1000, func() {
		tick()
		if h := a.gpus[gpuA].sched.Holder(); h != holder {
			handovers, holder = handovers+1, h
		}
	})
	if allocs != 0 {
		t.Errorf("Step allocates %v times per call in steady state, want 0", allocs)
	}
	if handovers < 10 {
		t.Errorf("the turn changed hands %d times in 1000 steps: the steps measured did not exercise the policy", handovers)
	}
	for _, key := range []string{"core-a1", "core-ab"} {
		if _, ok := a.Verdict(key, gpuA); !ok {
			t.Errorf("no verdict for %s on GPU A", key)
		}
	}
	if _, ok := a.Verdict("core-ab", gpuB); !ok {
		t.Errorf("no verdict for core-ab on GPU B")
	}
}

// TestRescanAllocatesLittle: listing the state directory is what the
// arbiter's process allocates (every Rescan, 200 ms in the monitor); with the
// collector off it collects once that reaches its memory limit. Five known
// tenants: a few KiB per listing, so a 32 MiB limit is hours of rescans.
func TestRescanAllocatesLittle(t *testing.T) {
	ts := []*tenantSpec{
		{name: "a", gpus: []string{"GPU-a"}, pct: 30}, {name: "b", gpus: []string{"GPU-a"}, pct: 70},
		{name: "c", gpus: []string{"GPU-b"}, pct: 30}, {name: "d", gpus: []string{"GPU-b"}, pct: 20},
		{name: "e", gpus: []string{"GPU-a", "GPU-b"}, pct: 50},
	}
	a := &Arbiter{StateDir: writeStateDir(t, ts), Tick: time.Millisecond, Rescan: time.Millisecond, Policy: testPolicy()}
	defer a.Close()
	now := time.Now()
	a.Step(now, Monotonic())
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			now = now.Add(time.Millisecond) // every step rescans
			a.Step(now, Monotonic())
		}
	})
	perScan := res.AllocedBytesPerOp()
	t.Logf("a step that rescans: %d bytes, %d allocations (%v)", perScan, res.AllocsPerOp(), time.Duration(res.NsPerOp()))
	if perScan > 64<<10 {
		t.Errorf("a rescan of five tenants allocates %d bytes, want a few KiB", perScan)
	}
}
