package engine

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/preempt"
)

// Preemption for a gang. internal/preempt plans victims for one pod on one
// node; a ready gang that cannot be reserved is planned member by member
// (largest first) on the live cluster, each member's plan applied before
// the next is planned — its victims released, the member's verified
// decision taken — so later members see the room earlier ones freed and
// the places they took. Victims follow the single-pod rules (a less urgent
// preemptible class, or borrowers for a member within its guarantee;
// minimum run time; cooldown; another gang whole or not at all). When a
// member finds no plan, or the whole gang then cannot be reserved by
// internal/gang (locality included) with the victims gone, everything is
// put back and nobody is evicted.

// gangPlan is what planning for a gang changed on the cluster, so it can
// be rolled back.
type gangPlan struct {
	victims map[string]preempt.Running // by pod key
	taken   []placement.Decision       // the members' planned decisions
}

// preemptForGang tries to make room for the ready group name by
// preemption. On success the victims are evicted and the group holds its
// reservation (the tracker's decisions are returned); otherwise the
// cluster is as it was.
func (e *Engine) preemptForGang(name string, now time.Time) (map[string]placement.Decision, bool) {
	if e.cfg.PreemptionSearches > 0 && e.searches >= e.cfg.PreemptionSearches {
		return nil, false
	}
	e.searches++
	plan := &gangPlan{victims: map[string]preempt.Running{}}
	for _, p := range e.membersLargestFirst(name) {
		if !e.planMember(p, plan, now) {
			e.rollback(plan, true)
			return nil, false
		}
	}
	// Verify: the victims stay released, the members' planned places are
	// given back and the tracker reserves the whole gang its own way.
	e.releaseAll(plan.taken)
	plan.taken = nil
	got, err := e.gangs.tracker.Reserve(name)
	if err != nil { // all or nothing: Reserve kept nothing
		e.rollback(plan, false)
		return nil, false
	}
	by := e.gangs.pending[name][firstKey(got)]
	for _, key := range sortedVictims(plan.victims) {
		if r, ok := e.running[key]; ok {
			e.evicted(r, by, now) // released while planning
		}
	}
	return got, true
}

// planMember takes a place for one member: free room if there is some
// (earlier members' victims may have left it), else a plan found and
// applied with the victims chosen so far out of the candidates (they are
// already gone).
func (e *Engine) planMember(p *Pod, plan *gangPlan, now time.Time) bool {
	if d, ok := e.sched.Find(&p.Request); ok && e.cluster.Reserve(d) == nil {
		plan.taken = append(plan.taken, d) // room left by earlier victims
		return true
	}
	reclaim := e.admit != nil && e.admit.WithinGuarantee(p)
	if !e.anyLessUrgent(p.Class) && !reclaim {
		return false
	}
	cands := slices.DeleteFunc(slices.Clone(e.candidates(p, reclaim)), func(r preempt.Running) bool {
		_, gone := plan.victims[r.ID]
		return gone
	})
	pl, err := e.preemptor.Find(e.pending(p, reclaim), cands, now)
	if err != nil {
		return false
	}
	for _, v := range pl.Victims {
		if err := e.cluster.Release(v.Decision); err != nil {
			panic(fmt.Sprintf("engine: gang preemption: victim %s cannot be released: %v", v.ID, err))
		}
		plan.victims[v.ID] = v
	}
	if err := e.cluster.Reserve(pl.Decision); err != nil {
		panic("engine: gang preemption: a verified plan did not make room: " + err.Error())
	}
	plan.taken = append(plan.taken, pl.Decision)
	return true
}

// rollback gives back what the members took (when they still hold it) and
// reserves the victims' placements again: the cluster is as before.
func (e *Engine) rollback(plan *gangPlan, membersHold bool) {
	if membersHold {
		e.releaseAll(plan.taken)
	}
	for _, key := range sortedVictims(plan.victims) {
		if err := e.cluster.Reserve(plan.victims[key].Decision); err != nil {
			panic(fmt.Sprintf("engine: gang preemption rollback: victim %s: %v", key, err))
		}
	}
}

func (e *Engine) releaseAll(ds []placement.Decision) {
	for _, d := range ds {
		if err := e.cluster.Release(d); err != nil {
			panic("engine: gang preemption: a planned place cannot be released: " + err.Error())
		}
	}
}

// membersLargestFirst lists the group's pending members by GPU compute,
// largest first (the hardest to place plans first), then by key.
func (e *Engine) membersLargestFirst(name string) []*Pod {
	var out []*Pod
	for _, key := range sortedKeys(e.gangs.pending[name]) {
		out = append(out, e.gangs.pending[name][key])
	}
	need := func(p *Pod) int64 { return int64(p.Request.NumGPU) * int64(p.Request.GPUMilli) }
	slices.SortStableFunc(out, func(a, b *Pod) int { return cmp.Compare(need(b), need(a)) })
	return out
}

func sortedVictims(m map[string]preempt.Running) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func firstKey(m map[string]placement.Decision) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[0]
}
