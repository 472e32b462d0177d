package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A group that timed out short of members is dropped with the cause
// (gang.ErrTimedOut on the event); its members queued again with Resubmit
// assemble anew from then, so the group starts once its last member
// comes. Submit would restart the group's clock at the members' old
// submission: the group would time out at once, cycle after cycle.
func TestTimedOutGroupResubmittedAssemblesAnew(t *testing.T) {
	for _, resubmit := range []bool{true, false} {
		cfg := baseConfig()
		cfg.GangTimeout = time.Minute
		e := newEngine(t, cfg, gpuNode("n1", 4))
		a, b := member("x-a", "x", 3, priority.P2, 1, 0), member("x-b", "x", 3, priority.P2, 1, 0)
		submit(t, e, a, b)
		e.Cycle(at(61))
		var dropped []Event
		for _, ev := range e.Events() {
			if ev.Kind == Dropped {
				dropped = append(dropped, ev)
			}
		}
		if len(dropped) != 2 || !errors.Is(dropped[0].Err, gang.ErrTimedOut) || !strings.Contains(dropped[0].Reason, "2 of min-member 3") {
			t.Fatalf("timeout: dropped %+v, want both members with gang.ErrTimedOut", dropped)
		}
		for _, p := range []*Pod{a, b} {
			var err error
			if resubmit {
				err = e.Resubmit(p, at(120))
			} else {
				err = e.Submit(p)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		submit(t, e, member("x-c", "x", 3, priority.P2, 1, 125))
		e.Cycle(at(130))
		got := strings.Join(placed(e), " ")
		if started := strings.Count(got, "@") == 3; started != resubmit {
			t.Errorf("resubmit %v: %q; want the group started only when resubmitted at the retry time", resubmit, got)
		}
	}
}
