package engine

import (
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A class deadline counts from submission; a pod's own deadline wins.
func TestPodDefaultsDeadline(t *testing.T) {
	sc := schedv1.Default()
	sc.Priority.Deadline = map[schedv1.Class]schedv1.Duration{schedv1.P3: {Duration: 12 * time.Hour}}
	p := gpus("p", priority.P3, 1, 0)
	PodDefaults(sc, p)
	if !p.Deadline.Equal(at(0).Add(12 * time.Hour)) {
		t.Errorf("class deadline: %v, want submission + 12h", p.Deadline)
	}
	own := gpus("own", priority.P3, 1, 0)
	own.Deadline = at(60)
	PodDefaults(sc, own)
	if !own.Deadline.Equal(at(60)) {
		t.Errorf("own deadline %v overridden", own.Deadline)
	}
	p2 := gpus("p2", priority.P2, 1, 0)
	PodDefaults(sc, p2)
	if !p2.Deadline.IsZero() {
		t.Errorf("P2 has no configured deadline, got %v", p2.Deadline)
	}
}

// A pod past its deadline is dropped with the reason and the deadline on
// the event (the Kubernetes side reports it as DeadlineExceeded); a drop
// for another reason carries no deadline.
func TestDroppedAtDeadlineSaysWhichDeadline(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n1", 1))
	submit(t, e, gpus("runs", priority.P0, 1, 0))
	late := gpus("late", priority.P3, 1, 1)
	late.Deadline = at(60)
	submit(t, e, late)
	e.Cycle(at(10))
	e.Events()
	e.Cycle(at(61))
	var got []Event
	for _, ev := range e.Events() {
		if ev.Kind == Dropped {
			got = append(got, ev)
		}
	}
	if len(got) != 1 || got[0].Pod.Key != "late" || !got[0].Deadline.Equal(at(60)) || got[0].Reason != "deadline passed" {
		t.Fatalf("dropped events %+v, want late's, with deadline %v", got, at(60))
	}
}
