package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

func gangPreemptEngine(t *testing.T) *Engine {
	cfg := baseConfig()
	cfg.Preemption, cfg.RequeuePreempted = true, false
	return newEngine(t, cfg, gpuNode("n1", 2), gpuNode("n2", 2))
}

func freeMilli(e *Engine) int64 {
	var m int64
	for i := range e.cluster.Nodes {
		m += e.cluster.Nodes[i].FreeMilli()
	}
	return m
}

// A ready gang that fits nowhere preempts less urgent pods on as many nodes
// as its members need: the second member plans on what the first left.
func TestGangPreemptsAcrossNodes(t *testing.T) {
	e := gangPreemptEngine(t)
	submit(t, e, gpus("a", priority.P3, 1, 0), gpus("b", priority.P3, 1, 0), gpus("c", priority.P2, 1, 0), gpus("d", priority.P3, 1, 0))
	e.Cycle(at(1))
	placed(e)
	submit(t, e, member("g-1", "g", 2, priority.P1, 2, 100), member("g-2", "g", 2, priority.P1, 2, 100))
	e.Cycle(at(200))
	got := strings.Join(placed(e), " ")
	for _, want := range []string{"evict:a", "evict:b", "evict:c", "evict:d", "g-1@", "g-2@"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %q: want %s", got, want)
		}
	}
	if e.RunningCount() != 2 || freeMilli(e) != 0 {
		t.Errorf("running %d, free %d milli: want the gang alone on a full cluster", e.RunningCount(), freeMilli(e))
	}
}

// When not every member can get room, nobody is evicted and the cluster is
// as it was.
func TestGangPreemptionAllOrNobody(t *testing.T) {
	e := gangPreemptEngine(t)
	submit(t, e, gpus("low-1", priority.P3, 1, 0), gpus("low-2", priority.P3, 1, 0), gpus("hi-1", priority.P0, 1, 0), gpus("hi-2", priority.P0, 1, 0))
	e.Cycle(at(1))
	before := strings.Join(placed(e), " ")
	if !strings.Contains(before, "low-1@n1") && !strings.Contains(before, "low-1@n2") {
		t.Fatalf("setup: %q", before)
	}
	// Each member needs a whole node; only the P3 node can be emptied.
	submit(t, e, member("g-1", "g", 2, priority.P1, 2, 100), member("g-2", "g", 2, priority.P1, 2, 100))
	e.Cycle(at(200))
	if got := placed(e); len(got) != 0 {
		t.Errorf("events %v: want none (the second member has no plan)", got)
	}
	if e.RunningCount() != 4 || freeMilli(e) != 0 || e.Pending() != 2 {
		t.Errorf("running %d, free %d, pending %d: want the cluster untouched", e.RunningCount(), freeMilli(e), e.Pending())
	}
}

// The single-pod rules hold for a gang's victims: a pod inside its minimum
// run time is not taken, nor a member of a running gang alone.
func TestGangPreemptionKeepsRules(t *testing.T) {
	e := gangPreemptEngine(t)
	young := gpus("young", priority.P3, 2, 0)
	young.MinRun = time.Hour
	o1, o2 := member("o-1", "o", 2, priority.P3, 1, 0), member("o-2", "o", 2, priority.P3, 1, 0)
	o2.Preemptible = false // protects its whole gang
	submit(t, e, young, o1, o2)
	e.Cycle(at(1))
	placed(e)
	submit(t, e, member("g-1", "g", 2, priority.P1, 1, 100), member("g-2", "g", 2, priority.P1, 1, 100))
	e.Cycle(at(200))
	if got := placed(e); len(got) != 0 {
		t.Errorf("events %v: want no eviction (min run time, protected gang)", got)
	}
	if e.RunningCount() != 3 {
		t.Errorf("running %d, want 3", e.RunningCount())
	}
}
