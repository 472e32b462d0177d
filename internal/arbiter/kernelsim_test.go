package arbiter

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// kernelSim drives a Scheduler with a model of what the C hook and a
// time-sliced GPU do at kernel granularity (the idealised sim above runs
// whatever the holder wants for whole ticks and bills it at once). Each
// tenant is one thread launching kernels of given sizes on one stream; its
// hook groups them into bursts (about 0.5 ms of work, at least one launch),
// keeps at most `depth` bursts in flight (one for long kernels), bills a
// burst its elapsed time between its start and end events when it completes,
// stamps its demand as the hook does, and goes only while its grant (the last
// verdict the arbiter wrote, within its turn deadline) says so. The device
// time-slices the contexts with work queued round-robin (1 ms slices; a
// context whose queue empties yields at once), as test/fakegpu does, so
// overlapping tenants' events measure each other's slices.
type kernelSim struct {
	s       Scheduler
	ts      []Tenant
	hooks   []*simHook
	now     time.Duration // since start
	start   time.Time
	running int // context holding the device slice, -1 none
	sliceAt time.Duration
	// oldHook: the hook before it stamped its demand ahead for its work in
	// flight: its first stamp after waiting for a burst used the clock read
	// before that wait, and after a launch it stamped nothing until its
	// thread came back.
	oldHook bool
	// host: how long each tenant's thread is away from the GPU after a
	// launch (host work between launches).
	host time.Duration
	// stall, when set, says whether tenant i's thread is kept off the CPU at
	// now (a loaded node): it neither launches, polls nor stamps.
	stall func(i int, now time.Duration) bool
	// arbiterLate, when set, says whether the arbiter's step at now is skipped.
	arbiterLate func(now time.Duration) bool
	// handOverPoll: how soon the arbiter steps again while a hand-over
	// drains (Arbiter.HandOverPoll); 0: at ticks only.
	handOverPoll time.Duration
	lastStep     time.Duration
	polls        int // steps of the current hand-over (handOverWait)
	verdicts     []Verdict
	beat         time.Duration
	ran          []time.Duration // what the device ran per tenant
}

type simItem struct {
	work      time.Duration // left to run; 0 for an event
	burst     *simBurst
	last      bool // the burst's last launch (its end event follows)
	first     bool // the burst's first launch (its start event precedes)
	queuedAt  time.Duration
	startedAt time.Duration // first slice (for the start event)
}

type simBurst struct {
	start, end time.Duration // event times, -1 pending
	launches   int
	done       bool
}

type simHook struct {
	kernel  func(n int) time.Duration
	n       int // launches so far
	queue   []*simItem
	bursts  []*simBurst // closed, in flight, oldest first
	open    *simBurst
	openAt  time.Duration
	peak    time.Duration // decaying peak of GPU time per launch
	target  int
	state   int // hookLaunch, hookWaitBurst, hookPace
	admitAt time.Duration
	stamped time.Duration
	pollAt  time.Duration
	live    bool
	waited  bool          // in pace right after waiting for a burst
	away    time.Duration // the thread is in the application until then
	// what its region says
	busy, demand time.Duration
	inflight     uint64
	billed       time.Duration
}

const (
	hookLaunch = iota
	hookWaitBurst
	hookPace
)

const simDt = 50 * time.Microsecond

// simHandOverPoll: the arbiter's HandOverPoll in the simulations.
var simHandOverPoll = 100 * time.Microsecond

func newKernelSim(p Policy, ts []Tenant, kernels []func(int) time.Duration) *kernelSim {
	m := &kernelSim{s: Scheduler{Policy: p}, ts: ts, start: time.Unix(1000, 0), running: -1, ran: make([]time.Duration, len(ts)),
		handOverPoll: simHandOverPoll}
	for _, k := range kernels {
		m.hooks = append(m.hooks, &simHook{kernel: k, target: 1})
	}
	return m
}

func (m *kernelSim) mono(d time.Duration) uint64 { return uint64(m.start.Add(d).UnixNano()) }

// grantGo: the hook's reading of its grant at now (pacing_rate).
func (m *kernelSim) grantGo(i int) bool {
	if m.verdicts == nil {
		return false
	}
	v := m.verdicts[i]
	return v.Go && (v.Until == 0 || m.now-m.beat < v.Until)
}

func (h *simHook) depth() int {
	if h.peak == 0 || h.peak*time.Duration(h.target) >= 4*time.Millisecond {
		return 1
	}
	return 2
}

func (h *simHook) setLive() {
	live := h.open != nil || len(h.bursts) > 0
	if live != h.live {
		if live {
			h.inflight++
		} else {
			h.inflight--
		}
		h.live = live
	}
}

// account bills the oldest closed burst if it completed.
func (h *simHook) account() bool {
	if len(h.bursts) == 0 || !h.bursts[0].done {
		return false
	}
	b := h.bursts[0]
	h.bursts = h.bursts[1:]
	h.setLive()
	busy := b.end - b.start
	h.busy += busy
	h.billed += busy
	per := busy / time.Duration(b.launches)
	if per > h.peak {
		h.peak = per
	} else {
		h.peak -= h.peak / 16
	}
	h.target = 1
	if h.peak > 0 && 500*time.Microsecond/h.peak > 1 {
		h.target = int(500 * time.Microsecond / h.peak)
	}
	return true
}

func (h *simHook) launch(now time.Duration) {
	w := h.kernel(h.n)
	h.n++
	if h.open == nil {
		h.open = &simBurst{start: -1, end: -1}
		h.openAt = now
		h.setLive()
	}
	it := &simItem{work: w, burst: h.open, first: h.open.launches == 0, queuedAt: now, startedAt: -1}
	if it.first && len(h.queue) == 0 {
		// The start event is recorded on an idle stream: it completes at
		// once (a zero-length item), whether or not the context has a slice.
		h.open.start = now
	}
	h.open.launches++
	h.queue = append(h.queue, it)
}

func (h *simHook) close(now time.Duration) {
	if h.open == nil {
		return
	}
	if len(h.queue) == 0 {
		// The end event on an idle stream completes when recorded.
		h.open.end, h.open.done = now, true
	} else {
		h.queue[len(h.queue)-1].last = true
	}
	h.bursts = append(h.bursts, h.open)
	h.open = nil
}

// advanceHook runs tenant i's thread at m.now.
func (m *kernelSim) advanceHook(i int) {
	h := m.hooks[i]
	if m.stall != nil && m.stall(i, m.now) || m.now < h.away {
		return
	}
	for guard := 0; guard < 10000; guard++ {
		switch h.state {
		case hookLaunch:
			if h.open != nil && h.open.launches < h.target && m.now-h.openAt < time.Millisecond {
				h.launch(m.now)
				continue
			}
			// open_burst
			h.admitAt = m.now
			h.close(m.now)
			for h.account() {
			}
			if len(h.bursts) >= h.depth() {
				h.state = hookWaitBurst
				ahead := h.peak * time.Duration(h.bursts[0].launches+1)
				h.demand, h.stamped = m.now+ahead, m.now
				return
			}
			h.state = hookPace
			h.pollAt = m.now
			continue
		case hookWaitBurst:
			if h.account() {
				if len(h.bursts) >= h.depth() {
					continue
				}
				h.state = hookPace
				h.pollAt = m.now
				h.waited = true
				continue
			}
			if m.now-h.stamped >= time.Millisecond {
				h.demand, h.stamped = m.now, m.now
			}
			return
		case hookPace:
			if m.now < h.pollAt {
				return
			}
			h.demand = m.now
			if h.waited && m.oldHook {
				// pace()'s first stamp: the clock read before the wait.
				h.demand = h.admitAt
			}
			h.waited = false
			if m.grantGo(i) {
				// Back to the application, whose next launch comes at the
				// next step (the thread may be kept off the CPU meanwhile).
				h.state = hookLaunch
				h.launch(m.now)
				if !m.oldHook {
					// Not idle until its work in flight should be done.
					ahead := time.Duration(h.target)
					for _, b := range h.bursts {
						ahead += time.Duration(b.launches)
					}
					h.demand = m.now + ahead*h.peak
				}
				h.away = m.now + m.host
				return
			}
			for h.account() {
			}
			h.pollAt = m.now + 100*time.Microsecond
			return
		}
	}
}

// advanceDevice runs the device for one simDt.
func (m *kernelSim) advanceDevice() {
	pending := func(i int) bool { return len(m.hooks[i].queue) > 0 }
	left := simDt
	for left > 0 {
		if m.running < 0 || !pending(m.running) || m.now+simDt-left-m.sliceAt >= 1024*time.Microsecond {
			next := -1
			for k := 1; k <= len(m.hooks); k++ {
				c := (max(m.running, 0) + k) % len(m.hooks)
				if m.running < 0 {
					c = k - 1
				}
				if pending(c) {
					next = c
					break
				}
			}
			if next < 0 {
				m.running = -1
				return
			}
			if next != m.running || !pending(m.running) || m.now+simDt-left-m.sliceAt >= 1024*time.Microsecond {
				m.sliceAt = m.now + simDt - left
			}
			m.running = next
		}
		h := m.hooks[m.running]
		at := m.now + simDt - left
		it := h.queue[0]
		run := min(left, it.work, 1024*time.Microsecond-(at-m.sliceAt))
		it.work -= run
		left -= run
		m.ran[m.running] += run
		if it.work == 0 {
			h.queue = h.queue[1:]
			if len(h.queue) > 0 && h.queue[0].first {
				h.queue[0].burst.start = at + run
			}
			if it.last {
				it.burst.end = at + run
				it.burst.done = true
			}
		}
	}
}

func (m *kernelSim) step() {
	onTick := m.now%time.Millisecond == 0
	soon := m.handOverPoll > 0 && m.verdicts != nil && m.s.HandingOver() &&
		m.now-m.lastStep >= handOverWait(m.handOverPoll, time.Millisecond, m.polls)
	if (onTick || soon) && (m.arbiterLate == nil || !m.arbiterLate(m.now)) {
		m.lastStep = m.now
		mono := m.mono(m.now)
		for i, h := range m.hooks {
			m.ts[i].BusyNs = uint64(h.busy)
			m.ts[i].DemandNs = 0
			if h.demand > 0 {
				m.ts[i].DemandNs = m.mono(h.demand)
			}
			m.ts[i].Inflight = h.inflight
		}
		m.verdicts = m.s.Step(m.start.Add(m.now), mono, m.ts)
		if m.s.HandingOver() {
			m.polls++
		} else {
			m.polls = 0
		}
		m.beat = m.now
	}
	for i := range m.hooks {
		m.advanceHook(i)
	}
	m.advanceDevice()
	m.now += simDt
}

// runFor steps for d and returns each tenant's device time in it.
func (m *kernelSim) runFor(d time.Duration) []time.Duration {
	before := append([]time.Duration(nil), m.ran...)
	for end := m.now + d; m.now < end; {
		m.step()
	}
	out := make([]time.Duration, len(m.ran))
	for i := range m.ran {
		out[i] = m.ran[i] - before[i]
	}
	return out
}

func pctOf(got []time.Duration) []float64 {
	var total time.Duration
	for _, g := range got {
		total += g
	}
	out := make([]float64, len(got))
	for i, g := range got {
		out[i] = 100 * g.Seconds() / math.Max(total.Seconds(), 1e-9)
	}
	return out
}

func fixed(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// mixedKernels is the share tests' "mixed" sequence (50 µs, 1 ms, 10 ms, 200 µs).
func mixedKernels(n int) time.Duration {
	return []time.Duration{50 * time.Microsecond, time.Millisecond, 10 * time.Millisecond, 200 * time.Microsecond}[n%4]
}

// kernelSimErrors runs a saturating case and returns the worst error over
// 1 s and 100 ms windows (pp of device time) after a settling second, and
// the whole run's shares.
func kernelSimErrors(m *kernelSim, pcts []float64, seconds int) (err1s, err100ms float64, whole []float64) {
	m.runFor(time.Second)
	total := make([]time.Duration, len(pcts))
	for s := 0; s < seconds; s++ {
		sec := make([]time.Duration, len(pcts))
		for w := 0; w < 10; w++ {
			got := m.runFor(100 * time.Millisecond)
			for i, p := range pctOf(got) {
				err100ms = math.Max(err100ms, math.Abs(p-pcts[i]))
			}
			for i := range got {
				sec[i] += got[i]
				total[i] += got[i]
			}
		}
		for i, p := range pctOf(sec) {
			err1s = math.Max(err1s, math.Abs(p-pcts[i]))
		}
	}
	return err1s, err100ms, pctOf(total)
}

func arbiterPolicy() Policy {
	return Policy{Quantum: 10 * time.Millisecond, IdleAfter: 5 * time.Millisecond, PriorityHold: 100 * time.Millisecond,
		TurnGrace: 2 * time.Millisecond}
}

// kernelCase is one saturating scenario of the kernel-granular simulation.
type kernelCase struct {
	shares  []float64
	kernel  string // "50us", "1ms", "10ms" or "mixed"
	hard    bool
	host    time.Duration // each thread away after a launch
	oldHook bool
	stalls  bool // threads wait for a CPU 15 % of the time, 3 ms on average
}

type kernelResult struct {
	err1s, err100ms float64
	whole           []float64
	billRatio       []float64
}

// newKernelCase builds the simulation of a saturating case.
func newKernelCase(c kernelCase) *kernelSim {
	ts := shares(c.shares...)
	var ks []func(int) time.Duration
	for i := range ts {
		ts[i].Hard = c.hard
		switch c.kernel {
		case "50us":
			ks = append(ks, fixed(50*time.Microsecond))
		case "1ms":
			ks = append(ks, fixed(time.Millisecond))
		case "10ms":
			ks = append(ks, fixed(10*time.Millisecond))
		default:
			ks = append(ks, mixedKernels)
		}
	}
	m := newKernelSim(arbiterPolicy(), ts, ks)
	m.oldHook, m.host = c.oldHook, c.host
	if c.stalls {
		m.stall = cpuStalls(len(ts), 3*time.Millisecond, 0.15, 1)
	}
	return m
}

func runKernelCase(c kernelCase) kernelResult {
	m := newKernelCase(c)
	var r kernelResult
	r.err1s, r.err100ms, r.whole = kernelSimErrors(m, c.shares, 3)
	var billed []time.Duration
	for _, h := range m.hooks {
		billed = append(billed, h.billed)
	}
	r.billRatio = ratio(billed, m.ran)
	return r
}

// The share matrix at kernel granularity: every tenant within 2 pp of its
// share over every 1 s window, with the hosts' threads running on time and
// with them waiting for a CPU now and then (a loaded node: within 4 pp).
func TestKernelGranularShares(t *testing.T) {
	for _, stalls := range []bool{false, true} {
		for _, sh := range [][]float64{{10, 90}, {25, 75}, {10, 20, 30, 40}} {
			for _, k := range []string{"50us", "1ms", "10ms", "mixed"} {
				for _, hard := range []bool{false, true} {
					c := kernelCase{shares: sh, kernel: k, hard: hard, stalls: stalls}
					r := runKernelCase(c)
					t.Logf("%v %s hard=%v stalls=%v: 1 s %.1f pp, 100 ms %.1f pp, whole %.1f, billed÷ran %.2f",
						sh, k, hard, stalls, r.err1s, r.err100ms, r.whole, r.billRatio)
					limit := 2.0
					if stalls {
						limit = 4
					}
					if r.err1s > limit {
						t.Errorf("%v %s hard=%v stalls=%v: worst 1 s window %.1f pp off, want ≤ %.0f", sh, k, hard, stalls, r.err1s, limit)
					}
				}
			}
		}
	}
}

// Kernels as long as the quantum: a hook bills a burst when it completes, a
// whole 10 ms kernel at once, and its thread launches the next the moment
// one completes, before the arbiter has seen the bill. Turns decided on the
// billed virtual time alone let a 10 % tenant run two kernels a turn and
// then wait 180 ms (100 ms windows of 0 and 20 %); counting what a holder
// runs unbilled ends its turn while its kernel runs. What is left is the
// order of one-kernel turns and the hand-over gaps between them, not the
// size of a kernel: TestWindowFloorOfPeriodicSchedules.
func TestLongKernelsOver100msWindows(t *testing.T) {
	for _, c := range []struct {
		shares []float64
		limit  float64 // pp over 100 ms windows (the turns as billed: 10.4 and 18.8)
	}{{[]float64{10, 90}, 6}, {[]float64{10, 20, 30, 40}, 12}} {
		r := runKernelCase(kernelCase{shares: c.shares, kernel: "10ms"})
		t.Logf("%v 10 ms kernels: 1 s %.1f pp, 100 ms %.1f pp, whole %.1f", c.shares, r.err1s, r.err100ms, r.whole)
		if r.err100ms > c.limit {
			t.Errorf("%v 10 ms kernels: worst 100 ms window %.1f pp off, want ≤ %.0f", c.shares, r.err100ms, c.limit)
		}
	}
	// Hard: the small tenant's tokens (a quantum's worth at 10 %: 1 ms)
	// are far less than one kernel; what it accrues while it waits for its
	// turn in debt must not be capped away (it got 11 %, the 90 % one 89).
	r := runKernelCase(kernelCase{shares: []float64{10, 90}, kernel: "10ms", hard: true})
	if math.Abs(r.whole[0]-10) > 0.6 {
		t.Errorf("hard 10/90, 10 ms kernels: %.1f, want 10/90 within 0.6 pp", r.whole)
	}
}

// A tenant whose thread is away between launches (host work, or a process
// the OS does not run) while its kernel runs is not idle: its hook stamps
// its demand ahead by the work it has in flight. Without that stamp it
// looked idle after IdleAfter, its turn passed on without waiting for its
// kernel, the next holder's kernels ran beside it, and both were billed for
// the overlap (10/90 with 10 ms kernels and 6 ms of host work: the 10 %
// tenant got 33 %, billed 1.4× what it ran).
func TestHostWorkBetweenLaunches(t *testing.T) {
	run := func(old bool) kernelResult {
		return runKernelCase(kernelCase{shares: []float64{10, 90}, kernel: "10ms", host: 6 * time.Millisecond, oldHook: old})
	}
	r, old := run(false), run(true)
	t.Logf("10/90, 10 ms kernels, 6 ms host work: %.1f billed÷ran %.2f (hook stamping nothing ahead: %.1f, %.2f)",
		r.whole, r.billRatio, old.whole, old.billRatio)
	if math.Abs(r.whole[0]-10) > 1.5 || r.err1s > 2 {
		t.Errorf("got %.1f (worst 1 s window %.1f pp off), want 10/90 within 1.5 pp", r.whole, r.err1s)
	}
	if math.Abs(old.whole[0]-10) < 5 {
		t.Errorf("without the stamp ahead the case still gets %.1f: it no longer tests the stamp", old.whole)
	}
}

// cpuStalls returns a stall function for n tenants: each thread alternates
// runs and waits for a CPU of random (exponential) lengths, the waits
// averaging meanWait and frac of the time.
func cpuStalls(n int, meanWait time.Duration, frac float64, seed int64) func(int, time.Duration) bool {
	r := rand.New(rand.NewSource(seed))
	next := make([]time.Duration, n) // end of the current period
	stalled := make([]bool, n)
	meanRun := time.Duration(float64(meanWait) * (1 - frac) / frac)
	return func(i int, now time.Duration) bool {
		for now >= next[i] {
			stalled[i] = !stalled[i]
			mean := meanRun
			if stalled[i] {
				mean = meanWait
			}
			next[i] += time.Duration(r.ExpFloat64() * float64(mean))
		}
		return stalled[i]
	}
}

func ratio(a, b []time.Duration) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i].Seconds() / math.Max(b[i].Seconds(), 1e-9)
	}
	return out
}

// What the scheduler charges is what the hooks billed when nothing
// overlapped: a whole kernel's bill arriving at once is not overlap (the
// window that keeps the GPU from being billed more than the time that
// passed scaled every bill of 10 ms kernels by ~0.93, hard caps with it).
func TestLongKernelBillsAreChargedWhole(t *testing.T) {
	for _, k := range []time.Duration{time.Millisecond, 10 * time.Millisecond} {
		ts := shares(10, 90)
		ks := []func(int) time.Duration{fixed(k), fixed(k)}
		m := newKernelSim(arbiterPolicy(), ts, ks)
		m.runFor(time.Second)
		for i := range ts {
			charged := m.s.tenants[ts[i].Key].vtime * ts[i].Share
			billed := m.hooks[i].busy.Seconds()
			if r := charged / billed; math.Abs(r-1) > 0.02 {
				t.Errorf("%v kernels, tenant %d: charged %.3f s of %.3f s billed (%.3f), want 1 ± 0.02", k, i, charged, billed, r)
			}
		}
	}
}

// slidingWindowErrors runs m for d, recording each tenant's device time per
// ms, and returns the worst error (pp of the device time in the window)
// over every 100 ms and every 1 s window starting at any ms — not only
// where the share tests' consecutive windows happen to start — and the
// device's busy fraction.
func slidingWindowErrors(m *kernelSim, pcts []float64, d time.Duration) (err100ms, err1s, busy float64) {
	n := len(pcts)
	var cum [][]time.Duration // cumulative device time per tenant after each ms
	zero := make([]time.Duration, n)
	cum = append(cum, zero)
	for k := 0; k < int(d/time.Millisecond); k++ {
		got := m.runFor(time.Millisecond)
		row := make([]time.Duration, n)
		for i := range got {
			row[i] = cum[len(cum)-1][i] + got[i]
		}
		cum = append(cum, row)
	}
	worst := func(w int) float64 {
		e := 0.0
		for a := 0; a+w < len(cum); a++ {
			got := make([]time.Duration, n)
			for i := range got {
				got[i] = cum[a+w][i] - cum[a][i]
			}
			for i, p := range pctOf(got) {
				e = math.Max(e, math.Abs(p-pcts[i]))
			}
		}
		return e
	}
	var total time.Duration
	for _, x := range cum[len(cum)-1] {
		total += x
	}
	return worst(100), worst(1000), total.Seconds() / d.Seconds()
}

// The worst 100 ms window of every saturating case, as the policy stands,
// over every window start and three start phases of the tenants (their
// first launches 0–20 ms apart: the simulation is deterministic, and its
// worst window depends on the phase). The bounds are what the policy
// achieves (docs/hook.md, "Measured": the kernel simulation's table) plus
// at most 1 pp: a change that makes a case worse fails here. Cases over
// the 5 pp: 30/30/40 and 10/20/30/40 with 1 ms kernels (turns
// ended on a lead of virtual time rotate with a period that is no divisor
// of 100 ms, so a window holds one turn more of one tenant than of
// another); 10 ms kernels with 25/75 (5 pp is the floor: 2.5 kernels a
// window) and with 3–4 tenants (the order of one-kernel turns; floor
// 2–4 pp, TestWindowFloorOfPeriodicSchedules); mixed kernels (a 10 %
// tenant's 10 ms kernels come 112 ms apart on average: some window holds
// none of them, 8.6 pp off at least).
func TestKernelGranularSlidingWindows(t *testing.T) {
	// With hand-overs stepped HandOverPoll apart at first, backing off to
	// half a tick (handOverWait), the GPU no longer idles about half a tick
	// per hand-over (busy 0.83-0.99 -> 0.95-0.996), and with turns sized by
	// the bills for three or more tenants (turnQuantum) every short-kernel
	// case is within 4.74 pp (was up to 7.1) and 10 ms kernels with 3
	// tenants 2.2 pp (was 6.9); 10/90 hard and 10/20/30/40 with 10 ms
	// kernels stay at about one kernel (10 pp), mixed kernels 6.8-10 pp.
	bounds := map[string]float64{ // worst 100 ms window, pp
		"10/90 50us": 3, "10/90 1ms": 3, "10/90 10ms": 11, "10/90 mixed": 11,
		"25/75 50us": 3.5, "25/75 1ms": 2.5, "25/75 10ms": 7, "25/75 mixed": 8,
		"30/30/40 50us": 3.5, "30/30/40 1ms": 5.5, "30/30/40 10ms": 3.5, "30/30/40 mixed": 8.5,
		"10/20/30/40 50us": 4.5, "10/20/30/40 1ms": 5.5, "10/20/30/40 10ms": 11, "10/20/30/40 mixed": 11,
	}
	for _, sh := range [][]float64{{10, 90}, {25, 75}, {30, 30, 40}, {10, 20, 30, 40}} {
		name := strings.Trim(strings.ReplaceAll(fmt.Sprint(sh), " ", "/"), "[]")
		for _, k := range []string{"50us", "1ms", "10ms", "mixed"} {
			for _, hard := range []bool{false, true} {
				var e100, e1, busy float64
				for phase := int64(0); phase < 3; phase++ {
					m := newKernelCase(kernelCase{shares: sh, kernel: k, hard: hard})
					if phase > 0 {
						r := rand.New(rand.NewSource(phase))
						off := make([]time.Duration, len(sh))
						for i := range off {
							off[i] = time.Duration(r.Intn(20000)) * time.Microsecond
						}
						m.stall = func(i int, now time.Duration) bool { return now < off[i] }
					}
					m.runFor(time.Second)
					a, b, c := slidingWindowErrors(m, sh, 5*time.Second)
					e100, e1, busy = math.Max(e100, a), math.Max(e1, b), busy+c/3
				}
				t.Logf("%s %s hard=%v: worst 100 ms window %.2f pp, worst 1 s window %.2f pp, busy %.3f", name, k, hard, e100, e1, busy)
				if b := bounds[name+" "+k]; e100 > b {
					t.Errorf("%s %s hard=%v: worst 100 ms window %.2f pp off, want ≤ %.1f (what the policy achieved)", name, k, hard, e100, b)
				}
				if e1 > 2 {
					t.Errorf("%s %s hard=%v: worst 1 s window %.2f pp off, want ≤ 2", name, k, hard, e1)
				}
				if busy < 0.95 { // each hand-over idles the GPU until a step sees the old holder's work done
					t.Errorf("%s %s hard=%v: GPU busy %.3f, want ≥ 0.95", name, k, hard, busy)
				}
			}
		}
	}
}

// The floor over 100 ms windows with kernels that cannot be cut, on a GPU
// kept busy: the schedules that repeat every "round" of 10 ms kernels
// (every order of them, brute force), judged over every window start. The
// docs once said one kernel (10 pp) was the floor whatever the controller;
// it is not:
//   - with no idle time between turns, a schedule repeating every 100 ms
//     puts exactly its round in every 100 ms window whatever the phase: 0 pp
//     for 10/90, 30/30/40 and 10/20/30/40 (1, 3, 4 kernels a round), in
//     whatever order. 25/75 needs 2.5 kernels a window: 5 pp whatever the
//     schedule (windows that start at a kernel's start hold whole kernels);
//   - each hand-over idles the GPU (about a tick here): the round then
//     lasts longer than the window, which misses part of it. With 1 ms
//     gaps: 10/90 1.84 pp, 25/75 6.91, 30/30/40 2.16 and 10/20/30/40
//     3.75 pp when each tenant's kernels run in one turn (fewest
//     hand-overs); the worst orders 7.8 and 10 pp;
//   - 1 s windows then hold 9.6 rounds, and the grouped turns put them
//     2.2–2.5 pp off; keeping 1 s windows within 2 pp, 10/20/30/40 cannot do
//     better than 4.74 pp over 100 ms (1 ms gaps; 1.84 with 0.5 ms).
func TestWindowFloorOfPeriodicSchedules(t *testing.T) {
	type floor struct{ best, grouped, worst float64 }
	search := func(counts []int, pcts []float64, gap, w int) floor {
		f := floor{best: math.Inf(1), grouped: math.Inf(1)}
		orders(counts, func(o []int) {
			e := periodicWindowError(o, 100, gap, w, pcts)
			f.best, f.worst = math.Min(f.best, e), math.Max(f.worst, e)
			if groupedTurns(o) {
				f.grouped = math.Min(f.grouped, e)
			}
		})
		return f
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 0.01 }
	for _, c := range []struct {
		pcts          []float64
		counts        []int
		noGap, gap1ms float64 // best over 100 ms windows (units of 100 µs: gaps 0 and 10)
		grouped1ms    float64
	}{
		{[]float64{10, 90}, []int{1, 9}, 0, 1.84, 1.84},
		{[]float64{25, 75}, []int{1, 3}, 5, 6.91, 6.91},
		{[]float64{25, 75}, []int{2, 6}, 5, 6.91, 13.78},
		{[]float64{30, 30, 40}, []int{3, 3, 4}, 0, 2.16, 2.16},
		{[]float64{10, 20, 30, 40}, []int{1, 2, 3, 4}, 0, 3.75, 3.75},
	} {
		f0 := search(c.counts, c.pcts, 0, 1000)
		f1 := search(c.counts, c.pcts, 10, 1000)
		t.Logf("%v, %v kernels a round: no gaps %.2f…%.2f pp; 1 ms gaps best %.2f, grouped %.2f, worst order %.2f pp",
			c.pcts, c.counts, f0.best, f0.worst, f1.best, f1.grouped, f1.worst)
		if !near(f0.best, c.noGap) || !near(f1.best, c.gap1ms) || !near(f1.grouped, c.grouped1ms) {
			t.Errorf("%v %v: floors %.2f (no gaps), %.2f and grouped %.2f (1 ms gaps), want %.2f, %.2f, %.2f",
				c.pcts, c.counts, f0.best, f1.best, f1.grouped, c.noGap, c.gap1ms, c.grouped1ms)
		}
		if c.noGap == 0 && f0.worst > 0.01 {
			t.Errorf("%v: a round of %v repeating every 100 ms is %.2f pp off in some order, want 0 in every order", c.pcts, c.counts, f0.worst)
		}
	}
	// 1 s windows within 2 pp as well: 10/20/30/40 with 1 ms gaps.
	best := math.Inf(1)
	orders([]int{1, 2, 3, 4}, func(o []int) {
		pcts := []float64{10, 20, 30, 40}
		if periodicWindowError(o, 100, 10, 10000, pcts) <= 2 {
			best = math.Min(best, periodicWindowError(o, 100, 10, 1000, pcts))
		}
	})
	if !near(best, 4.74) {
		t.Errorf("10/20/30/40, 1 ms gaps, 1 s windows within 2 pp: best 100 ms window %.2f pp, want 4.74", best)
	}
}

// periodicWindowError is the worst error (pp of device time) over windows
// of w units (100 µs) at every start, of the schedule that repeats order
// for ever: kernels of kernel units, and gap idle units wherever the turn
// passes to another tenant.
func periodicWindowError(order []int, kernel, gap, w int, pcts []float64) float64 {
	var round []int // tenant per unit, -1 idle
	for i, x := range order {
		for k := 0; k < kernel; k++ {
			round = append(round, x)
		}
		if order[(i+1)%len(order)] != x {
			for k := 0; k < gap; k++ {
				round = append(round, -1)
			}
		}
	}
	n := len(pcts)
	p := len(round)
	cum := make([][]int, n+1) // per tenant, and busy in all
	for i := range cum {
		cum[i] = make([]int, p+w+1)
	}
	for u := 0; u < p+w; u++ {
		for i := range cum {
			cum[i][u+1] = cum[i][u]
		}
		if x := round[u%p]; x >= 0 {
			cum[x][u+1]++
			cum[n][u+1]++
		}
	}
	worst := 0.0
	for a := 0; a < p; a++ {
		busy := float64(cum[n][a+w] - cum[n][a])
		for i := 0; i < n; i++ {
			worst = math.Max(worst, math.Abs(100*float64(cum[i][a+w]-cum[i][a])/busy-pcts[i]))
		}
	}
	return worst
}

// orders calls f with every distinct order of counts[i] kernels of tenant
// i that starts with tenant 0 (a round's rotations are the same schedule).
func orders(counts []int, f func([]int)) {
	left := append([]int(nil), counts...)
	total := 0
	for _, c := range left {
		total += c
	}
	cur := []int{0}
	left[0]--
	var rec func()
	rec = func() {
		if len(cur) == total {
			f(cur)
			return
		}
		for x := range left {
			if left[x] > 0 {
				left[x]--
				cur = append(cur, x)
				rec()
				cur = cur[:len(cur)-1]
				left[x]++
			}
		}
	}
	rec()
}

// groupedTurns: each tenant's kernels of the round run in one turn.
func groupedTurns(o []int) bool {
	done := map[int]bool{}
	for i, x := range o {
		if i > 0 && o[i-1] != x {
			if done[x] {
				return false
			}
			done[o[i-1]] = true
		}
	}
	return true
}

// Work conservation at kernel granularity, as the issue states it:
// guaranteed 30/70, the 70 % tenant's thread away 250 ms of every 500 (the
// idealised TestWorkConservationWithAHalfIdleTenant has no hand-over gaps).
// Stepping at ticks only, each hand-over idled the GPU until the next tick
// (1 ms kernels: 0.93 busy); stepping every HandOverPoll while a hand-over
// drains keeps it ≥ 0.95.
func TestHandOverPollKeepsTheGPUBusy(t *testing.T) {
	for _, k := range []string{"50us", "1ms", "10ms"} {
		busy := map[time.Duration]float64{}
		for _, poll := range []time.Duration{0, 100 * time.Microsecond} {
			m := newKernelCase(kernelCase{shares: []float64{30, 70}, kernel: k})
			m.handOverPoll = poll
			m.stall = func(i int, now time.Duration) bool {
				return i == 1 && now%(500*time.Millisecond) >= 250*time.Millisecond
			}
			m.runFor(time.Second)
			ran := m.runFor(4 * time.Second)
			var sum time.Duration
			for _, r := range ran {
				sum += r
			}
			busy[poll] = sum.Seconds() / 4
		}
		t.Logf("%s: GPU busy %.3f stepping at ticks only, %.3f with a 100 us hand-over poll", k, busy[0], busy[100*time.Microsecond])
		if busy[100*time.Microsecond] < 0.95 {
			t.Errorf("%s kernels, guaranteed 30/70 with the 70 %% tenant away half the time: GPU busy %.3f, want ≥ 0.95", k, busy[100*time.Microsecond])
		}
	}
}
