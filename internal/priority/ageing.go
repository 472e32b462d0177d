package priority

import (
	"fmt"
	"time"
)

// Ageing raises a waiting pod's effective class by one for every Step it has
// waited, never above Ceiling: a P3 pod on a busy cluster eventually
// competes with training (Ceiling P2) but never with inference unless the
// operator allows it. Ageing changes queue order only; preemption rights
// stay with the base class (see MayPreempt), so an old experiment cannot
// evict anything.
type Ageing struct {
	// Step is the wait that gains one class; 0 disables ageing.
	Step time.Duration
	// Ceiling is the most urgent class ageing can reach.
	Ceiling Class
}

// Validate rejects a negative step or a ceiling outside P0..P3.
func (a Ageing) Validate() error {
	if a.Step < 0 {
		return fmt.Errorf("ageing step %v is negative", a.Step)
	}
	if !a.Ceiling.Valid() {
		return fmt.Errorf("ageing ceiling %v is not P0..P3", a.Ceiling)
	}
	return nil
}

// Effective is the class a pod of class base competes in after waiting
// wait. It is monotone in wait: a longer wait never gives a less urgent
// class, which is what lets a FIFO per base class stay sorted by it.
func (a Ageing) Effective(base Class, wait time.Duration) Class {
	if a.Step <= 0 || wait <= 0 || !a.Ceiling.Above(base) {
		return base
	}
	steps := wait / a.Step
	if steps >= time.Duration(base-a.Ceiling) {
		return a.Ceiling
	}
	return base - Class(steps)
}
