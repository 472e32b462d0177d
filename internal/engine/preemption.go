package engine

import (
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// plan is one way to make room for a pod: evict victims on node.
type plan struct {
	node    int
	victims []*Running
	lost    time.Duration // run time the victims lose, summed
}

// better orders plans: fewest victims, then least work lost, then the
// lower node index (so the choice is deterministic).
func (a *plan) better(b *plan) bool {
	if len(a.victims) != len(b.victims) {
		return len(a.victims) < len(b.victims)
	}
	if a.lost != b.lost {
		return a.lost < b.lost
	}
	return a.node < b.node
}

// evictable reports whether running pod v may be evicted for p now: it is
// of a less urgent base class and preemptible (or the admission stage says
// p's queue may reclaim it), has run its minimum run time, and was not
// itself evicted within the cooldown.
func (e *Engine) evictable(p *Pod, v *Running, now time.Time) bool {
	byClass := priority.MayPreempt(p.Class, v.Pod.Class, v.Pod.Preemptible)
	byQuota := e.admit != nil && v.Pod.Preemptible && e.admit.Reclaimable(p, v.Pod)
	if !byClass && !byQuota {
		return false
	}
	if now.Sub(v.Started) < v.Pod.MinRun {
		return false
	}
	return v.Pod.preemptedAt.IsZero() || now.Sub(v.Pod.preemptedAt) >= e.cfg.Cooldown
}

// planPreemption finds the cheapest victim set on one node after which p
// fits, checked by placing p on a copy of the node with the victims gone;
// false when no node has one (then nobody is evicted: never preempt for a
// pod that would still not fit).
//
// A failed plan is remembered per (shape, class) until capacity is freed or
// time moves: pods started since cannot be victims yet unless their minimum
// run time is zero, and those are found at the next cycle.
func (e *Engine) planPreemption(p *Pod, now time.Time) (plan, bool) {
	if !e.anyLessUrgent(p.Class) && e.admit == nil {
		return plan{}, false
	}
	key := planKey{e.cluster.ShapeOf(&p.Request), p.Class}
	if st, ok := e.noPlan[key]; ok && st.gen == e.placer.gen && st.now.Equal(now) {
		return plan{}, false
	}
	if e.cfg.PreemptionSearches > 0 && e.searches >= e.cfg.PreemptionSearches {
		return plan{}, false
	}
	e.searches++
	pl, ok := e.searchPlan(p, now)
	if !ok {
		e.noPlan[key] = planStamp{e.placer.gen, now}
	}
	return pl, ok
}

type planKey struct {
	shape placement.Shape
	class priority.Class
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

func (e *Engine) searchPlan(p *Pod, now time.Time) (plan, bool) {
	need := int64(p.Request.NumGPU) * int64(p.Request.GPUMilli)
	var best plan
	found := false
	var scratch partition.Node
	var cands []*Running
	for i := range e.cluster.Nodes {
		if !e.cluster.Admits(i, &p.Request) || !e.mayMakeRoom(i, p, need) {
			continue
		}
		cands = cands[:0]
		for _, v := range e.onNode[i] {
			if e.evictable(p, v, now) {
				cands = append(cands, v)
			}
		}
		if len(cands) == 0 {
			continue
		}
		if pl, ok := e.planNode(i, p, cands, &scratch, now); ok && (!found || pl.better(&best)) {
			best, found = pl, true
		}
	}
	return best, found
}

// mayMakeRoom is the O(1) bound: the node's free GPU compute plus what
// preemptible pods of less urgent classes hold reaches the pod's need. With
// quota reclaim any class may be a victim, so the bound counts them all.
func (e *Engine) mayMakeRoom(i int, p *Pod, need int64) bool {
	room := e.cluster.Nodes[i].FreeMilli()
	first := p.Class + 1
	if e.admit != nil {
		first = priority.P0
	}
	for k := first; k <= priority.Lowest; k++ {
		room += e.preemptibleMilli[i][k]
	}
	return room >= need
}

// planNode finds a small victim set on node i, tested on a copy of the node:
// the cheapest single victim that suffices (priority.VictimOrder: lowest
// class, then youngest); else the better of two greedy sets — cheapest
// first, and largest grant first — each pruned of victims that turn out
// unnecessary. Exhaustive search is exponential; these three cover the
// cases that matter (one big victim, many small cheap ones).
func (e *Engine) planNode(i int, p *Pod, cands []*Running, scratch *partition.Node, now time.Time) (plan, bool) {
	n := &e.cluster.Nodes[i]
	if !roomAfter(n, cands, &p.Request.CPUMilli, &p.Request.MemMiB, int64(p.Request.NumGPU)*int64(p.Request.GPUMilli)) {
		return plan{}, false
	}
	slices.SortFunc(cands, func(a, b *Running) int {
		return priority.VictimOrder(priority.Candidate{Class: a.Pod.Class, Ran: now.Sub(a.Started)}, priority.Candidate{Class: b.Pod.Class, Ran: now.Sub(b.Started)})
	})
	for _, v := range cands {
		copyNode(n, scratch)
		if scratch.Release(v.Decision.Grant) == nil && e.cluster.FitsState(i, scratch, &p.Request) {
			return plan{node: i, victims: []*Running{v}, lost: now.Sub(v.Started)}, true
		}
	}
	best, ok := e.greedy(i, p, cands, scratch, now)
	bySize := slices.Clone(cands)
	slices.SortStableFunc(bySize, func(a, b *Running) int { return int(grantMilli(b) - grantMilli(a)) })
	if alt, altOK := e.greedy(i, p, bySize, scratch, now); altOK && (!ok || alt.better(&best)) {
		best, ok = alt, true
	}
	return best, ok
}

func grantMilli(r *Running) int64 {
	var m int64
	for _, s := range r.Decision.Grant.Shares {
		m += int64(s.Milli)
	}
	return m
}

// greedy evicts cands in order on a copy of node i until p fits, then puts
// back, last taken first, every victim p fits without.
func (e *Engine) greedy(i int, p *Pod, cands []*Running, scratch *partition.Node, now time.Time) (plan, bool) {
	copyNode(&e.cluster.Nodes[i], scratch)
	k := 0
	for ; k < len(cands) && !e.cluster.FitsState(i, scratch, &p.Request); k++ {
		if err := scratch.Release(cands[k].Decision.Grant); err != nil {
			return plan{}, false
		}
	}
	if !e.cluster.FitsState(i, scratch, &p.Request) {
		return plan{}, false
	}
	victims := slices.Clone(cands[:k])
	for j := len(victims) - 1; j >= 0; j-- {
		if scratch.Reserve(victims[j].Decision.Grant) != nil {
			continue
		}
		if e.cluster.FitsState(i, scratch, &p.Request) {
			victims = slices.Delete(victims, j, j+1)
		} else if err := scratch.Release(victims[j].Decision.Grant); err != nil {
			return plan{}, false
		}
	}
	pl := plan{node: i, victims: victims}
	for _, v := range victims {
		pl.lost += now.Sub(v.Started)
	}
	return pl, true
}

// roomAfter is a quick bound: could the node's free capacity plus every
// candidate's grant hold the pod's CPU, memory and total GPU share at all.
func roomAfter(n *partition.Node, cands []*Running, cpu, mem *int64, gpuMilli int64) bool {
	freeCPU, freeMem, freeGPU := n.FreeCPU, n.FreeMemMiB, n.FreeMilli()
	for _, v := range cands {
		g := &v.Decision.Grant
		freeCPU += g.CPU
		freeMem += g.MemMiB
		for _, s := range g.Shares {
			freeGPU += int64(s.Milli)
		}
	}
	return freeCPU >= *cpu && freeMem >= *mem && freeGPU >= gpuMilli
}

func copyNode(n *partition.Node, out *partition.Node) {
	gpus := append(out.GPUs[:0], n.GPUs...)
	*out = *n
	out.GPUs = gpus
}

// preempt carries a plan out: the victims are evicted (released and, when
// the engine requeues evicted pods, put back in the queue in their old
// place) and p is placed; the freed capacity is held for p by placing it
// in the same step, so no other pod can take it.
func (e *Engine) preempt(p *Pod, pl plan, now time.Time) bool {
	for _, v := range pl.victims {
		e.evict(v, p, now)
	}
	d, ok := e.sched.ScheduleOn(pl.node, &p.Request)
	if !ok {
		// The plan was checked on a copy of this node; failing here is a bug.
		panic("engine: preemption plan did not make room on node " + e.cluster.Nodes[pl.node].Name)
	}
	return e.start(p, d, now) == nil
}

func (e *Engine) evict(v *Running, by *Pod, now time.Time) {
	e.stop(v)
	v.Pod.preemptedAt = now
	v.Pod.Preemptions++
	e.emit(Event{Kind: Preempted, Time: now, Pod: v.Pod, Decision: v.Decision, By: by, Ran: now.Sub(v.Started)})
	if e.cfg.RequeuePreempted {
		_ = e.enqueue(v.Pod)
	}
}
