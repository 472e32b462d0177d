package engine

import (
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
	return pairKey{e.cluster.ShapeOf(&p.Request), p.Class, p.Team}
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

// fail records that a pod of triple k failed every stage at gen.
func (x *exhaustion) fail(k pairKey, gen uint64) {
	if x.gen != gen {
		x.gen, x.count = gen, 0
	}
	if x.failed[k] != gen {
		x.failed[k] = gen
		x.count++
	}
}

// done reports whether every pending triple failed at gen.
func (x *exhaustion) done(gen uint64) bool {
	return x.gen == gen && x.count >= len(x.pending) && len(x.pending) > 0
}
