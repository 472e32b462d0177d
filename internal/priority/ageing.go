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
	// JoinAtReach queues an aged pod in its effective class from the time
	// it reached that class (submission + classes gained × Step), behind
	// the pods of that class already waiting then — ageing as points: a P3
	// pod aged two classes competes like a P1 pod submitted two steps after
	// it. Without it an aged pod keeps its submission time and goes ahead
	// of every younger pod of the class it reached, so with the ceiling at
	// P1 an hour-old experiment would overtake all waiting inference.
	JoinAtReach bool
	// Skip[c] keeps pods of class c from ageing (the API's ageing.classes
	// lists the classes that do): with the ceiling at P1 an operator may
	// let experiments reach inference without letting training follow.
	Skip [NumClasses]bool
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
	if a.Step <= 0 || wait <= 0 || !a.Ceiling.Above(base) || (base.Valid() && a.Skip[base]) {
		return base
	}
	steps := wait / a.Step
	if steps >= time.Duration(base-a.Ceiling) {
		return a.Ceiling
	}
	return base - Class(steps)
}

// Reached is the time a pod of class base submitted at submitted entered
// class eff by ageing: submitted itself when it did not age (or when
// JoinAtReach is off), else submitted + (base − eff) × Step. The order of a
// class is (Reached, then submission): monotone in submission within one
// base class, so a FIFO per base class stays sorted by it.
func (a Ageing) Reached(base, eff Class, submitted time.Time) time.Time {
	if !a.JoinAtReach || a.Step <= 0 || !eff.Above(base) {
		return submitted
	}
	return submitted.Add(time.Duration(base-eff) * a.Step)
}
