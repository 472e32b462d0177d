package priority

import (
	"fmt"
	"strings"
)

// Class is a priority class. A smaller value is more urgent: P0 goes first.
type Class int8

// The four classes.
const (
	P0 Class = iota // realtime inference: must start now
	P1              // online inference
	P2              // training: can wait, hates being killed
	P3              // evaluation and experiments: fills the gaps
)

// NumClasses is the number of classes; Class values are 0..NumClasses-1.
const NumClasses = 4

// Lowest is the least urgent class.
const Lowest = P3

// Valid reports whether c is one of P0..P3.
func (c Class) Valid() bool { return c >= P0 && c <= Lowest }

func (c Class) String() string {
	if !c.Valid() {
		return fmt.Sprintf("Class(%d)", int8(c))
	}
	return fmt.Sprintf("P%d", int8(c))
}

// Above reports whether c is more urgent than o.
func (c Class) Above(o Class) bool { return c < o }

// ParseClass reads "P0".."P3" (case-insensitive).
func ParseClass(s string) (Class, error) {
	t := strings.TrimSpace(s)
	if len(t) == 2 && (t[0] == 'P' || t[0] == 'p') && t[1] >= '0' && t[1] < '0'+NumClasses {
		return Class(t[1] - '0'), nil
	}
	return 0, fmt.Errorf("priority class %q: want P0, P1, P2 or P3", s)
}
