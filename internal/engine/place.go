package engine

import (
	"github.com/tessera-gpu/tessera/internal/placement"
)

// placer is the placement stage: it asks the placement engine where a pod
// fits, and remembers request shapes that fit nowhere until the cluster
// gains capacity. A pending queue holds many pods of few shapes (openb's
// 8,152 pods have a few hundred); once one of a shape fails, every other pod
// of that shape fails the same way until something is released, so the
// memo answers them in O(1) instead of asking the index again —
// what kube-scheduler gets from parking unschedulable pods until a cluster
// event.
type placer struct {
	sched *placement.Scheduler
	// gen counts capacity increases (releases, nodes joining); a shape
	// failed at gen fails until gen moves.
	gen    uint64
	failed map[placement.Shape]uint64
	// cordoned is each node's cordon as last seen: a node uncordoned is
	// capacity gained, like a node joining.
	cordoned []bool
}

func newPlacer(s *placement.Scheduler) *placer {
	p := &placer{sched: s, failed: map[placement.Shape]uint64{}, gen: 1}
	c := s.Cluster()
	var anyPod placement.Request // admitted by every node that is not cordoned
	p.cordoned = make([]bool, len(c.Nodes))
	for i := range p.cordoned {
		p.cordoned[i] = !c.Admits(i, &anyPod)
	}
	s.Cluster().Watch(func(i int) {
		for len(p.cordoned) <= i {
			p.cordoned = append(p.cordoned, false)
		}
		now := !c.Admits(i, &anyPod)
		if p.cordoned[i] && !now {
			p.gen++
		}
		p.cordoned[i] = now
	}, func(n int) {
		for len(p.cordoned) < n {
			p.cordoned = append(p.cordoned, false)
		}
		p.gen++
	})
	return p
}

// capacityFreed invalidates the memo.
func (p *placer) capacityFreed() { p.gen++ }

// find returns where r fits, or false. A shape already known not to fit at
// this generation is answered without the index.
func (p *placer) find(r *placement.Request) (placement.Decision, bool) {
	sh := p.sched.Cluster().ShapeOf(r)
	if p.failed[sh] == p.gen {
		return placement.Decision{}, false
	}
	d, ok := p.sched.Find(r)
	if !ok {
		p.failed[sh] = p.gen
	}
	return d, ok
}

// knownToFail reports whether r's shape failed at this generation.
func (p *placer) knownToFail(r *placement.Request) bool {
	return p.failed[p.sched.Cluster().ShapeOf(r)] == p.gen
}
