package arbiter

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// Arbiter runs the policy over a state directory: every Tick it reads each
// core allocation's measured GPU time and demand, steps one Scheduler per
// GPU, and writes every tenant's grant and the heartbeat into its
// core-limits file.
type Arbiter struct {
	StateDir string
	Policy   Policy
	// Tick is how often the regions are read and grants written.
	Tick time.Duration
	// HandOverPoll is how soon the loop steps again while a hand-over
	// waits for the previous holder's work to drain (0: Tick/10; at most
	// Tick), backing off to half a tick as the drain goes on (handOverWait).
	// The GPU idles from that work's end until a step sees it ended and
	// gives the next holder its go: at every tick, about half a tick per
	// hand-over on average, and there are 40-100 hand-overs a second.
	HandOverPoll time.Duration
	// Rescan is how often the state directory is listed for new and removed
	// allocations (the files of known ones stay mapped between).
	Rescan time.Duration
	Log    *slog.Logger
	// RealtimePriority > 0 runs the loop on an OS thread of its own under
	// SCHED_FIFO at this priority (1..99), or at nice -10 where that is
	// refused; 0 runs it as an ordinary goroutine.
	RealtimePriority int
	// Raised: whoever runs the loop has raised every thread already (the
	// arbiter's own process, internal/arbiterproc, which has a P to spare):
	// with RealtimePriority the loop still runs on a locked thread of its
	// own, neither raises nor logs its scheduling again, and sleeps in a
	// raw system call (sleepUntil).
	Raised bool
	// Active says whether this node agent may write grants now (it holds the
	// node lease); nil: always. A standby leaves the hooks on their static
	// shares until it takes over.
	Active func() bool

	// Stats: where the loop reports its steps (nil: a private one). The
	// arbiter's own process points it into memory its supervisor reads.
	Stats *Stats

	own     Stats
	mu      sync.Mutex
	files   map[string]*tenantFiles
	gpus    map[string]*gpuStep
	scanned time.Time
	present map[string]bool // scan's scratch
}

// Stats is what a running loop reports about itself: plain words, so that
// they may live in memory shared with another process.
type Stats struct {
	// LongestGap: the longest time between two steps since TakeLongestGap
	// last read it (ns): how late the OS let the loop run.
	LongestGap atomic.Int64
	LastStep   atomic.Uint64 // CLOCK_MONOTONIC of the last step
	Steps      atomic.Uint64 // steps taken
}

// TakeLongestGap returns the longest time between two steps since the last
// call (a tick's worth when the loop runs on time), and starts over.
func (s *Stats) TakeLongestGap() time.Duration { return time.Duration(s.LongestGap.Swap(0)) }

// observe records a step at mono.
func (s *Stats) observe(mono uint64) {
	if prev := s.LastStep.Swap(mono); prev != 0 && mono > prev {
		gap := int64(mono - prev)
		for cur := s.LongestGap.Load(); gap > cur && !s.LongestGap.CompareAndSwap(cur, gap); cur = s.LongestGap.Load() {
		}
	}
	s.Steps.Add(1)
}

// gpuStep is one GPU's scheduler and the scratch of a step over it, kept
// between steps so that a step in steady state allocates nothing (the
// arbiter's process runs without the garbage collector).
type gpuStep struct {
	sched   *Scheduler
	tenants []Tenant
	dev     []int              // tenants[i]'s device index in its files
	last    map[string]Verdict // tenant key → latest verdict
}

type tenantFiles struct {
	entry  statedir.Entry
	limits *region.Limits
	region *region.Region
	devs   []region.DeviceLimit // DevicesInto's buffer
	comp   [region.MaxDevices]region.Compute
	bad    bool // logged once
}

func (a *Arbiter) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// Monotonic is CLOCK_MONOTONIC in nanoseconds, the hooks' clock.
func Monotonic() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// Run steps until ctx ends, then closes the files.
func (a *Arbiter) Run(ctx context.Context) {
	defer a.Close()
	if a.RealtimePriority > 0 {
		a.runRealtime(ctx)
		return
	}
	a.loop(ctx)
}

// handOverFastSteps: how many steps of one hand-over come HandOverPoll
// apart before the wait doubles (handOverWait).
const handOverFastSteps = 8

// handOverWait is how long the loop sleeps before step n (from 0) of one
// hand-over: poll for the first handOverFastSteps (short kernels' work
// drains within them, about a millisecond), then twice, four times as long
// for as many steps each, and so on up to half a tick. A 10 ms kernel's drain
// is then stepped ~30 times instead of 100: every wake-up of the real-time
// loop costs the node CPU (measured 25-33 % of a core while draining
// without end at a fixed 100 us, 7.5-8.5 % at ticks only), and the GPU's
// idle time after a long drain still falls from about half a tick to at
// most a quarter.
func handOverWait(poll, tick time.Duration, n int) time.Duration {
	w := poll << min(n/handOverFastSteps, 16)
	return min(w, max(tick/2, poll))
}

// handOverPoll is HandOverPoll, Tick/10 when unset, at most Tick.
func (a *Arbiter) handOverPoll() time.Duration {
	switch {
	case a.HandOverPoll <= 0:
		return a.Tick / 10
	case a.HandOverPoll > a.Tick:
		return a.Tick
	}
	return a.HandOverPoll
}

// Close unmaps every file.
func (a *Arbiter) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, f := range a.files {
		f.close()
		delete(a.files, k)
	}
}

func (f *tenantFiles) close() {
	if f.limits != nil {
		f.limits.Close()
	}
	if f.region != nil {
		f.region.Close()
	}
}

func (a *Arbiter) stats() *Stats {
	if a.Stats != nil {
		return a.Stats
	}
	return &a.own
}

// Step runs one control step at now (mono on CLOCK_MONOTONIC) and reports
// whether a hand-over on some GPU waits for the previous holder's work to
// drain (then the loop steps again sooner than a tick: handOverWait). Between rescans it
// allocates nothing once the tenants are known.
func (a *Arbiter) Step(now time.Time, mono uint64) (handingOver bool) {
	a.stats().observe(mono)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files == nil {
		a.files, a.gpus, a.present = map[string]*tenantFiles{}, map[string]*gpuStep{}, map[string]bool{}
	}
	if a.scanned.IsZero() || now.Sub(a.scanned) >= a.Rescan {
		a.scan()
		a.scanned = now
	}
	for _, g := range a.gpus {
		g.tenants, g.dev = g.tenants[:0], g.dev[:0]
	}
	for key, f := range a.files {
		if f.limits == nil || f.region == nil || !a.read(key, f) {
			continue
		}
		for i, d := range f.devs {
			if d.CoreLimitPct == 0 || d.CoreLimitPct >= 100 {
				continue // not managed by the hook
			}
			g := a.gpus[d.UUID]
			if g == nil {
				g = &gpuStep{sched: &Scheduler{Policy: a.Policy}, last: map[string]Verdict{}}
				a.gpus[d.UUID] = g
			}
			c := &f.comp[i]
			g.tenants = append(g.tenants, Tenant{Key: key, Share: float64(d.CoreLimitPct) / 100,
				Hard: d.Policy == region.PolicyHard, Priority: int(d.Priority), BusyNs: c.BusyNs, DemandNs: c.DemandNs, Inflight: c.Inflight})
			g.dev = append(g.dev, i)
		}
	}
	for uuid, g := range a.gpus {
		if len(g.tenants) == 0 {
			delete(a.gpus, uuid) // its scheduler's memory goes with it
			continue
		}
		a.stepGPU(now, mono, g)
		handingOver = handingOver || g.sched.HandingOver()
	}
	return handingOver
}

// read loads f's devices and measurements; false: the file went bad and was
// dropped (the next scan retries).
func (a *Arbiter) read(key string, f *tenantFiles) bool {
	err := region.Guard(f.entry.Dir, func() {
		f.devs = f.limits.DevicesInto(f.devs)
		for i := range f.devs {
			f.comp[i] = f.region.Compute(i)
		}
	})
	if err != nil {
		// A file truncated under us.
		a.log().Warn("compute arbiter: allocation unreadable", "key", key, "err", err)
		f.close()
		delete(a.files, key)
		return false
	}
	return true
}

// stepGPU steps one GPU's scheduler and writes its grants.
func (a *Arbiter) stepGPU(now time.Time, mono uint64, g *gpuStep) {
	clear(g.last)
	s := g.sched
	for i, v := range s.Step(now, mono, g.tenants) {
		f := a.files[v.Key]
		f.limits.SetGrant(g.dev[i], region.Grant{Unpaced: v.Go, Solo: v.Solo, Until: v.Until}, mono)
		g.last[v.Key] = v
	}
	for i := range g.tenants {
		t := &g.tenants[i]
		if t.Inflight > 0 && s.IdleLong(t.Key, now) {
			f, dev, seen := a.files[t.Key], g.dev[i], t.Inflight
			_ = region.Guard(f.entry.Dir, func() { f.region.ClearInflight(dev, seen, mono) }) // unreadable: dropped at the next step
		}
	}
}

// scan opens the files of new core allocations and closes those removed.
func (a *Arbiter) scan() {
	entries, err := statedir.List(a.StateDir)
	if err != nil {
		a.log().Warn("compute arbiter: state directory unreadable", "err", err)
		return
	}
	present := a.present
	clear(present)
	for _, e := range entries {
		if e.Kind != "core" {
			continue
		}
		present[e.Key] = true
		if f, ok := a.files[e.Key]; ok && f.limits != nil && f.region != nil {
			continue
		}
		f := &tenantFiles{entry: e}
		if f.limits, err = region.OpenLimits(e.CoreLimits()); err == nil {
			f.region, err = region.OpenRegion(e.CoreRegion())
		}
		if err != nil {
			// Being created, or from a plugin before compute time slices
			// (no core region): its hook falls back to the static share.
			f.close()
			continue
		}
		a.files[e.Key] = f
	}
	for k, f := range a.files {
		if !present[k] {
			f.close()
			delete(a.files, k)
		}
	}
}

// TakeLongestGap returns the longest time between two steps since the last
// call (a tick's worth when the loop runs on time), and starts over.
func (a *Arbiter) TakeLongestGap() time.Duration { return a.stats().TakeLongestGap() }

// Verdict is the latest decision for allocation key on GPU uuid.
func (a *Arbiter) Verdict(key, uuid string) (Verdict, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.gpus[uuid]
	if g == nil {
		return Verdict{}, false
	}
	v, ok := g.last[key]
	return v, ok
}
