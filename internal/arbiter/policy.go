package arbiter

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Policy is the arbiter's configuration (api/config/v1 ArbiterConfig).
type Policy struct {
	// Quantum is how long a tenant holds the GPU before the next in line
	// (by the least GPU time per share) takes over.
	Quantum time.Duration
	// IdleAfter: a tenant whose hook has neither launched nor waited to for
	// this long is idle, and its turn passes on (a SIGKILLed or SIGSTOPped
	// process stops refreshing its demand).
	IdleAfter time.Duration
	// PriorityHold is how long after a higher-priority tenant was last active
	// lower priorities stay throttled to PriorityFloor.
	PriorityHold time.Duration
	// PriorityFloor is the share of the GPU (0..1) a throttled lower-priority
	// tenant keeps.
	PriorityFloor float64
	// TurnGrace > 0 gives the holder's grant a deadline: the end of its turn
	// as it stands (quantum, lead over the next in line, a capped tenant's
	// tokens) plus TurnGrace, renewed at every step. The hook stops the
	// holder by itself past it, so an arbiter the OS did not run for a while
	// (a loaded node) no longer lets a turn last as long as the stall. 0: no
	// deadline.
	TurnGrace time.Duration
}

// Tenant is one container's standing on one GPU, as its files say now.
type Tenant struct {
	Key      string
	Share    float64 // 0..1 of the GPU
	Hard     bool    // never more than Share, even alone
	Priority int     // 0 (highest) .. 3
	BusyNs   uint64  // cumulative GPU time measured by its hook
	DemandNs uint64  // CLOCK_MONOTONIC of its last launch or wait to launch
	Inflight uint64  // launch sequences of its hooks with work in flight
}

// soloAfter is how long the other tenants of a GPU must have been idle before
// the holder may queue deeper.
const soloAfter = 100 * time.Millisecond

// creditKept is how long a tenant may look idle and keep what it is owed
// (GPU time behind its share, a hard tenant's tokens). A process the OS did
// not run for a few ms (a loaded node) stops refreshing its demand and looks
// idle; starting it level with the others on its return made a 90 % tenant
// descheduled now and then come out at 75 %. Idle longer, it starts level
// (work conservation without later starvation of the others).
const creditKept = 100 * time.Millisecond

// Verdict is the scheduler's answer for one tenant.
type Verdict struct {
	Key string
	Go  bool // may launch now (unpaced); otherwise stopped
	// Throttled: stopped although it has demand (for the metric).
	Throttled bool
	// Suppressed: stopped for a higher priority.
	Suppressed bool
	// Solo: no other tenant of the GPU is active (its hook may queue deeper).
	Solo bool
	// Until: for a holder with others waiting (Policy.TurnGrace > 0), how
	// long from now it may go on should no further step come; 0: no bound.
	Until time.Duration
	// Charged is the GPU time the scheduler has counted for the tenant so
	// far (seconds, as its virtual time grew: what it was billed after
	// scaling, plus what idling levelled it up by); for diagnostics.
	Charged float64
}

// tenantState is what the scheduler remembers about a tenant between steps.
type tenantState struct {
	lastBusy  uint64
	seen      bool
	vtime     float64 // GPU time received / share, seconds
	tokens    float64 // seconds of GPU time a capped tenant may still use
	active    bool
	lastFresh time.Time // last step it was active
	// idleInflight is the in-flight count it had when last idle: what dead
	// processes left behind, never to be accounted (drained means back to it).
	idleInflight uint64
	// unbilled: seconds it held a go since its hook last billed anything —
	// GPU time it is taking that its hook bills only when the burst
	// completes (a whole 10 ms kernel at once). Turns are decided on
	// vtime plus this (due), or a holder of long kernels would lead nobody
	// until its kernel completed, and by then its hook has launched the next.
	unbilled float64
	wentGo   bool      // its last verdict was go
	lastGo   time.Time // the last step its verdict was go
	// lump: its largest bill in one step, decaying over about a second
	// (a whole kernel when they are long; bank).
	lump float64
}

// Scheduler is the policy of one GPU: an exclusive turn (the GPU's time
// slices are not preemptible by the hook, so exclusivity is what makes the
// events measure a tenant's own time), handed to the active, eligible
// tenant with the least GPU time per share, priorities first.
type Scheduler struct {
	Policy  Policy
	tenants map[string]*tenantState
	holder  string
	since   time.Time // holder's turn began
	handed  time.Time // the turn last changed hands
	// lastPrio[p]: when a tenant of priority p was last active.
	lastPrio [4]time.Time
	last     time.Time
	// Decaying sums of measured GPU time and wall time (overlapFactor).
	winMeasured, winWall float64
	// handingOver: the last step held the holder back while the previous
	// one's work drains (HandingOver).
	handingOver bool
	// turnQ: the quantum this step's turns are judged by (turnQuantum).
	turnQ time.Duration
	// Scratch kept between steps: a step in steady state allocates nothing.
	present map[string]bool
	cands   []*Tenant
	others  []*Tenant
	out     []Verdict
}

// Step decides the grants at now (mono: the same instant on the hooks'
// CLOCK_MONOTONIC, to judge their demand stamps): one verdict per tenant, in
// the order of ts, valid until the next Step (the slice is reused).
func (s *Scheduler) Step(now time.Time, mono uint64, ts []Tenant) []Verdict {
	if s.tenants == nil {
		s.tenants, s.present = map[string]*tenantState{}, map[string]bool{}
	}
	dt := 0.0
	if !s.last.IsZero() {
		dt = now.Sub(s.last).Seconds()
	}
	s.last = now
	present := s.present
	clear(present)
	minV, anyActive := 0.0, false
	factor := s.overlapFactor(ts, dt)
	for i := range ts {
		t := &ts[i]
		present[t.Key] = true
		st := s.state(t)
		measured := 0.0
		if t.BusyNs > st.lastBusy {
			measured = float64(t.BusyNs-st.lastBusy) / 1e9
		}
		st.lastBusy = t.BusyNs
		wasActive, wasIdleLong := st.active, s.idleLong(now, st)
		st.active = measured > 0 || s.demanding(t, mono)
		if (!st.active && wasIdleLong) || t.Inflight < st.idleInflight {
			// Idle for long: what is still counted will not drain. (Not on
			// a moment's idling: a process the OS did not run has work in
			// flight all the same.)
			st.idleInflight = t.Inflight
		}
		used := measured * factor
		if st.active {
			st.lastFresh = now
			if t.Priority >= 0 && t.Priority < len(s.lastPrio) {
				s.lastPrio[t.Priority] = now
			}
		}
		if t.Share > 0 {
			st.vtime += used / t.Share
		}
		st.lump = math.Max(measured, st.lump*(1-math.Min(dt, 1)))
		switch {
		case measured > 0 || !st.active || t.Inflight <= st.idleInflight:
			st.unbilled = 0 // what it ran is billed (or nothing is in flight)
		case st.wentGo:
			st.unbilled += dt
		case now.Sub(st.lastGo).Seconds() >= math.Max(s.Policy.Quantum.Seconds(), 2*st.lump):
			// Stopped for longer than its work in flight (at most two
			// bursts) takes, and no bill came: nothing it ran under its go
			// is still running, and the count that kept this up is another
			// thread's that is away or a killed process's. Kept, it could
			// exceed what a capped tenant's bank ever holds, and the
			// tenant, never eligible again, waited in pace for good.
			st.unbilled = 0
		}
		if !wasActive && st.active && wasIdleLong {
			st.tokens = 0 // a capped tenant banks nothing while idle
		}
		if cap := s.capOf(now, t); cap < 1 {
			st.tokens += cap*dt - used
			if max := s.bank(st, cap); st.tokens > max {
				st.tokens = max
			}
		}
	}
	// Idle tenants bank no credit: one that wakes up starts level with the
	// least-served active one (work conservation without later starvation).
	for i := range ts {
		st := s.tenants[ts[i].Key]
		if st.active && (!anyActive || st.vtime < minV) {
			minV, anyActive = st.vtime, true
		}
	}
	for i := range ts {
		if st := s.tenants[ts[i].Key]; !st.active && anyActive && st.vtime < minV && s.idleLong(now, st) {
			st.vtime = minV
		}
	}
	for k := range s.tenants {
		if !present[k] {
			delete(s.tenants, k)
		}
	}
	s.turnQ = s.turnQuantum(ts)
	s.pick(now, ts)
	// Solo (a deeper queue for the holder) only once every other tenant has
	// been idle for soloAfter: a tenant that waits on a long kernel may look
	// idle for a moment, and a deep queue granted then would run beside it.
	others := 0
	for i := range ts {
		st := s.tenants[ts[i].Key]
		if ts[i].Key != s.holder && !st.lastFresh.IsZero() && now.Sub(st.lastFresh) < soloAfter {
			others++
		}
	}
	draining := s.draining(now, ts)
	s.handingOver = draining
	until := s.turnLeft(now, ts)
	out := s.out[:0]
	for i := range ts {
		t := &ts[i]
		st := s.tenants[t.Key]
		v := Verdict{Key: t.Key, Go: t.Key == s.holder && !draining, Charged: st.vtime * t.Share}
		st.wentGo = v.Go
		if v.Go {
			st.lastGo = now
		}
		v.Solo = v.Go && others == 0
		if v.Go && !v.Solo {
			v.Until = until
		}
		if !v.Go && st.active {
			v.Throttled = true
			v.Suppressed = s.suppressed(now, t)
		}
		out = append(out, v)
	}
	s.out = out
	return out
}

// overlapFactor scales what the hooks measured so that, over the last
// ~50 ms, the GPU is not billed for more time than passed. Turns are
// exclusive, but at each hand-over the previous holder's last bursts (bounded
// by the hook) still run; on a time-sliced GPU both tenants' events then
// include the other's slices, and both would be billed for the overlap. Hard
// caps are absolute, so that double count would keep hard tenants below their
// share. (Billing the holder the wall time of its turn instead was tried: it
// bills a holder whose process the OS did not run, which on a loaded node was
// worse.)
func (s *Scheduler) overlapFactor(ts []Tenant, dt float64) float64 {
	total := 0.0
	for i := range ts {
		if st := s.tenants[ts[i].Key]; st != nil && ts[i].BusyNs > st.lastBusy {
			total += float64(ts[i].BusyNs-st.lastBusy) / 1e9
		}
	}
	// A bill comes whole when its burst completes (a 10 ms kernel at once):
	// right after one the window may hold up to one bill more than the time
	// that passed, and that much is not overlap. (Without this slack every
	// bill of saturating 10 ms kernels was scaled by ~0.93, a hard tenant's
	// cap with it.)
	slack := 0.0
	for i := range ts {
		if st := s.tenants[ts[i].Key]; st != nil {
			slack = math.Max(slack, st.lump)
		}
	}
	decay := math.Exp(-dt / 0.05)
	s.winMeasured = s.winMeasured*decay + total
	s.winWall = s.winWall*decay + dt
	if s.winMeasured <= s.winWall+slack || s.winMeasured == 0 {
		return 1
	}
	return (s.winWall + slack) / s.winMeasured
}

// draining: the holder got its turn from a tenant whose work is still on the
// GPU, and must wait for it. A time-sliced GPU interleaves the two, and each
// tenant's events would then measure the other's slices too: both billed for
// the overlap, which at a hand-over every few ms is a large part of a small
// share (25/75 hard, 1 ms kernels: the 25 % tenant billed 1.5× what it ran).
// Waiting costs the GPU the time between the previous holder's last
// completion and the new holder's first launch (about a tick). Not waited
// for: a count at the level a tenant idle for long kept (left by a killed
// process), a tenant idle for idleAfter since its last demand stamp
// (killed or stopped: nothing it could still account, and its turn must pass
// on within a control period or so; a hook stamps its demand ahead by the
// work it has in flight, so that a thread away between launches — host work,
// a process the OS does not run — is waited for all the same), a
// lower priority than the holder's (the floor is what a higher
// priority gets, at once), or beyond two quanta (a tail of two 10 ms kernels
// drains within them; a hung one must not stall the GPU for everyone).
func (s *Scheduler) draining(now time.Time, ts []Tenant) bool {
	if s.holder == "" || now.Sub(s.handed) >= 2*s.Policy.Quantum {
		return false
	}
	var holder *Tenant
	for i := range ts {
		if ts[i].Key == s.holder {
			holder = &ts[i]
		}
	}
	if holder == nil {
		return false
	}
	for i := range ts {
		t := &ts[i]
		st := s.tenants[t.Key]
		if t.Key == s.holder || t.Inflight <= st.idleInflight || t.Priority > holder.Priority ||
			(!st.active && now.Sub(st.lastFresh) >= s.Policy.IdleAfter) {
			continue
		}
		return true
	}
	return false
}

// HandingOver reports whether the last Step held the new holder back while
// the previous holder's work drains. Until the next step sees it drained the
// GPU idles, so the loop steps again sooner than a tick then
// (Arbiter.HandOverPoll).
func (s *Scheduler) HandingOver() bool { return s.handingOver }

// IdleLong reports whether tenant key has been idle for longer than it
// keeps its credit (unknown tenants: true).
func (s *Scheduler) IdleLong(key string, now time.Time) bool {
	st := s.tenants[key]
	return st == nil || (!st.active && s.idleLong(now, st))
}

// idleLong: idle for longer than creditKept (or never active).
func (s *Scheduler) idleLong(now time.Time, st *tenantState) bool {
	return st.lastFresh.IsZero() || now.Sub(st.lastFresh) >= creditKept
}

// demanding: the tenant's hook launched or waited to within IdleAfter. A hook
// blocked on its own work in flight stamps when that wait should end, which
// may lie ahead; no stamp counts for more than a second ahead.
func (s *Scheduler) demanding(t *Tenant, mono uint64) bool {
	if t.DemandNs == 0 {
		return false
	}
	if t.DemandNs > mono {
		return t.DemandNs-mono <= uint64(time.Second)
	}
	return mono-t.DemandNs < uint64(s.Policy.IdleAfter)
}

// bank is the most tokens a capped tenant may hold: a quantum at its cap
// (no burst above its share after a pause), and while it wants the GPU at
// least one of its largest bills. A kernel longer than the quantum's tokens (a
// 10 ms kernel against a 10 % tenant's 1 ms) leaves it in debt, and what it
// accrued beyond the quantum's worth while it then waited for its turn was
// lost: the small tenants of hard 10/90 got 11 %, the large 89 %. A cap of
// 0 (suppressed at priority floor 0) banks nothing: a suppressed tenant that
// is eligible ranks first, and a kernel's worth kept there ran one more of
// the lower priority's long kernels ahead of the higher priority's first.
func (s *Scheduler) bank(st *tenantState, cap float64) float64 {
	b := cap * s.Policy.Quantum.Seconds()
	if st.active && cap > 0 {
		b += st.lump
	}
	return b
}

// due is t's virtual time counting what it holds unbilled (decisions only:
// its bills, when they come, are what it is charged).
func (s *Scheduler) due(t *Tenant) float64 {
	st := s.tenants[t.Key]
	if t.Share <= 0 {
		return st.vtime
	}
	return st.vtime + st.unbilled/t.Share
}

func (s *Scheduler) state(t *Tenant) *tenantState {
	st := s.tenants[t.Key]
	if st == nil {
		st = &tenantState{lastBusy: t.BusyNs}
		s.tenants[t.Key] = st
	}
	return st
}

// suppressed: a higher priority was active within the hold time.
func (s *Scheduler) suppressed(now time.Time, t *Tenant) bool {
	for q := 0; q < t.Priority && q < len(s.lastPrio); q++ {
		if !s.lastPrio[q].IsZero() && now.Sub(s.lastPrio[q]) < s.Policy.PriorityHold {
			return true
		}
	}
	return false
}

// capOf is the most of the GPU a tenant may take now (1 = uncapped).
func (s *Scheduler) capOf(now time.Time, t *Tenant) float64 {
	c := 1.0
	if t.Hard {
		c = t.Share
	}
	if s.suppressed(now, t) && s.Policy.PriorityFloor < c {
		c = s.Policy.PriorityFloor
	}
	return c
}

// eligible: active, and within its cap.
func (s *Scheduler) eligible(now time.Time, t *Tenant) bool {
	st := s.tenants[t.Key]
	if !st.active {
		return false
	}
	if s.capOf(now, t) < 1 {
		return st.tokens-st.unbilled > 0
	}
	return true
}

// rank orders candidates: a suppressed tenant that is eligible has floor
// time left and is served first (its tokens bound it), then priorities.
func (s *Scheduler) rank(now time.Time, t *Tenant) int {
	if s.suppressed(now, t) {
		return -1
	}
	return t.Priority
}

// pick hands the turn on when the holder's quantum is over, it went idle or
// ineligible, or a tenant of a higher priority than the holder's wants it.
func (s *Scheduler) pick(now time.Time, ts []Tenant) {
	var holder *Tenant
	cands := s.cands[:0]
	defer func() { s.cands = cands[:0] }()
	for i := range ts {
		t := &ts[i]
		if t.Key == s.holder {
			holder = t
		}
		if s.eligible(now, t) {
			cands = append(cands, t)
		}
	}
	if len(cands) == 0 {
		// Nobody wants the GPU: an uncapped holder keeps its turn while idle,
		// so that its next burst starts at once (a P0 tenant between
		// bursts); a capped or vanished one loses it.
		if holder == nil || s.capOf(now, holder) < 1 {
			s.holder = ""
		}
		return
	}
	slices.SortStableFunc(cands, func(a, b *Tenant) int {
		if ra, rb := s.rank(now, a), s.rank(now, b); ra != rb {
			return cmp.Compare(ra, rb)
		}
		return cmp.Compare(s.due(a), s.due(b))
	})
	best := cands[0]
	keep := holder != nil && s.eligible(now, holder) && s.rank(now, holder) <= s.rank(now, best) &&
		s.holds(now, holder, cands)
	if keep || (holder != nil && best.Key == holder.Key) {
		if !keep {
			s.since = now // a new quantum for the same holder
		}
		return
	}
	s.holder, s.since, s.handed = best.Key, now, now
}

// holds: the holder keeps its turn for at least a quarter quantum (a
// hand-over costs the GPU about a tick while the previous holder's work
// drains), at most a quantum, and in between until it is ahead of another
// candidate of its rank by a lead of virtual time. Equal wall-time turns
// served a 10 % tenant 10 ms out of every 100 (a 100 ms window saw 0, 10 or
// 20 %); ending a turn on the lead gives each tenant GPU time in proportion
// to its share within every few tens of ms, and whole-tick turns no longer
// pile up into a double turn now and then.
func (s *Scheduler) holds(now time.Time, h *Tenant, cands []*Tenant) bool {
	elapsed := now.Sub(s.since)
	if elapsed < s.turnQ/4 {
		return true
	}
	if elapsed >= s.turnQ {
		return false
	}
	most := 0.0
	for _, c := range cands {
		most = math.Max(most, c.Share)
	}
	if most <= 0 {
		return true
	}
	lead := s.turnQ.Seconds() / (4 * most) // ~a quarter quantum of the largest share
	hv := s.due(h)
	for _, c := range cands {
		if c.Key != h.Key && s.rank(now, c) == s.rank(now, h) && hv-s.due(c) >= lead {
			return false
		}
	}
	return true
}

// turnLeft is how long the holder's turn may go on if no further step came
// (the deadline its grant carries), plus TurnGrace: at most the rest of its
// quantum, no longer than a capped holder's tokens last, and no longer than
// it takes to get a lead of virtual time over another candidate of its rank
// (holds), at the GPU's whole time; never less than the quarter quantum a
// turn lasts at least. 0 when there is no deadline to give: TurnGrace 0, no
// holder, or no other candidate waiting (a late arbiter then delays nobody).
func (s *Scheduler) turnLeft(now time.Time, ts []Tenant) time.Duration {
	if s.Policy.TurnGrace <= 0 || s.holder == "" {
		return 0
	}
	var h *Tenant
	others := s.others[:0]
	defer func() { s.others = others[:0] }()
	most := 0.0
	for i := range ts {
		t := &ts[i]
		if t.Key == s.holder {
			h = t
		} else if s.eligible(now, t) {
			others = append(others, t)
		}
		if s.eligible(now, t) {
			most = math.Max(most, t.Share)
		}
	}
	if h == nil || len(others) == 0 {
		return 0
	}
	end := s.since.Add(s.turnQ)
	hs := s.tenants[h.Key]
	if s.capOf(now, h) < 1 {
		end = earliest(end, now.Add(seconds(hs.tokens-hs.unbilled)))
	}
	if most > 0 && h.Share > 0 {
		lead := s.turnQ.Seconds() / (4 * most)
		for _, c := range others {
			if s.rank(now, c) == s.rank(now, h) {
				// GPU time that brings the holder lead ahead of c: its
				// virtual time grows by 1/share per second it runs.
				gap := lead - (s.due(h) - s.due(c))
				end = earliest(end, now.Add(seconds(gap*h.Share)))
			}
		}
	}
	if least := s.since.Add(s.turnQ / 4); end.Before(least) {
		end = least
	}
	if end.Before(now) {
		end = now
	}
	return end.Sub(now) + s.Policy.TurnGrace
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Turns among three or more tenants with short bills (turnQuantum).
const (
	turnBills      = 4                    // a turn's quantum: this many of the largest bill
	minTurnQuantum = 4 * time.Millisecond // and never less
)

// turnQuantum is the quantum this step's turns are judged by (their least
// and longest length, the lead that ends one): the policy's, or, while three
// or more tenants are active, four of their largest recent bill, between
// minTurnQuantum and the policy's. A 100 ms window holds a few turns of each
// of three or four tenants, and one turn more or less of one of them is that
// window's error: with 50 us and 1 ms kernels, turns of 5-9 ms put 30/30/40
// and 10/20/30/40 3.6-6.1 pp off in the worst window, turns sized by the
// bills 3.0-5.0 pp (kernel simulation over 10 phases), for about one point
// of the GPU's time in the extra hand-overs. Two tenants' rotation has no
// such beat (10/90 and 25/75 stay within 3 pp), and long kernels keep the
// policy's quantum: a turn must hold a few of them.
func (s *Scheduler) turnQuantum(ts []Tenant) time.Duration {
	most, n := 0.0, 0
	for i := range ts {
		if st := s.tenants[ts[i].Key]; st != nil && st.active {
			most = math.Max(most, st.lump)
			n++
		}
	}
	if n < 3 {
		return s.Policy.Quantum
	}
	return min(max(seconds(turnBills*most), minTurnQuantum), s.Policy.Quantum)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Holder is the tenant holding the turn ("" none).
func (s *Scheduler) Holder() string { return s.holder }
