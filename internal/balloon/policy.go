package balloon

import (
	"errors"
	"fmt"
	"time"
)

// Policy is the tunable part of ballooning.
type Policy struct {
	// Window is how far back the observed peak that sets a floor looks.
	Window time.Duration
	// Settle is how long a container's usage must stay flat (not rise by more
	// than half its margin) before its cap may be lowered.
	Settle time.Duration
	// MarginFraction of the ceiling is added to the observed peak.
	MarginFraction float64
	// MinFloorBytes: no floor is lower.
	MinFloorBytes uint64
	// WaitMS is the hook's wait bound written into the limits file (0: the hook's
	// default, 3000 ms).
	WaitMS uint64
}

// DefaultPolicy: a 30-minute window, 10 minutes to settle, a 10 % margin and a
// 1 GiB minimum floor; the hook waits up to 3 s.
func DefaultPolicy() Policy {
	return Policy{Window: 30 * time.Minute, Settle: 10 * time.Minute, MarginFraction: 0.10, MinFloorBytes: 1 << 30, WaitMS: 3000}
}

// Validate names the first field out of range.
func (p Policy) Validate() error {
	switch {
	case p.Window <= 0:
		return errors.New("balloon policy: window must be positive")
	case p.Settle <= 0 || p.Settle > p.Window:
		return fmt.Errorf("balloon policy: settle %v must be in (0, window %v]", p.Settle, p.Window)
	case p.MarginFraction < 0 || p.MarginFraction >= 1:
		return fmt.Errorf("balloon policy: margin fraction %g must be in [0, 1)", p.MarginFraction)
	case p.WaitMS > 60000:
		return fmt.Errorf("balloon policy: wait %d ms exceeds the hook's 60000 ms limit", p.WaitMS)
	}
	return nil
}

// Margin is the headroom above the observed peak a ballooned container keeps.
func (p Policy) Margin(ceiling uint64) uint64 { return uint64(float64(ceiling) * p.MarginFraction) }

// Floor is the lowest cap for a container given ceiling whose usage peaked at peak
// over the window: peak + margin, never below the minimum, never above the ceiling.
func (p Policy) Floor(ceiling, peak uint64) uint64 {
	f := max(satAdd(peak, p.Margin(ceiling)), p.MinFloorBytes)
	return min(f, ceiling)
}

// ShouldReclaim says whether an owner whose cap is lowered to capBytes is close
// enough to it (within half its margin) that the node must start giving its memory
// back now, before an allocation has to wait.
func (p Policy) ShouldReclaim(ceiling, capBytes, usage uint64) bool {
	if capBytes >= ceiling {
		return false
	}
	return satAdd(usage, p.Margin(ceiling)/2) >= capBytes
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}
