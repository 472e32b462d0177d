package computetest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/region"
)

// latencies parses a burst tenant's "lat_us=a,b,..." (the first burst, made
// before the tenant's queue and the arbiter settled, is left out).
func latencies(t *testing.T, done string) []float64 {
	_, list, ok := strings.Cut(done, "lat_us=")
	if !ok || list == "" {
		t.Fatalf("no latencies in %q", done)
	}
	var out []float64
	for i, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("latency %q: %v", f, err)
		}
		if i > 0 {
			out = append(out, v)
		}
	}
	return out
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func median(v []float64) float64 {
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	return c[len(c)/2]
}

// TestPriority: a P0 tenant issuing 2 ms of GPU work every 20 ms beside a
// saturating P2 tenant. P0's burst latency against P0 alone, how long P2
// takes to be stopped once P0 starts, and P2's share once P0 is idle again.
func TestPriority(t *testing.T) { measureUnstarved(t, func() error { return priorityRun(t) }) }

func priorityRun(t *testing.T) error {
	secs := "1.5"
	if benchMode() {
		secs = "4"
	}
	burst := "burst=2000/20"
	// P0 alone.
	n := newNode(t)
	n.startArbiter(defaultPolicy())
	alone := latencies(t, n.start(n.container("p0", 50, false, 0), "kernel", "500", secs, burst).wait(t))

	// P0 beside P2.
	n = newNode(t)
	pol := defaultPolicy()
	n.startArbiter(pol)
	// Both containers exist before P0's process starts (as after Allocate),
	// so the arbiter knows P0 and only its first launch is news.
	p0c := n.container("p0", 50, false, 0)
	p2c := n.container("p2", 50, false, 2)
	p2 := n.start(p2c, "kernel", "1000", "30")
	time.Sleep(300 * time.Millisecond)
	p0 := n.start(p0c, "kernel", "500", secs, burst)
	// From P0's first launch (its hook's first demand stamp) to the grant
	// that stops P2, as P2's hook reads it.
	reg, err := region.OpenRegion(p0c.entry.CoreRegion())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	start := time.Now()
	react := time.Duration(-1)
	var first uint64
	for time.Since(start) < time.Second {
		if d := reg.Compute(0).DemandNs; first == 0 && d != 0 {
			first = d
		}
		// P2 alone holds the GPU until P0 comes: the grant that stops it
		// is P0's priority at work.
		if first != 0 && p2c.stopped() {
			react = time.Duration(arbiter.Monotonic() - first)
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	beside := latencies(t, p0.wait(t))
	ratio := mean(beside) / mean(alone)
	fmt.Printf("BENCH hook.p0_latency_ratio %.2f x\n", ratio)
	fmt.Printf("BENCH hook.p0_latency_ratio_median %.2f x\n", median(beside)/median(alone))
	fmt.Printf("BENCH hook.priority_react_ms %.2f ms\n", float64(react.Microseconds())/1000)
	t.Logf("P0 burst latency alone mean %.0f µs median %.0f; beside P2 mean %.0f median %.0f; P2 stopped %v after P0 started",
		mean(alone), median(alone), mean(beside), median(beside), react)
	if react < 0 || react > 50*time.Millisecond { // target 10 ms; loose for a loaded machine
		return fmt.Errorf("P2 stopped %v after P0 started, want ≤ 10 ms", react)
	}
	if ratio > 1.6 { // target 1.2; time slicing alone gives about 2
		return fmt.Errorf("P0 latency ratio %.2f, want ≤ 1.2", ratio)
	}
	// P0 is gone: after the hold, P2 has the GPU again.
	time.Sleep(pol.PriorityHold + 50*time.Millisecond)
	u, _ := n.utilization(time.Second, [][]int{{p2.pid}})
	fmt.Printf("BENCH hook.p2_busy_after_p0_pct %.1f %%\n", 100*u)
	if u < 0.75 { // target 0.90
		return fmt.Errorf("P2 kept the GPU %.0f%% busy once P0 idled, want ≥ 90", 100*u)
	}
	return nil
}

// A P2 tenant with long kernels (10 ms) that had the GPU alone (SOLO: a
// deeper queue) when P0 starts: what it queued still runs beside P0, so it
// must be bounded like long kernels are beside others (docs/hook.md: "≤ 2
// kernels"), not 8 bursts (80 ms) deep.
func TestPriorityAfterSoloWithLongKernels(t *testing.T) {
	measureUnstarved(t, func() error {
		n := newNode(t)
		n.startArbiter(defaultPolicy())
		p0c := n.container("p0", 50, false, 0)
		p2 := n.start(n.container("p2", 50, false, 2), "kernel", "10000", "30")
		time.Sleep(400 * time.Millisecond) // alone for more than soloAfter
		reg, err := region.OpenRegion(p0c.entry.CoreRegion())
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		rec := n.record(2 * time.Millisecond)
		p0 := n.start(p0c, "kernel", "500", "0.5", "burst=2000/20")
		var first uint64
		for deadline := time.Now().Add(time.Second); first == 0 && time.Now().Before(deadline); {
			first = reg.Compute(0).DemandNs
			time.Sleep(100 * time.Microsecond)
		}
		p0.wait(t)
		samples := rec.finish()
		if first == 0 {
			return fmt.Errorf("P0 never launched")
		}
		// P2's GPU time from 40 ms after P0's first launch (reaction and two
		// long kernels, time-sliced with P0) to 140 ms after.
		at := func(ns uint64) (sample, bool) {
			for _, s := range samples {
				if s.at >= ns {
					return s, true
				}
			}
			return sample{}, false
		}
		a, ok1 := at(first + uint64(40*time.Millisecond))
		b, ok2 := at(first + uint64(140*time.Millisecond))
		if !ok1 || !ok2 || b.at <= a.at {
			return fmt.Errorf("no samples around P0's start")
		}
		ran := time.Duration(b.byPID[p2.pid] - a.byPID[p2.pid])
		z, _ := at(first)
		t.Logf("P2 ran %v in the 40 ms after P0 started, %v of the %v after", time.Duration(a.byPID[p2.pid]-z.byPID[p2.pid]), ran, time.Duration(b.at-a.at))
		if ran > 20*time.Millisecond {
			return fmt.Errorf("P2 (10 ms kernels, alone before) ran %v between 40 and 140 ms after P0 started, want ≤ 20 ms", ran)
		}
		return nil
	})
}
