package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A gang whose member passes its deadline is dropped whole, every member
// with the reason, and what it held is released.
func TestGangDeadlineDropsWholeGroup(t *testing.T) {
	cfg := baseConfig()
	cfg.GangTimeout = time.Hour
	e := newEngine(t, cfg, gpuNode("n1", 2))
	a, b := member("g-a", "g", 3, priority.P2, 1, 0), member("g-b", "g", 3, priority.P2, 1, 0)
	b.Deadline = at(30)
	submit(t, e, a, b)
	e.Cycle(at(10))
	if got := placed(e); len(got) != 0 {
		t.Fatalf("incomplete group: %v", got)
	}
	if next := e.NextEvent(); !next.Equal(at(30)) {
		t.Errorf("NextEvent %v, want the member deadline %v", next, at(30))
	}
	e.Cycle(at(30))
	var dropped []string
	for _, ev := range e.Events() {
		if ev.Kind != Dropped {
			t.Errorf("unexpected event %v for %s", ev.Kind, ev.Pod.Key)
			continue
		}
		if !strings.Contains(ev.Reason, "g-b deadline") {
			t.Errorf("%s dropped with reason %q", ev.Pod.Key, ev.Reason)
		}
		dropped = append(dropped, ev.Pod.Key)
	}
	if strings.Join(dropped, " ") != "g-a g-b" || e.Pending() != 0 {
		t.Errorf("dropped %v, pending %d: want the whole group dropped", dropped, e.Pending())
	}
	// The group is gone: a member of the same name starts a new one.
	submit(t, e, member("g-a", "g", 1, priority.P2, 1, 31))
	e.Cycle(at(32))
	if got := placed(e); len(got) != 1 || got[0] != "g-a@n1" {
		t.Errorf("new group after the drop: %v", got)
	}
}

// A gang past a member's maximum wait is escalated (every member told) and
// is reserved before a less urgent-looking group that sorts first by name.
func TestGangMaxWaitEscalates(t *testing.T) {
	cfg := baseConfig() // EscalateTo P0, no ageing
	e := newEngine(t, cfg, gpuNode("n1", 2))
	// "a" (P2) and "z" (P3) both want the node's two GPUs.
	a1, a2 := member("a-1", "a", 2, priority.P2, 1, 0), member("a-2", "a", 2, priority.P2, 1, 0)
	z1, z2 := member("z-1", "z", 2, priority.P3, 1, 0), member("z-2", "z", 2, priority.P3, 1, 0)
	z1.MaxWait = 5 * time.Second
	// Fill the node so neither fits until 10 s.
	submit(t, e, gpus("blocker", priority.P0, 2, 0))
	e.Cycle(at(0))
	placed(e)
	submit(t, e, a1, a2, z1, z2)
	e.Cycle(at(6))
	var escalated []string
	for _, ev := range e.Events() {
		if ev.Kind == Escalated {
			escalated = append(escalated, ev.Pod.Key)
		}
	}
	if strings.Join(escalated, " ") != "z-1 z-2" {
		t.Fatalf("escalated %v, want both members of z", escalated)
	}
	if c := e.gangClass("z", at(6)); c != priority.P0 {
		t.Errorf("z competes in %v, want P0", c)
	}
	if err := e.Complete("blocker"); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(10))
	got := strings.Join(placed(e), " ")
	if !strings.Contains(got, "z-1@") || !strings.Contains(got, "z-2@") || strings.Contains(got, "a-") {
		t.Errorf("placed %q: want the escalated group z first", got)
	}
}

// Ageing applies to a gang as to a pod, bounded by the ceiling.
func TestGangAgesUpToCeiling(t *testing.T) {
	cfg := baseConfig()
	cfg.Queue.Ageing = priority.Ageing{Step: time.Minute, Ceiling: priority.P1}
	e := newEngine(t, cfg, gpuNode("n1", 1))
	submit(t, e, member("x", "x", 2, priority.P3, 1, 0))
	for _, c := range []struct {
		s    int
		want priority.Class
	}{{0, priority.P3}, {60, priority.P2}, {120, priority.P1}, {3600, priority.P1}} {
		if got := e.gangClass("x", at(c.s)); got != c.want {
			t.Errorf("after %d s: %v, want %v", c.s, got, c.want)
		}
	}
}
