package engine

import (
	"fmt"
	"strings"
	"testing"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// Leftover capacity goes to the borrowing queue with the lowest share
// first, whatever the submission order: a borrows 2 GPUs of the cohort's
// 6 (share 1/3), b none; of two free GPUs, b's later pods get both (b's
// share is 1/6 after the first, still below a's).
func TestLeftoverGoesToTheLowestShareFirst(t *testing.T) {
	e := quotaEngine(t, []schedv1.QueueConfig{
		{Name: "a", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 1000}},
		{Name: "b", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 1000}},
		{Name: "owner", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 4000}}, // idle: lends
	})
	for i := 0; i < 3; i++ {
		submit(t, e, teamPod(fmt.Sprint("a", i), "a", priority.P2, 1, i))
	}
	submit(t, e, teamPod("b0", "b", priority.P2, 1, 3))
	e.Cycle(at(10))
	if got := placed(e); len(got) != 4 {
		t.Fatalf("set-up placed %v", got)
	}
	submit(t, e, teamPod("a3", "a", priority.P2, 1, 20), teamPod("a4", "a", priority.P2, 1, 21),
		teamPod("b1", "b", priority.P2, 1, 22), teamPod("b2", "b", priority.P2, 1, 23))
	e.Cycle(at(30))
	got := strings.Join(placed(e), " ")
	if !strings.Contains(got, "b1@") || !strings.Contains(got, "b2@") || strings.Contains(got, "a3@") || strings.Contains(got, "a4@") {
		t.Errorf("placed %q; want b1 and b2 (b's share 0 then 1/6, below a's 1/3), not a3 or a4", got)
	}
	// A more urgent class still goes first: a P1 borrower of a beats b's P2.
	e.Complete("b1")
	e.Complete("b2")
	e.Events()
	submit(t, e, teamPod("a5", "a", priority.P1, 1, 40), teamPod("b3", "b", priority.P2, 1, 39))
	e.Cycle(at(50))
	got = strings.Join(placed(e), " ")
	if !strings.Contains(got, "a5@") {
		t.Errorf("placed %q; want the P1 borrower a5 before b's P2 pods", got)
	}
}

// A queue taking its guarantee back reclaims from the borrower with the
// highest share first, even when another borrower's pods are younger
// (internal/preempt alone would take the youngest: the least work lost).
func TestReclaimTakesTheHighestShareFirst(t *testing.T) {
	e := quotaEngine(t, []schedv1.QueueConfig{
		{Name: "hi", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 1000}},
		{Name: "lo", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 1000}},
		{Name: "owner", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 4000}},
	})
	for i := 0; i < 4; i++ { // hi: 1 own + 3 borrowed, share 3/6
		submit(t, e, teamPod(fmt.Sprint("hi", i), "hi", priority.P2, 1, i))
	}
	e.Cycle(at(10))
	for i := 0; i < 2; i++ { // lo: 1 own + 1 borrowed, share 1/6, started later
		submit(t, e, teamPod(fmt.Sprint("lo", i), "lo", priority.P2, 1, 20+i))
	}
	e.Cycle(at(30))
	if got := placed(e); len(got) != 6 {
		t.Fatalf("set-up placed %v", got)
	}
	submit(t, e, teamPod("own", "owner", priority.P3, 1, 40))
	e.Cycle(at(50))
	got := strings.Join(placed(e), " ")
	if !strings.Contains(got, "evict:hi") || strings.Contains(got, "evict:lo") || !strings.Contains(got, "own@") {
		t.Errorf("reclaim %q; want a pod of hi (share 1/2) evicted, none of lo (1/6)", got)
	}
}
