package balloons

import (
	"cmp"
	"context"
	"slices"
	"time"

	apiv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/region"
)

// gpuPass is one GPU's share of a pass.
type gpuPass struct {
	c        *Controller
	ctx      context.Context
	now      time.Time
	physical uint64
	members  []*member
}

func (g *gpuPass) promised() uint64 {
	var n uint64
	for _, m := range g.members {
		n += m.cap
	}
	return n
}

func (g *gpuPass) room() uint64 {
	if p := g.promised(); p < g.physical {
		return g.physical - p
	}
	return 0
}

func (g *gpuPass) run() {
	g.clearStaleWaits()
	g.reclaimForOwners()
	g.inflateForBorrowers()
	g.deflateIntoRoom()
}

// isOwner: an opted-in container that is not itself a borrower.
func isOwner(m *member) bool { return m.info.OptedIn && !m.info.Borrower }

// needsBack says whether an inflated owner must get its memory back now.
func (g *gpuPass) needsBack(m *member) bool {
	if !m.bal.Inflated() {
		return false
	}
	if m.known && !isOwner(m) {
		return true // its pod no longer opts in: it must not stay lowered
	}
	if m.wait.Waiting() || g.c.Policy.ShouldReclaim(m.bal.CeilingBytes, m.cap, m.usage) {
		return true
	}
	return g.c.Policy.Floor(m.bal.CeilingBytes, m.hist.Peak(g.now, g.c.Policy.Window)) > m.cap
}

// orphanedAfter: a live waiter polls at least every 5 ms; a request with no poll for
// this long has none (they were killed mid-wait).
const orphanedAfter = 2 * time.Second

// clearStaleWaits drops requests no waiter has polled for: their waiters died. The
// start of the waits is no measure: a live waiter that started after a killed one
// keeps the killed one's wait_since_ns.
func (g *gpuPass) clearStaleWaits() {
	mono := g.c.mono()
	for _, m := range g.members {
		last := m.wait.LastSignNs()
		if !m.wait.Waiting() || last == 0 || mono <= last || time.Duration(mono-last) <= orphanedAfter {
			continue
		}
		cleared := false
		_ = region.Guard(m.entry.Region(), func() { cleared = m.region.ClearBalloonWait(m.dev, m.wait) })
		if cleared {
			m.wait = region.BalloonWait{}
		}
	}
}

// reclaimForOwners gives owners that need it their memory back: from free memory,
// then from what borrowers hold but do not use, then by evicting borrowers.
func (g *gpuPass) reclaimForOwners() {
	var needy []*member
	for _, m := range g.members {
		if g.needsBack(m) {
			needy = append(needy, m)
		}
	}
	slices.SortFunc(needy, func(a, b *member) int {
		if a.wait.Waiting() != b.wait.Waiting() {
			if a.wait.Waiting() {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.info.Priority, a.info.Priority)
	})
	for _, m := range needy {
		need := m.bal.CeilingBytes - m.cap
		if g.room() < need {
			g.shrinkBorrowers(need - g.room())
		}
		if g.room() >= need {
			g.deflate(m)
			continue
		}
		g.evictFor(m, need-g.room())
	}
}

// shrinkBorrowers lowers borrowers' caps to their usage plus a sliver, in reclaim
// order, until want bytes are free or none is left.
func (g *gpuPass) shrinkBorrowers(want uint64) {
	for _, b := range g.borrowers() {
		if want == 0 {
			return
		}
		keep := b.usage + b.cap/64 // a sliver above what it holds
		if keep >= b.cap {
			continue
		}
		give := min(b.cap-keep, want)
		if err := b.limits.SetMemLimit(b.uuid, b.cap-give); err != nil {
			continue
		}
		g.c.Log.Info("balloons: borrower's cap shrunk to what it uses", "borrower", b.owner.String(), "gpu", b.uuid, "bytes", give)
		b.cap -= give
		want -= give
	}
}

// borrowers on this GPU, first to be reclaimed first.
func (g *gpuPass) borrowers() []*member {
	var out []*member
	for _, m := range g.members {
		if m.info.BorrowerOn(m.uuid) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, byReclaimOrder)
	return out
}

// evictFor evicts borrowers, in reclaim order, until their caps cover want.
func (g *gpuPass) evictFor(owner *member, want uint64) {
	var covered uint64
	for _, b := range g.borrowers() {
		if covered >= want {
			return
		}
		pod := b.owner.Namespace + "/" + b.owner.Pod
		if at, ok := g.c.evicted[pod]; ok && g.now.Sub(at) < g.c.evictRetry() {
			covered += b.cap // leaving already
			continue
		}
		if g.c.Evictor == nil {
			return
		}
		if err := g.c.Evictor.Evict(g.ctx, b.owner); err != nil {
			g.c.Log.Warn("balloons: borrower not evicted", "borrower", pod, "for", owner.owner.String(), "err", err)
			continue
		}
		g.c.evicted[pod] = g.now
		covered += b.cap
		if g.c.Metrics != nil {
			g.c.Metrics.Evictions.Inc()
		}
		g.c.Log.Info("balloons: borrower evicted for its owner", "borrower", pod, "owner", owner.owner.String(), "gpu", owner.uuid)
	}
}

func (c *Controller) evictRetry() time.Duration {
	if c.EvictRetry > 0 {
		return c.EvictRetry
	}
	return 30 * time.Second
}

// inflateForBorrowers lowers settled owners' caps to their floors while the GPU is
// promised beyond its memory, largest reclaim first.
func (g *gpuPass) inflateForBorrowers() {
	over := g.promised() - min(g.promised(), g.physical)
	if over == 0 {
		return
	}
	for _, m := range g.members {
		if m.unsure {
			// It may be a borrower that outranks every owner here: lower nobody
			// for it until its pod is known (PodResources lags a container's start).
			return
		}
	}
	var top int32 = -1 << 31
	for _, b := range g.borrowers() {
		top = max(top, b.info.Priority)
	}
	type cand struct {
		m     *member
		floor uint64
	}
	var cands []cand
	for _, m := range g.members {
		if !isOwner(m) || m.bal.Inflated() || m.info.Priority < top || g.needsBack(m) {
			continue
		}
		p := g.c.Policy
		if !m.hist.Settled(g.now, p.Settle, p.Margin(m.cap)/2) {
			continue
		}
		f := p.Floor(m.cap, m.hist.Peak(g.now, p.Window))
		if f < m.cap && f >= m.usage {
			cands = append(cands, cand{m, f})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.m.cap-b.floor, a.m.cap-a.floor) })
	for _, cd := range cands {
		if over == 0 {
			return
		}
		m := cd.m
		if info, err := g.c.Pods.Confirm(g.ctx, m.owner); err != nil || !info.OptedIn || info.Borrower || info.Priority < top {
			g.c.Log.Info("balloons: owner not lowered: its pod's current opt-in or rank says no", "owner", m.owner.String(), "err", err)
			continue
		}
		// Lower only by what the GPU is over: memory taken from an owner is the
		// borrower's, none is left free for pods that would not give it back.
		target := max(cd.floor, m.cap-over)
		b := region.Balloon{CeilingBytes: m.cap, WaitMS: g.c.Policy.WaitMS, FloorBytes: cd.floor}
		if err := m.limits.SetBalloonCap(m.uuid, target, b); err != nil {
			g.c.Log.Warn("balloons: cap not lowered", "owner", m.owner.String(), "err", err)
			continue
		}
		over -= m.cap - target
		g.c.Log.Info("balloons: owner inflated", "owner", m.owner.String(), "gpu", m.uuid, "ceiling", m.cap, "cap", target, "floor", cd.floor)
		m.cap, m.bal = target, b
		if g.c.Metrics != nil {
			g.c.Metrics.Inflations.Inc()
		}
	}
}

// deflateIntoRoom raises lowered caps back where the GPU has the memory free.
func (g *gpuPass) deflateIntoRoom() {
	var inflated []*member
	for _, m := range g.members {
		if m.bal.Inflated() {
			inflated = append(inflated, m)
		}
	}
	slices.SortFunc(inflated, func(a, b *member) int { return cmp.Compare(b.info.Priority, a.info.Priority) })
	for _, m := range inflated {
		switch room := g.room(); {
		case room >= m.bal.CeilingBytes-m.cap:
			g.deflate(m)
		case room > 0:
			// Part of its memory is free: it goes back to the owner, not to whoever
			// is placed next.
			if err := m.limits.SetBalloonCap(m.uuid, m.cap+room, m.bal); err == nil {
				m.cap += room
			}
		}
	}
}

func (g *gpuPass) deflate(m *member) {
	ceiling := m.bal.CeilingBytes
	if err := m.limits.SetBalloonCap(m.uuid, ceiling, region.Balloon{WaitMS: m.bal.WaitMS}); err != nil {
		g.c.Log.Warn("balloons: cap not raised", "owner", m.owner.String(), "err", err)
		return
	}
	g.c.Log.Info("balloons: owner deflated", "owner", m.owner.String(), "gpu", m.uuid, "cap", ceiling, "waiting", m.wait.Waiting())
	m.cap, m.bal = ceiling, region.Balloon{}
	if g.c.Metrics != nil {
		g.c.Metrics.Deflations.Inc()
	}
}

// report is the GPU's published state and gauges.
func (g *gpuPass) report(uuid string) apiv1.GPUBalloon {
	var reclaimable, lent uint64
	owners := 0
	var lenders []apiv1.Lender
	p := g.c.Policy
	for _, m := range g.members {
		if !isOwner(m) {
			continue
		}
		owners++
		if m.bal.Inflated() {
			lent += m.bal.CeilingBytes - m.cap
			floor := m.bal.FloorBytes
			if floor == 0 || floor > m.cap {
				floor = m.cap
			}
			var want uint64
			if g.needsBack(m) {
				want = m.bal.CeilingBytes - m.cap
			}
			lenders = g.lender(lenders, m, m.bal.CeilingBytes, floor, m.bal.CeilingBytes-m.cap, want)
			continue
		}
		if m.hist.Settled(g.now, p.Settle, p.Margin(m.cap)/2) {
			if f := p.Floor(m.cap, m.hist.Peak(g.now, p.Window)); f < m.cap {
				reclaimable += m.cap - f
				lenders = g.lender(lenders, m, m.cap, f, 0, 0)
			}
		}
	}
	if g.c.Metrics != nil {
		g.c.Metrics.Reclaimable.WithLabelValues(uuid).Set(float64(reclaimable))
		g.c.Metrics.Lent.WithLabelValues(uuid).Set(float64(lent))
	}
	slices.SortFunc(lenders, func(a, b apiv1.Lender) int { return cmp.Compare(a.Owner, b.Owner) })
	return apiv1.GPUBalloon{UUID: uuid, ReclaimableMiB: reclaimable >> 20, LentMiB: lent >> 20, Owners: owners, Lenders: lenders}
}

// lender names owner m for the scheduler, when its pod is known: the floor and
// what it needs back rounded up, so the scheduler never lends what is not there.
func (g *gpuPass) lender(out []apiv1.Lender, m *member, ceiling, floor, lent, want uint64) []apiv1.Lender {
	if !m.known {
		return out
	}
	c := ceiling >> 20
	l := apiv1.Lender{Owner: m.owner.String(), CeilingMiB: c, FloorMiB: min(mibUp(floor), c), LentMiB: min(mibUp(lent), c)}
	l.WantsBackMiB = min(mibUp(want), l.LentMiB)
	return append(out, l)
}

func mibUp(b uint64) uint64 { return (b + 1<<20 - 1) >> 20 }
