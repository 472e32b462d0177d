package engine

import "time"

// Admission is the quota stage: whether a pod's queue (team) may start it
// now, and the books of what each queue holds. A nil Admission admits
// everything (the fifo and priority-only modes).
type Admission interface {
	// Admit returns nil when the pod fits its queue's guarantee, or may
	// borrow idle capacity; otherwise an error that says why (the pod
	// waits and is tried again).
	Admit(p *Pod, now time.Time) error
	// Charge books a placed pod to its queue; Uncharge gives it back when
	// the pod ends or is evicted.
	Charge(p *Pod, r *Running)
	Uncharge(p *Pod, r *Running)
	// Reclaimable reports whether running pod v may be evicted so that p's
	// queue gets its guarantee back: v's queue borrows beyond its own
	// guarantee and p's queue is below its guarantee with p.
	Reclaimable(p, v *Pod) bool
}
