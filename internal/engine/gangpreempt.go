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
	lost    float64                    // GPU-seconds the victims lose
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
	// Each member's plan is the cheapest given the earlier members' plans,
	// so the order matters: planning the large members first can spend an
	// expensive victim where a small member would have taken free room and
	// left cheaper victims for the large one. Every order is planned (and
	// rolled back), the cheapest total is carried out; the first order
	// whose plan the tracker verifies wins.
	orders := e.memberOrders(name)
	costs := make([]gangCost, len(orders))
	for i, order := range orders {
		plan, ok := e.planMembers(order, now)
		costs[i] = gangCost{ok: ok, victims: len(plan.victims), lost: plan.lost}
		e.rollback(plan, true)
	}
	idx := make([]int, len(orders))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return costs[a].compare(costs[b]) })
	for _, i := range idx {
		if !costs[i].ok {
			break
		}
		if got, ok := e.carryOut(name, orders[i], now); ok {
			return got, true
		}
	}
	return nil, false
}

// gangCost orders gang plans like single-pod plans: fewest victims, then
// least GPU work lost; plans that failed last.
type gangCost struct {
	ok      bool
	victims int
	lost    float64
}

func (a gangCost) compare(b gangCost) int {
	switch {
	case a.ok != b.ok:
		if a.ok {
			return -1
		}
		return 1
	case a.victims != b.victims:
		return cmp.Compare(a.victims, b.victims)
	}
	return cmp.Compare(a.lost, b.lost)
}

// planMembers plans the members in order on the live cluster; false (with
// what was applied so far, to roll back) when one has no plan.
func (e *Engine) planMembers(order []*Pod, now time.Time) (*gangPlan, bool) {
	plan := &gangPlan{victims: map[string]preempt.Running{}}
	for _, p := range order {
		if !e.planMember(p, plan, now) {
			return plan, false
		}
	}
	return plan, true
}

// carryOut plans the members in order again, verifies and evicts.
func (e *Engine) carryOut(name string, order []*Pod, now time.Time) (map[string]placement.Decision, bool) {
	plan, ok := e.planMembers(order, now)
	if !ok {
		e.rollback(plan, true)
		return nil, false
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
	cands := slices.DeleteFunc(slices.Clone(e.candidates(p, reclaim, now)), func(r preempt.Running) bool {
		_, gone := plan.victims[r.ID]
		return gone
	})
	pl, err := e.preemptor.Find(e.pending(p, reclaim), cands, now)
	if err != nil {
		return false
	}
	plan.lost += pl.LostGPUSeconds
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

// memberOrders are the orders a gang's members are planned in: largest
// first (the hardest to place plan first) and smallest first (small
// members take free room before the large ones spend victims on it); one
// when they are the same.
func (e *Engine) memberOrders(name string) [][]*Pod {
	first := e.membersLargestFirst(name)
	if len(first) == 0 {
		return nil
	}
	rev := slices.Clone(first)
	slices.Reverse(rev)
	need := func(p *Pod) int64 { return int64(p.Request.NumGPU) * int64(p.Request.GPUMilli) }
	if need(first[0]) == need(first[len(first)-1]) {
		return [][]*Pod{first}
	}
	return [][]*Pod{first, rev}
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
