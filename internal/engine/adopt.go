package engine

import (
	"fmt"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
)

// Adopt books a pod that already holds d, without scheduling it: a
// scheduler restarted in front of a cluster reads its bound pods back and
// adopts them, so it knows what they hold (quota included) and may preempt
// them. d is reserved on the cluster; a d that does not fit (two pods
// claiming the same share) is refused and nothing changes. No event is
// emitted: the pod did not start now.
func (e *Engine) Adopt(p *Pod, d placement.Decision, started time.Time) error {
	if err := e.adoptable(p); err != nil {
		return err
	}
	if err := e.cluster.Reserve(d); err != nil {
		return fmt.Errorf("adopt %s: %w", p.Key, err)
	}
	n := len(e.events)
	e.book(p, d, started)
	e.events = e.events[:n]
	return nil
}

func (e *Engine) adoptable(p *Pod) error {
	if err := p.Request.Validate(); err != nil {
		return fmt.Errorf("adopt %s: %w", p.Key, err)
	}
	if !p.Class.Valid() {
		return fmt.Errorf("adopt %s: class %v is not P0..P3", p.Key, p.Class)
	}
	if _, ok := e.running[p.Key]; ok {
		return fmt.Errorf("adopt %s: %w", p.Key, ErrKnown)
	}
	if _, ok := e.q.Get(p.Key); ok {
		return fmt.Errorf("adopt %s: %w", p.Key, ErrKnown)
	}
	return nil
}

// ClusterChanged tells the engine that capacity may have been freed in a
// way its books do not show (a pod ended on the Kubernetes side, a node
// was uncordoned): shapes that failed are tried again and pods in backoff
// compete at once.
func (e *Engine) ClusterChanged() {
	e.placer.capacityFreed()
	e.q.Activate()
}
