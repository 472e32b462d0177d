package engine

import (
	"testing"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A gang is admitted as a whole: each member alone fits the queue's quota,
// but together they exceed it, and a queue with no cohort cannot borrow
// the difference. Admitting members one at a time against the same books
// let the whole gang start above its guarantee.
func TestGangAdmittedAgainstItsWholeQuota(t *testing.T) {
	e := quotaEngine(t, []schedv1.QueueConfig{
		{Name: "solo", Nominal: schedv1.Resources{GPUMilli: 1000}},
	})
	for _, k := range []string{"g-a", "g-b"} {
		p := teamPod(k, "solo", priority.P2, 1, 0)
		p.Gang = &gang.Spec{Name: "g", MinMember: 2}
		submit(t, e, p)
	}
	e.Cycle(at(1))
	if got := placed(e); len(got) != 0 {
		t.Errorf("a 2-GPU gang of a queue with a 1-GPU quota and no cohort started: %v", got)
	}
	if e.Pending() != 2 {
		t.Errorf("pending %d, want the 2 members waiting", e.Pending())
	}
}
