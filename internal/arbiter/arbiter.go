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
	// Rescan is how often the state directory is listed for new and removed
	// allocations (the files of known ones stay mapped between).
	Rescan time.Duration
	Log    *slog.Logger
	// RealtimePriority > 0 runs the loop on an OS thread of its own under
	// SCHED_FIFO at this priority (1..99), or at nice -10 where that is
	// refused; 0 runs it as an ordinary goroutine.
	RealtimePriority int
	// Active says whether this node agent may write grants now (it holds the
	// node lease); nil: always. A standby leaves the hooks on their static
	// shares until it takes over.
	Active func() bool

	// longestGap: the longest time between two steps since TakeLongestGap
	// last read it (ns): how late the OS let the loop run.
	longestGap atomic.Int64
	lastStep   atomic.Uint64 // CLOCK_MONOTONIC of the last step

	mu      sync.Mutex
	files   map[string]*tenantFiles
	gpus    map[string]*Scheduler
	scanned time.Time
	last    map[string]Verdict // key/uuid → latest verdict
}

type tenantFiles struct {
	entry  statedir.Entry
	limits *region.Limits
	region *region.Region
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
	if a.RealtimePriority > 0 {
		defer a.Close()
		a.runRealtime(ctx)
		return
	}
	t := time.NewTicker(a.Tick)
	defer t.Stop()
	defer a.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if a.Active == nil || a.Active() {
				a.Step(time.Now(), Monotonic())
			}
		}
	}
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

// Step runs one control step at now (mono on CLOCK_MONOTONIC).
func (a *Arbiter) Step(now time.Time, mono uint64) {
	if prev := a.lastStep.Swap(mono); prev != 0 && mono > prev {
		gap := int64(mono - prev)
		for cur := a.longestGap.Load(); gap > cur && !a.longestGap.CompareAndSwap(cur, gap); cur = a.longestGap.Load() {
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files == nil {
		a.files, a.gpus, a.last = map[string]*tenantFiles{}, map[string]*Scheduler{}, map[string]Verdict{}
	}
	if a.scanned.IsZero() || now.Sub(a.scanned) >= a.Rescan {
		a.scan()
		a.scanned = now
	}
	byGPU := map[string][]Tenant{}
	where := map[string]map[string]int{} // gpu → key → device index
	for key, f := range a.files {
		if f.limits == nil || f.region == nil {
			continue
		}
		var devs []region.DeviceLimit
		var comp [region.MaxDevices]region.Compute
		err := region.Guard(f.entry.Dir, func() {
			devs = f.limits.Devices()
			for i := range devs {
				comp[i] = f.region.Compute(i)
			}
		})
		if err != nil {
			// A file truncated under us: drop it, the next scan retries.
			a.log().Warn("compute arbiter: allocation unreadable", "key", key, "err", err)
			f.close()
			delete(a.files, key)
			continue
		}
		for i, d := range devs {
			if d.CoreLimitPct == 0 || d.CoreLimitPct >= 100 {
				continue // not managed by the hook
			}
			byGPU[d.UUID] = append(byGPU[d.UUID], Tenant{Key: key, Share: float64(d.CoreLimitPct) / 100,
				Hard: d.Policy == region.PolicyHard, Priority: int(d.Priority), BusyNs: comp[i].BusyNs, DemandNs: comp[i].DemandNs, Inflight: comp[i].Inflight})
			if where[d.UUID] == nil {
				where[d.UUID] = map[string]int{}
			}
			where[d.UUID][key] = i
		}
	}
	for uuid := range a.gpus {
		if _, ok := byGPU[uuid]; !ok {
			delete(a.gpus, uuid)
		}
	}
	for k := range a.last {
		delete(a.last, k)
	}
	for uuid, ts := range byGPU {
		s := a.gpus[uuid]
		if s == nil {
			s = &Scheduler{Policy: a.Policy}
			a.gpus[uuid] = s
		}
		for _, v := range s.Step(now, mono, ts) {
			f := a.files[v.Key]
			g := region.Grant{Unpaced: v.Go, Solo: v.Solo, Until: v.Until}
			f.limits.SetGrant(where[uuid][v.Key], g, mono)
			a.last[v.Key+"/"+uuid] = v
		}
		for _, t := range ts {
			if t.Inflight > 0 && s.IdleLong(t.Key, now) {
				f, i := a.files[t.Key], where[uuid][t.Key]
				_ = region.Guard(f.entry.Dir, func() { f.region.ClearInflight(i, t.Inflight) }) // unreadable: dropped at the next step
			}
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
	present := map[string]bool{}
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
func (a *Arbiter) TakeLongestGap() time.Duration { return time.Duration(a.longestGap.Swap(0)) }

// Verdict is the latest decision for allocation key on GPU uuid.
func (a *Arbiter) Verdict(key, uuid string) (Verdict, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.last[key+"/"+uuid]
	return v, ok
}
