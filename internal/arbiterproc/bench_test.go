//go:build bench

package arbiterproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
)

// garbage keeps the allocating goroutine's slices reachable for a moment.
var garbage [][]byte

// allocate stands for the monitor's own work (scrapes, reaping, containerd
// events): a goroutine of the supervisor's process allocating 256 KiB per
// millisecond, which makes the collector run a few times a second.
func allocate(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		garbage = append(garbage, make([]byte, 256<<10))
		if len(garbage) > 16 {
			garbage = garbage[:0]
		}
		time.Sleep(time.Millisecond)
	}
}

// probe takes the loop's longest gap between steps in each of windows
// windows of 100 ms.
func probe(take func() time.Duration, windows int) []time.Duration {
	take()
	out := make([]time.Duration, 0, windows)
	for range windows {
		time.Sleep(100 * time.Millisecond)
		out = append(out, take())
	}
	return out
}

func summarize(name string, gaps []time.Duration, gcs uint32) {
	var le2, gt10 int
	var worst time.Duration
	for _, g := range gaps {
		if g <= 2*time.Millisecond {
			le2++
		}
		if g > 10*time.Millisecond {
			gt10++
		}
		worst = max(worst, g)
	}
	n := float64(len(gaps))
	fmt.Printf("BENCH arbiter.loop_windows_le2ms_pct.%s %.0f %%\n", name, 100*float64(le2)/n)
	fmt.Printf("BENCH arbiter.loop_windows_gt10ms_pct.%s %.0f %%\n", name, 100*float64(gt10)/n)
	fmt.Printf("BENCH arbiter.loop_gap_max_ms.%s %.1f ms (%d windows of 100 ms; %d collections in the supervising process)\n",
		name, float64(worst.Microseconds())/1000, len(gaps), gcs)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// TestBenchLoopGaps probes the control loop alone (empty state directory,
// 1 ms tick, SCHED_FIFO 5 where allowed) while a goroutine of the monitor's
// process allocates: the loop on a raised thread of that process (the
// in-process mode) against the loop in a process of its own. Per 100 ms
// window, the longest gap between two steps; windows ≤ 2 ms and > 10 ms are
// counted.
func TestBenchLoopGaps(t *testing.T) {
	const windows = 100
	state := t.TempDir()
	p := arbiter.Policy{Quantum: 10 * time.Millisecond, IdleAfter: 5 * time.Millisecond, PriorityHold: 100 * time.Millisecond}
	t.Logf("load average %s", loadavg())

	measure := func(name string, take func() time.Duration) {
		ctx, cancel := context.WithCancel(context.Background())
		go allocate(ctx)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		gaps := probe(take, windows)
		runtime.ReadMemStats(&after)
		cancel()
		summarize(name, gaps, after.NumGC-before.NumGC)
	}

	a := &arbiter.Arbiter{StateDir: state, Policy: p, Tick: time.Millisecond, Rescan: 200 * time.Millisecond,
		RealtimePriority: 5, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	measure("in_process", a.TakeLongestGap)
	cancel()
	<-done

	s := &Supervisor{Config: testConfig(state, 5)}
	run(t, s)
	for s.Steps() < 10 {
		time.Sleep(time.Millisecond)
	}
	measure("process", s.TakeLongestGap)
	t.Logf("load average %s", loadavg())
}
