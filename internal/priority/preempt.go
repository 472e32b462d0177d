package priority

import (
	"cmp"
	"time"
)

// MayPreempt reports whether a pod of class preemptor may evict a running
// pod of class victim: only a strictly more urgent class may, and only a
// victim that is preemptible. Classes here are base classes, never aged
// ones. (Quota reclaim — evicting a pod that borrows beyond its queue's
// guarantee — is decided by the quota model, not by class.)
func MayPreempt(preemptor, victim Class, victimPreemptible bool) bool {
	return victimPreemptible && preemptor.Above(victim)
}

// Candidate is what the preemption order knows of a running pod.
type Candidate struct {
	Class Class
	// Ran is how long the pod has run: the work lost when it is evicted
	// (since its last checkpoint, when it checkpoints).
	Ran time.Duration
}

// VictimOrder sorts candidates cheapest first: the least urgent class, then
// the least work lost (youngest). A victim set built by taking candidates in
// this order loses the least.
func VictimOrder(a, b Candidate) int {
	if c := cmp.Compare(b.Class, a.Class); c != 0 {
		return c // a less urgent class (larger value) first
	}
	return cmp.Compare(a.Ran, b.Ran)
}
