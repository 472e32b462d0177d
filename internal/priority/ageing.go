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
	// Join says where an aged pod stands among the pods of the class it
	// reached (JoinAtSubmission, the zero value, JoinAtReach or
	// JoinAhead).
	Join Join
	// Skip[c] keeps pods of class c from ageing (the API's ageing.classes
	// lists the classes that do): with the ceiling at P1 an operator may
	// let experiments reach inference without letting training follow.
	Skip [NumClasses]bool
}

// Join is where an aged pod queues in the class it reached.
type Join int

const (
	// JoinAtSubmission: an aged pod keeps its submission time and goes
	// ahead of every younger pod of the class it reached — with the
	// ceiling at P1 an hour-old experiment overtakes all waiting
	// inference submitted after it, but a backlog of that class
	// submitted before it stays ahead.
	JoinAtSubmission Join = iota
	// JoinAtReach queues an aged pod in its effective class from the time
	// it reached that class (submission + classes gained × Step), behind
	// the pods of that class already waiting then — ageing as points: a P3
	// pod aged two classes competes like a P1 pod submitted two steps after
	// it.
	JoinAtReach
	// JoinAhead puts an aged pod ahead of every pod that did not age into
	// the class it reached (the head of the class), aged pods among
	// themselves by submission: with the ceiling at P2 an old experiment
	// overtakes the whole training backlog — never inference — which is
	// the class it competes with for what inference leaves.
	JoinAhead
)

// String names the join as the API spells it.
func (j Join) String() string {
	switch j {
	case JoinAtSubmission:
		return "submission"
	case JoinAtReach:
		return "reach"
	case JoinAhead:
		return "ahead"
	}
	return fmt.Sprintf("Join(%d)", int(j))
}

// ParseJoin reads the API's spelling of a Join.
func ParseJoin(s string) (Join, error) {
	for j := JoinAtSubmission; j <= JoinAhead; j++ {
		if s == j.String() {
			return j, nil
		}
	}
	return 0, fmt.Errorf("join %q: want submission, reach or ahead", s)
}

// Aged reports whether a pod of class base competes in eff by ageing.
func Aged(base, eff Class) bool { return eff.Above(base) }

// Validate rejects a negative step or a ceiling outside P0..P3.
func (a Ageing) Validate() error {
	if a.Step < 0 {
		return fmt.Errorf("ageing step %v is negative", a.Step)
	}
	if !a.Ceiling.Valid() {
		return fmt.Errorf("ageing ceiling %v is not P0..P3", a.Ceiling)
	}
	if a.Join < JoinAtSubmission || a.Join > JoinAhead {
		return fmt.Errorf("ageing join %v: want submission, reach or ahead", a.Join)
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
// Join is not JoinAtReach), else submitted + (base − eff) × Step. The order
// of a class under JoinAtReach is (Reached, then submission): monotone in
// submission within one base class, so a FIFO per base class stays sorted
// by it.
func (a Ageing) Reached(base, eff Class, submitted time.Time) time.Time {
	if a.Join != JoinAtReach || a.Step <= 0 || !eff.Above(base) {
		return submitted
	}
	return submitted.Add(time.Duration(base-eff) * a.Step)
}
