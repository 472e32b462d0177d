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
	// Borrowing reports whether running pod v holds capacity its queue
	// borrowed beyond its guarantee; WithinGuarantee whether pending pod p
	// fits its queue's guarantee. Such a p may reclaim such a v of another
	// queue whatever their classes (internal/preempt decides).
	Borrowing(v *Pod) bool
	WithinGuarantee(p *Pod) bool
	// Cohort is the cohort of p's queue: capacity is only reclaimed within
	// one cohort.
	Cohort(p *Pod) string
}

// FairSharing is what an Admission with cohorts adds so that leftover
// capacity and reclaim follow each queue's dominant share of what it
// borrows (docs/scheduler.md, Fair sharing). QuotaAdmission implements it;
// without it the engine serves borrowers in queue order.
type FairSharing interface {
	// Borrows reports whether pending pod p would start on capacity its
	// queue borrows (above its nominal quota).
	Borrows(p *Pod) bool
	// Queue is the queue p is charged to (unknown names resolve to the
	// default queue).
	Queue(p *Pod) string
	// Share is a queue's dominant (weighted) share of what it borrows; 0
	// within its nominal quota.
	Share(queue string) float64
	// Rank is the queue's place in the configuration: ties of share go
	// to the queue configured first.
	Rank(queue string) int
}
