package engine

import (
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/preempt"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// The preemption stage is glue around internal/preempt, which owns the
// rules (lower preemptible class or quota reclaim, minimum run time,
// cooldown, checkpoint-aware work lost, gangs whole or none) and verifies
// every plan on a copy of the node. The engine adds what a cycle needs:
// an O(1) per-node bound that hands preempt only the pods of nodes that
// could make room, a memo of shapes no plan helps, and a budget of searches
// per cycle.

// planPreemption asks internal/preempt for the cheapest victim set on one
// node after which p fits; false when there is none (then nobody is
// evicted: never preempt for a pod that would still not fit).
//
// A failed plan is remembered per (shape, class) until capacity is freed or
// time moves.
func (e *Engine) planPreemption(p *Pod, now time.Time) (*preempt.Plan, bool) {
	// Quota reclaim (any class) only for a pod within its queue's
	// guarantee; otherwise only less urgent classes can make room.
	reclaim := e.admit != nil && e.admit.WithinGuarantee(p)
	if !e.anyLessUrgent(p.Class) && !reclaim {
		return nil, false
	}
	key := planKey{e.cluster.ShapeOf(&p.Request), p.Class, ""}
	if e.admit != nil {
		key.team = p.Team // what a pod may reclaim depends on its queue
	}
	// A pod whose reservation is let go for the search sees more room than
	// the others of its key: their failures do not speak for it.
	if st, ok := e.noPlan[key]; ok && st.gen == e.placer.gen && st.now.Equal(now) && e.res.byPod[p.Key] == nil {
		return nil, false
	}
	if e.cfg.PreemptionSearches > 0 && e.searches >= e.cfg.PreemptionSearches {
		return nil, false
	}
	e.searches++
	pending, cands := e.pending(p, reclaim), e.candidates(p, reclaim, now)
	// Borrowers are reclaimed first: a plan that evicts only pods riding on
	// reclaimed memory beats any that evicts a pod holding its own.
	if b := e.borrowersAmong(cands); len(b) > 0 && len(b) < len(cands) {
		if pl, err := e.preemptor.Find(pending, b, now); err == nil && e.loansHold(pl) {
			return pl, true
		}
	}
	if reclaim {
		if pl, ok := e.reclaimByShare(p, pending, cands, now); ok {
			return pl, true
		}
	}
	pl, err := e.preemptor.Find(pending, cands, now)
	if err == nil && !e.loansHold(pl) {
		// The plan counted lent memory as freed: search again without the
		// borrowers whose owners take it back.
		pl, err = e.preemptor.Find(pending, e.withoutLenders(cands), now)
	}
	if err != nil {
		e.noPlan[key] = planStamp{e.placer.gen, now}
		return nil, false
	}
	return pl, true
}

// borrowersAmong is the candidates that are borrowers outside gangs (a gang is
// evicted whole or not at all, so its members stay with the full search).
func (e *Engine) borrowersAmong(cands []preempt.Running) []preempt.Running {
	if len(e.balloons.loans) == 0 {
		return nil
	}
	var out []preempt.Running
	for _, c := range cands {
		if c.Gang == "" && e.Borrower(c.ID) {
			out = append(out, c)
		}
	}
	return out
}

func (e *Engine) withoutLenders(cands []preempt.Running) []preempt.Running {
	var out []preempt.Running
	for _, c := range cands {
		if len(e.balloons.loans[c.ID]) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// loansHold says whether plan pl still makes room once the owners of the
// borrowers it evicts take back what they lent (the preemptor counts a victim's
// whole reservation as freed; part of a borrower's goes back to its owners). The
// cluster is left as it was.
func (e *Engine) loansHold(pl *preempt.Plan) bool {
	var lent []Loan
	for _, v := range pl.Victims {
		lent = append(lent, e.balloons.loans[v.ID]...)
	}
	if len(lent) == 0 {
		return true
	}
	var released []placement.Decision
	var raised []Loan
	ok := true
	for _, v := range pl.Victims {
		if r := e.running[v.ID]; r != nil && e.cluster.Release(r.Decision) == nil {
			released = append(released, r.Decision)
		}
	}
	for _, l := range lent {
		if e.running[l.Owner] == nil || e.swap(l.Lent, l.Original) != nil {
			ok = false
			break
		}
		raised = append(raised, l)
	}
	if ok {
		if ok = e.cluster.Reserve(pl.Decision) == nil; ok {
			_ = e.cluster.Release(pl.Decision)
		}
	}
	for i := len(raised) - 1; i >= 0; i-- {
		_ = e.swap(raised[i].Original, raised[i].Lent)
	}
	for _, d := range released {
		_ = e.cluster.Reserve(d)
	}
	return ok
}

type planKey struct {
	shape placement.Shape
	class priority.Class
	team  string
}

type planStamp struct {
	gen uint64
	now time.Time
}

// anyLessUrgent reports whether a preemptible pod of a class less urgent
// than c runs anywhere.
func (e *Engine) anyLessUrgent(c priority.Class) bool {
	for k := c + 1; k <= priority.Lowest; k++ {
		if e.preemptible[k] > 0 {
			return true
		}
	}
	return false
}

func (e *Engine) pending(p *Pod, withinGuarantee bool) preempt.Pending {
	pp := preempt.Pending{Request: p.Request, Class: int(p.Class), Queue: p.Team, WithinGuarantee: withinGuarantee}
	if e.admit != nil {
		pp.Cohort = e.admit.Cohort(p)
	}
	return pp
}

// candidates lists, as preempt sees them, the pods that may be victims of
// p — preemptible pods of a less urgent class, and with reclaim pods of
// other queues of p's cohort that borrow — on nodes where their GPU compute plus the
// free compute could reach p's need (the O(1) class bound first). Pods
// that opted out of preemption are left out (so they are not even
// reclaimed), except as members of a gang that has a candidate.
func (e *Engine) candidates(p *Pod, reclaim bool, now time.Time) []preempt.Running {
	need := int64(p.Request.NumGPU) * int64(p.Request.GPUMilli)
	cohort := ""
	if reclaim {
		cohort = e.admit.Cohort(p)
	}
	out := e.candBuf[:0]
	for i := range e.cluster.Nodes {
		if len(e.onNode[i]) == 0 || !e.cluster.Admits(i, &p.Request) || !e.mayMakeRoom(i, p, need, reclaim) {
			continue
		}
		room, first := e.cluster.Nodes[i].FreeMilli(), len(out)
		for _, r := range e.onNode[i] {
			if !r.Pod.Preemptible {
				continue
			}
			lower := p.Class.Above(r.Class)
			if lower || (reclaim && r.Pod.Team != p.Team && e.admit.Borrowing(r.Pod) && e.admit.Cohort(r.Pod) == cohort) {
				out = append(out, e.asVictim(r, now))
				room += grantMilli(r)
			}
		}
		if room < need {
			out = out[:first] // these victims could not make room here
		}
	}
	out = e.gangMembers(out, func(r *Running) preempt.Running { return e.asVictim(r, now) })
	e.candBuf = out
	return out
}

// asVictim is r as internal/preempt sees it at now. A gang member that
// opted out of preemption is still listed (its gang then protects the
// others).
func (e *Engine) asVictim(r *Running, now time.Time) preempt.Running {
	pr := preempt.Running{ID: r.Pod.Key, Decision: r.Decision, Class: int(r.Class), Queue: r.Pod.Team,
		Start: r.Started, LastPreempted: r.Pod.preemptedAt, MinRunTime: r.Pod.MinRun}
	if iv := r.Pod.CheckpointInterval; iv > 0 {
		pr.CheckpointInterval, pr.LastCheckpoint = iv, lastCheckpoint(r.Started, iv, now)
	}
	if !r.Pod.Preemptible {
		pr.MinRunTime = 1 << 62 // never: protected
	}
	if r.Pod.Gang != nil {
		pr.Gang = r.Pod.Gang.Name
	}
	if e.admit != nil {
		pr.Borrowing, pr.Cohort = e.admit.Borrowing(r.Pod), e.admit.Cohort(r.Pod)
	}
	return pr
}

// mayMakeRoom is the O(1) bound: the node's free GPU compute plus what
// preemptible pods of less urgent classes hold reaches the pod's need. With
// quota reclaim any class may be a victim, so the bound counts them all.
func (e *Engine) mayMakeRoom(i int, p *Pod, need int64, reclaim bool) bool {
	room := e.cluster.Nodes[i].FreeMilli()
	first := p.Class + 1
	if reclaim {
		first = priority.P0
	}
	for k := first; k <= priority.Lowest; k++ {
		room += e.preemptibleMilli[i][k]
	}
	return room >= need
}

func grantMilli(r *Running) int64 {
	var m int64
	for _, s := range r.Decision.Grant.Shares {
		m += int64(s.Milli)
	}
	return m
}

// preempt carries a plan out: the victims are evicted (released and, when
// the engine requeues evicted pods, put back in the queue in their old
// place) and p is placed where the plan verified it fits; the freed
// capacity is held for p by placing it in the same step, so no other pod
// can take it. (The Kubernetes side evicts with the victims' grace period
// and binds p when they are gone.)
func (e *Engine) preempt(p *Pod, pl *preempt.Plan, now time.Time) bool {
	for _, v := range pl.Victims {
		if r, ok := e.running[v.ID]; ok {
			e.evict(r, p, now)
		}
	}
	if err := e.start(p, pl.Decision, now); err != nil {
		// The plan was verified on the cluster; failing here is a bug.
		panic("engine: preemption plan did not make room: " + err.Error())
	}
	return true
}

func (e *Engine) evict(v *Running, by *Pod, now time.Time) {
	if err := e.cluster.Release(v.Decision); err != nil {
		panic("engine: a victim's placement cannot be released: " + err.Error())
	}
	e.evicted(v, by, now)
}

// evicted books the eviction of v, whose placement is already released.
func (e *Engine) evicted(v *Running, by *Pod, now time.Time) {
	e.unbook(v)
	v.Pod.preemptedAt = now
	v.Pod.Preemptions++
	e.emit(Event{Kind: Preempted, Time: now, Pod: v.Pod, Decision: v.Decision, By: by, Ran: now.Sub(v.Started)})
	if e.cfg.RequeuePreempted {
		if v.Pod.Gang != nil {
			_ = e.submitMember(v.Pod, now) // the gang assembles again
		} else {
			_ = e.enqueue(v.Pod)
		}
	}
}

// lastCheckpoint is when a pod started at start that checkpoints every
// interval last did, as the scheduler can tell: at start + k × interval,
// the latest such time not after now (zero before the first). The pod's
// own clock may drift from it by its start-up time; the estimate only
// orders victims, it protects nobody.
func lastCheckpoint(start time.Time, interval time.Duration, now time.Time) time.Time {
	ran := now.Sub(start)
	if ran < interval {
		return time.Time{}
	}
	return start.Add(ran - ran%interval)
}
