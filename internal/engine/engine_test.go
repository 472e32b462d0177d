package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func gpuNode(name string, gpus int) partition.NodeSpec {
	return partition.NodeSpec{Name: name, Model: "A100", CPU: 64000, MemMiB: 1 << 20, GPUs: gpus, GPUMemMiB: 40960}
}

func newEngine(t testing.TB, cfg Config, nodes ...partition.NodeSpec) *Engine {
	t.Helper()
	c, err := placement.NewCluster(nodes)
	if err != nil {
		t.Fatal(err)
	}
	p, err := placement.NewPolicy("binpack", c, placement.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, placement.NewScheduler(c, p, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// baseConfig: no ageing, no backoff (every cycle retries every pod).
func baseConfig() Config {
	return Config{Queue: queue.Config{EscalateTo: priority.P0}, Cooldown: time.Hour, RequeuePreempted: true}
}

func gpus(key string, class priority.Class, n int, sub int) *Pod {
	return &Pod{Key: key, Class: class, Submitted: at(sub), Preemptible: true,
		Request: placement.Request{Name: key, CPUMilli: 1000, MemMiB: 1024, NumGPU: n, GPUMilli: 1000}}
}

func placed(e *Engine) []string {
	var out []string
	for _, ev := range e.Events() {
		switch ev.Kind {
		case Placed:
			out = append(out, ev.Pod.Key+"@"+ev.Decision.NodeName)
		case Preempted:
			out = append(out, "evict:"+ev.Pod.Key)
		case Dropped:
			out = append(out, "drop:"+ev.Pod.Key)
		}
	}
	return out
}

func submit(t *testing.T, e *Engine, pods ...*Pod) {
	t.Helper()
	for _, p := range pods {
		if err := e.Submit(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCycleOrderAndBackfill(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n1", 2))
	// The P0 pod needs 4 GPUs and fits nowhere: the pods behind it still run
	// (backfill), most urgent first, FIFO within a class.
	submit(t, e, gpus("big", priority.P0, 4, 0), gpus("p3", priority.P3, 1, 1), gpus("p1", priority.P1, 1, 2), gpus("p1b", priority.P1, 1, 3))
	e.Cycle(at(10))
	if got := strings.Join(placed(e), " "); got != "p1@n1 p1b@n1" {
		t.Errorf("placed %q", got)
	}
	if e.Pending() != 2 {
		t.Errorf("pending %d, want big and p3", e.Pending())
	}
}

// A big pod behind a stream of small ones: with backfill alone the small
// pods take every GPU that frees and the big pod never runs; with a
// reservation after 30 s it runs once the pods on its node end.
func TestReservationStopsStarvation(t *testing.T) {
	for _, c := range []struct {
		reserveAfter time.Duration
		wantBig      bool
	}{{0, false}, {30 * time.Second, true}} {
		cfg := baseConfig()
		cfg.ReserveAfter, cfg.MaxReservations = c.reserveAfter, 1
		e := newEngine(t, cfg, gpuNode("n1", 4), gpuNode("n2", 1))
		submit(t, e, gpus("s0", priority.P2, 1, 0), gpus("s1", priority.P2, 1, 0), gpus("s2", priority.P2, 1, 0), gpus("s3", priority.P2, 1, 0), gpus("s4", priority.P2, 1, 0))
		e.Cycle(at(0))
		placed(e)
		submit(t, e, gpus("big", priority.P2, 4, 1))
		bigRan, onN2 := false, 0
		running := []string{"s0", "s1", "s2", "s3", "s4"}
		for round := 0; round < 20 && !bigRan; round++ {
			now := at(10 * (round + 1))
			// The oldest small pod ends and a new one arrives each round.
			if err := e.Complete(running[0]); err != nil {
				t.Fatal(err)
			}
			running = running[1:]
			key := fmt.Sprintf("new%d", round)
			submit(t, e, gpus(key, priority.P2, 1, 10*(round+1)))
			e.Cycle(now)
			for _, ev := range e.Events() {
				if ev.Kind == Placed {
					if ev.Pod.Key == "big" {
						bigRan = true
					} else {
						running = append(running, ev.Pod.Key)
						if ev.Decision.NodeName == "n2" {
							onN2++
						}
					}
				}
			}
		}
		if bigRan != c.wantBig {
			t.Errorf("reserveAfter %v: big ran = %v, want %v", c.reserveAfter, bigRan, c.wantBig)
		}
		// n2 kept serving small pods while the big pod waited: backfill
		// goes on beside a reservation.
		if onN2 == 0 {
			t.Errorf("reserveAfter %v: no small pod ran on n2", c.reserveAfter)
		}
	}
}

// Backfill may use the part of the reserved node the waiting pod cannot.
func TestBackfillUsesWhatTheReservationCannot(t *testing.T) {
	cfg := baseConfig()
	cfg.ReserveAfter, cfg.MaxReservations = time.Second, 1
	e := newEngine(t, cfg, gpuNode("n1", 4))
	submit(t, e, gpus("a", priority.P2, 1, 0), gpus("b", priority.P2, 1, 0))
	e.Cycle(at(0))
	submit(t, e, gpus("three", priority.P1, 3, 1))
	e.Cycle(at(5)) // three waits 4 s: reservation on n1 holds the 2 free GPUs
	if res := e.Reservations(); res["three"] != 0 || len(res) != 1 {
		t.Fatalf("reservations %v", res)
	}
	placed(e)
	if err := e.Complete("a"); err != nil {
		t.Fatal(err)
	}
	// Now 3 GPUs are free and held for "three": it is placed; "late" gets the 4th... only after b ends.
	submit(t, e, gpus("late", priority.P3, 1, 6))
	e.Cycle(at(7))
	if got := strings.Join(placed(e), " "); got != "three@n1" {
		t.Errorf("placed %q, want the reserved pod first", got)
	}
	if err := e.Complete("b"); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(8))
	if got := strings.Join(placed(e), " "); got != "late@n1" {
		t.Errorf("placed %q", got)
	}
	if len(e.Reservations()) != 0 {
		t.Error("the reservation outlived its pod's placement")
	}
}

func TestPreemptionRules(t *testing.T) {
	type victim struct {
		key         string
		class       priority.Class
		gpus        int
		started     int
		preemptible bool
		minRun      time.Duration
		evictedAt   int // >0: was evicted then (cooldown 1 h)
	}
	cases := []struct {
		name      string
		running   []victim
		preemptor *Pod
		now       int
		want      string // events, in order
	}{
		{"evicts a lower class", []victim{{"v", priority.P3, 2, 0, true, 0, 0}}, gpus("p", priority.P1, 2, 100), 100, "evict:v p@n1"},
		{"never an equal class", []victim{{"v", priority.P1, 2, 0, true, 0, 0}}, gpus("p", priority.P1, 2, 100), 100, ""},
		{"never a non-preemptible pod", []victim{{"v", priority.P3, 2, 0, false, 0, 0}}, gpus("p", priority.P0, 2, 100), 100, ""},
		{"never inside the minimum run time", []victim{{"v", priority.P3, 2, 50, true, time.Minute, 0}}, gpus("p", priority.P0, 2, 100), 100, ""},
		{"after the minimum run time", []victim{{"v", priority.P3, 2, 30, true, time.Minute, 0}}, gpus("p", priority.P0, 2, 100), 100, "evict:v p@n1"},
		{"never within the cooldown", []victim{{"v", priority.P3, 2, 0, true, 0, 90}}, gpus("p", priority.P0, 2, 100), 100, ""},
		{"never pointless", []victim{{"v", priority.P3, 1, 0, true, 0, 0}, {"w", priority.P1, 1, 0, true, 0, 0}}, gpus("p", priority.P1, 2, 100), 100, ""},
		{"fewest victims", []victim{{"a", priority.P3, 1, 0, true, 0, 0}, {"b", priority.P3, 1, 0, true, 0, 0}, {"c", priority.P2, 2, 0, true, 0, 0}}, gpus("p", priority.P1, 2, 100), 100, "evict:c p@n1"},
		{"youngest first", []victim{{"old", priority.P3, 1, 0, true, 0, 0}, {"young", priority.P3, 1, 90, true, 0, 0}, {"x", priority.P1, 1, 0, false, 0, 0}, {"y", priority.P1, 1, 0, false, 0, 0}}, gpus("p", priority.P1, 1, 100), 100, "evict:young p@n1"},
		// internal/preempt orders by work lost before class: the P2 pod
		// that ran 5 s goes before the P3 pod that ran 100 s.
		{"least work lost before class", []victim{{"p2", priority.P2, 1, 95, true, 0, 0}, {"p3", priority.P3, 1, 0, true, 0, 0}, {"x", priority.P1, 2, 0, false, 0, 0}}, gpus("p", priority.P1, 1, 100), 100, "evict:p2 p@n1"},
		{"equal work: lower class", []victim{{"p2", priority.P2, 1, 50, true, 0, 0}, {"p3", priority.P3, 1, 50, true, 0, 0}, {"x", priority.P1, 2, 0, false, 0, 0}}, gpus("p", priority.P1, 1, 100), 100, "evict:p3 p@n1"},
	}
	for _, c := range cases {
		cfg := baseConfig()
		cfg.Preemption = true
		cfg.RequeuePreempted = false // the rule alone, not what the evicted pod does next
		total := 0
		for _, v := range c.running {
			total += v.gpus
		}
		e := newEngine(t, cfg, gpuNode("n1", total))
		for _, v := range c.running {
			p := gpus(v.key, v.class, v.gpus, 0)
			p.Preemptible, p.MinRun = v.preemptible, v.minRun
			if v.evictedAt > 0 {
				p.preemptedAt = at(v.evictedAt)
			}
			submit(t, e, p)
			e.Cycle(at(v.started))
		}
		if e.RunningCount() != len(c.running) {
			t.Fatalf("%s: set-up placed %d of %d", c.name, e.RunningCount(), len(c.running))
		}
		e.Events()
		submit(t, e, c.preemptor)
		e.Cycle(at(c.now))
		if got := strings.Join(placed(e), " "); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDeadlineDropAndEscalation(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n1", 1))
	blocker := gpus("blocker", priority.P2, 1, 0)
	submit(t, e, blocker)
	e.Cycle(at(0))
	late := gpus("late", priority.P1, 1, 1)
	late.Deadline = at(60)
	slow := gpus("slow", priority.P3, 1, 2)
	slow.MaxWait = time.Minute
	submit(t, e, late, slow)
	e.Cycle(at(30))
	e.Cycle(at(70))
	var got []string
	for _, ev := range e.Events() {
		got = append(got, ev.Kind.String()+":"+ev.Pod.Key+ev.Reason)
	}
	if strings.Join(got, " ") != "placed:blocker dropped:latedeadline passed escalated:slow" {
		t.Errorf("events %v", got)
	}
}

func TestBadInputIsRefusedAlone(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n1", 2))
	bad := gpus("bad", priority.P1, 2, 0)
	bad.Request.GPUMilli = 300 // multi-GPU shares are not whole GPUs
	if err := e.Submit(bad); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("bad request: %v", err)
	}
	badClass := gpus("badclass", 7, 1, 0)
	if err := e.Submit(badClass); err == nil || !strings.Contains(err.Error(), "badclass") {
		t.Errorf("bad class: %v", err)
	}
	good := gpus("good", priority.P1, 1, 0)
	submit(t, e, good)
	if err := e.Submit(good); err == nil {
		t.Error("a pod was accepted twice")
	}
	e.Cycle(at(1))
	if got := strings.Join(placed(e), " "); got != "good@n1" {
		t.Errorf("placed %q", got)
	}
	if err := e.Complete("nope"); err == nil {
		t.Error("completing an unknown pod succeeded")
	}
	if _, err := New(Config{MaxReservations: -1}, e.sched, nil); err == nil {
		t.Error("negative reservations accepted")
	}
}

// Pods of one shape, class and team are interchangeable: once one fails
// every stage, the cycle stops without popping the others, until capacity
// is freed.
func TestCycleStopsWhenEveryTripleFailed(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n1", 2))
	submit(t, e, gpus("a", priority.P1, 1, 0), gpus("b", priority.P1, 1, 0))
	for i := 0; i < 1000; i++ {
		submit(t, e, gpus(fmt.Sprint("w", i), priority.P2, 1, 1))
	}
	if tried := e.Cycle(at(1)); tried != 3 {
		t.Errorf("first cycle tried %d pods, want a, b and one waiting pod", tried)
	}
	if tried := e.Cycle(at(1)); tried != 0 {
		t.Errorf("nothing changed, yet the cycle tried %d pods", tried)
	}
	// Time moved (a minimum run time may have passed): one pod per triple.
	if tried := e.Cycle(at(2)); tried != 1 {
		t.Errorf("a later cycle tried %d pods, want one", tried)
	}
	if err := e.Complete("a"); err != nil {
		t.Fatal(err)
	}
	if tried := e.Cycle(at(3)); tried != 2 {
		t.Errorf("after one GPU freed the cycle tried %d pods, want the one placed and one that fails", tried)
	}
	if got := strings.Join(placed(e), " "); got != "a@n1 b@n1 w0@n1" {
		t.Errorf("placed %q", got)
	}
	if e.Pending() != 999 {
		t.Errorf("pending %d", e.Pending())
	}
}
