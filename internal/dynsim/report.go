package dynsim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// ClassStats is what one class saw.
type ClassStats struct {
	arrived, completed, preempted, dropped, escalated, waiting int
	gpuHoursLost                                               float64
	waits, droppedWaits                                        []time.Duration
	// Still pending at the end: their wait so far counts in Max.
	stillWaiting []time.Duration
	// A pod's wait is all the time it spent pending: arrival to first start
	// plus, after each eviction, eviction to restart.
	P50, P99 time.Duration // over pods that started
	Max      time.Duration // over every pod: started, dropped or still waiting
}

// Result is one simulation's outcome.
type Result struct {
	Mode             string
	capacityGPUs     float64
	warmup, horizon  time.Duration
	gpuSecondsAlloc  float64
	Classes          [priority.NumClasses]*ClassStats
	rejected         int
	minRunViolations int
	// AllocPct is the mean share of GPU capacity allocated over the
	// arrival horizon.
	AllocPct float64
	// Unfinished pods were still pending or running when the drain ended.
	Unfinished int
}

func newResult(mode string, capacityMilli int64, warmup, horizon time.Duration) *Result {
	r := &Result{Mode: mode, capacityGPUs: float64(capacityMilli) / 1000, warmup: min(warmup, horizon), horizon: horizon}
	for i := range r.Classes {
		r.Classes[i] = &ClassStats{}
	}
	return r
}

func (r *Result) class(c priority.Class) *ClassStats { return r.Classes[c] }

// MinRunViolations counts pods preempted inside their minimum run time: it
// must be 0.
func (r *Result) MinRunViolations() int { return r.minRunViolations }

// Rejected counts jobs the engine refused at submission (a request it
// cannot take): they never queued, so no class statistic holds them.
func (r *Result) Rejected() int { return r.rejected }

// Preemptions is the number of evictions, all classes.
func (r *Result) Preemptions() int {
	n := 0
	for _, c := range r.Classes {
		n += c.preempted
	}
	return n
}

func (r *Result) finish(s *state, horizon time.Duration) {
	if span := (r.horizon - r.warmup).Seconds(); span > 0 {
		r.AllocPct = 100 * r.gpuSecondsAlloc / (r.capacityGPUs * span)
	}
	s.eng.EachPending(func(p *engine.Pod) {
		j := s.byKey[p.Key]
		if !s.reported(j) {
			return
		}
		cs := r.class(j.Class)
		cs.waiting++
		w, started := s.pendingWait(j, cs)
		if started { // evicted and not restarted: its entry grows
			cs.waits[s.waitAt[j.Name]] = w
			return
		}
		cs.stillWaiting = append(cs.stillWaiting, w)
	})
	r.Unfinished = s.eng.Pending() + len(s.running)
	for _, c := range r.Classes {
		slices.Sort(c.waits)
		c.P50, c.P99 = quantile(c.waits, 0.50), quantile(c.waits, 0.99)
		c.Max = 0
		for _, set := range [][]time.Duration{c.waits, c.droppedWaits, c.stillWaiting} {
			for _, w := range set {
				c.Max = max(c.Max, w)
			}
		}
	}
}

// quantile of sorted values (nearest rank: the ⌈q·n⌉-th); 0 for none. The
// small tolerance keeps a product like 0.99·100 that lands a hair above an
// integer on that integer.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WriteTable prints one block per result.
func WriteTable(w io.Writer, results []*Result) {
	for _, r := range results {
		fmt.Fprintf(w, "mode %s: mean GPU allocation %.2f %%, preemptions %d, unfinished %d, rejected %d, preempted inside min run time %d\n",
			r.Mode, r.AllocPct, r.Preemptions(), r.Unfinished, r.rejected, r.minRunViolations)
		fmt.Fprintf(w, "  %-5s %8s %8s %10s %10s %10s %9s %9s %8s %8s\n", "class", "arrived", "started", "wait p50", "wait p99", "wait max", "preempt", "GPU-h lost", "dropped", "waiting")
		for i, c := range r.Classes {
			fmt.Fprintf(w, "  %-5s %8d %8d %10s %10s %10s %9d %9.1f %8d %8d\n", priority.Class(i), c.arrived, len(c.waits),
				dur(c.P50), dur(c.P99), dur(c.Max), c.preempted, c.gpuHoursLost, c.dropped, c.waiting)
		}
	}
}

func dur(d time.Duration) string { return d.Round(time.Second).String() }

// WriteBench prints the BENCH lines of one result.
func WriteBench(w io.Writer, r *Result) {
	p := "sched.dynamic." + r.Mode + "."
	for i, c := range r.Classes {
		k := fmt.Sprintf("p%d", i)
		fmt.Fprintf(w, "BENCH %s%s_wait_p50_s %.0f s\n", p, k, c.P50.Seconds())
		fmt.Fprintf(w, "BENCH %s%s_wait_p99_s %.0f s\n", p, k, c.P99.Seconds())
		fmt.Fprintf(w, "BENCH %s%s_wait_max_s %.0f s\n", p, k, c.Max.Seconds())
		fmt.Fprintf(w, "BENCH %s%s_preemptions %d pods\n", p, k, c.preempted)
		fmt.Fprintf(w, "BENCH %s%s_gpu_hours_lost %.1f GPU-h\n", p, k, c.gpuHoursLost)
		fmt.Fprintf(w, "BENCH %s%s_dropped %d pods\n", p, k, c.dropped)
	}
	fmt.Fprintf(w, "BENCH %sgpu_alloc_mean_pct %.2f pct\n", p, r.AllocPct)
	fmt.Fprintf(w, "BENCH %spreemptions %d pods\n", p, r.Preemptions())
	fmt.Fprintf(w, "BENCH %smin_run_violations %d pods\n", p, r.minRunViolations)
	fmt.Fprintf(w, "BENCH %sunfinished %d pods\n", p, r.Unfinished)
	fmt.Fprintf(w, "BENCH %srejected %d pods\n", p, r.rejected)
}
