package engine

import (
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// exhaustion lets a cycle stop early. Pods of one (shape, class, team) are
// interchangeable to every stage: once one of them failed placement,
// preemption and admission, the others fail too until capacity is freed
// (the placer's generation moves). When every pending pod's triple has
// failed at this generation, the rest of the queue cannot place anything
// and the cycle ends without popping it: with 70,000 pods pending behind a
// full cluster a cycle costs the pods it places plus one try per triple,
// not a pop per pod.
type exhaustion struct {
	pending map[pairKey]int    // pending pods per triple
	failed  map[pairKey]uint64 // generation at which the triple failed
	count   int                // triples failed at gen
	gen     uint64
	// now: time changes what preemption may do (minimum run times and
	// cooldowns pass), so a triple failed at an earlier cycle is tried again.
	now time.Time
}

type pairKey struct {
	shape placement.Shape
	class priority.Class
	team  string
}

func newExhaustion() *exhaustion {
	return &exhaustion{pending: map[pairKey]int{}, failed: map[pairKey]uint64{}}
}

func (e *Engine) keyOf(p *Pod) pairKey {
	if p.group != "" {
		return pairKey{team: p.Key} // a group is like no other entry
	}
	k := pairKey{shape: e.cluster.ShapeOf(&p.Request), class: p.Class}
	if e.admit != nil {
		k.team = p.Team // teams matter only to admission
	}
	return k
}

// pendingAdd and pendingDel track the pods waiting per triple.
func (x *exhaustion) pendingAdd(k pairKey) { x.pending[k]++ }

func (x *exhaustion) pendingDel(k pairKey, gen uint64) {
	if x.pending[k]--; x.pending[k] > 0 {
		return
	}
	delete(x.pending, k)
	if x.gen == gen && x.failed[k] == gen {
		x.count--
	}
	delete(x.failed, k)
}

// fail records that a pod of triple k failed every stage at gen and now.
func (x *exhaustion) fail(k pairKey, gen uint64, now time.Time) {
	if x.gen != gen || !x.now.Equal(now) {
		x.gen, x.now, x.count = gen, now, 0
		clear(x.failed)
	}
	if x.failed[k] != gen {
		x.failed[k] = gen
		x.count++
	}
}

// done reports whether every pending triple failed at gen and now.
func (x *exhaustion) done(gen uint64, now time.Time) bool {
	return x.gen == gen && x.now.Equal(now) && x.count >= len(x.pending) && len(x.pending) > 0
}
