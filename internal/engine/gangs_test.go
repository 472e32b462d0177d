package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/priority"
)

func member(key, group string, min int, class priority.Class, n int, sub int) *Pod {
	p := gpus(key, class, n, sub)
	p.Gang = &gang.Spec{Name: group, MinMember: min}
	return p
}

func TestGangAllOrNothingAndTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.GangTimeout = time.Minute
	e := newEngine(t, cfg, gpuNode("n1", 2), gpuNode("n2", 2))
	// Three 1-GPU members of a group of min 3: nothing starts with two present.
	submit(t, e, member("g-a", "g", 3, priority.P2, 1, 0), member("g-b", "g", 3, priority.P2, 1, 0))
	e.Cycle(at(1))
	if got := placed(e); len(got) != 0 || e.Pending() != 2 {
		t.Fatalf("placed %v with 2 of 3 members", got)
	}
	submit(t, e, member("g-c", "g", 3, priority.P2, 1, 2))
	e.Cycle(at(3))
	if got := strings.Join(placed(e), " "); strings.Count(got, "@") != 3 {
		t.Fatalf("complete group: placed %q", got)
	}
	// A group that cannot fit whole takes nothing, and times out.
	submit(t, e, member("h-a", "h", 2, priority.P2, 1, 4), member("h-b", "h", 2, priority.P2, 1, 4))
	e.Cycle(at(5))
	if got := placed(e); len(got) != 0 {
		t.Fatalf("a group with room for one of two members placed %v", got)
	}
	if free := e.cluster.Nodes[0].FreeMilli() + e.cluster.Nodes[1].FreeMilli(); free != 1000 {
		t.Fatalf("the failed group holds capacity: %d milli free, want 1000", free)
	}
	e.Cycle(at(70))
	got := strings.Join(placed(e), " ")
	if got != "drop:h-a drop:h-b" && got != "drop:h-b drop:h-a" {
		t.Errorf("after the timeout: %q", got)
	}
	if e.Pending() != 0 {
		t.Errorf("pending %d", e.Pending())
	}
	// Bad groups are refused alone.
	if err := e.Submit(member("bad", "b", 0, priority.P2, 1, 80)); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("min-member 0: %v", err)
	}
}

// Preemption takes a running gang whole, or none of it.
func TestPreemptionTakesGangsWhole(t *testing.T) {
	cfg := baseConfig()
	cfg.Preemption, cfg.RequeuePreempted = true, false
	e := newEngine(t, cfg, gpuNode("n1", 2), gpuNode("n2", 2))
	for i, k := range []string{"g-a", "g-b"} {
		p := member(k, "g", 2, priority.P3, 1, 0)
		p.Request.Name = fmt.Sprint(k, i)
		submit(t, e, p)
	}
	submit(t, e, gpus("solo3", priority.P3, 1, 0), gpus("keep", priority.P1, 1, 0))
	e.Cycle(at(1))
	placed(e)
	// Two GPUs are wanted: the lone P3 pod is not enough, and evicting one
	// gang member alone would break the gang: the whole gang goes.
	submit(t, e, gpus("p0", priority.P0, 2, 100))
	e.Cycle(at(200))
	got := strings.Join(placed(e), " ")
	if !strings.Contains(got, "evict:g-a") || !strings.Contains(got, "evict:g-b") || !strings.Contains(got, "p0@") {
		t.Errorf("events %q: want both gang members evicted for p0", got)
	}
}
