package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

type pod struct {
	key   string
	class priority.Class
	sub   int // seconds after t0
}

func newQueue(t *testing.T, cfg Config) *Queue[struct{}] {
	t.Helper()
	q, err := New[struct{}](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func drain(q *Queue[struct{}], now time.Time) []string {
	var out []string
	for e := q.Pop(now); e != nil; e = q.Pop(now) {
		out = append(out, e.Key)
	}
	return out
}

func TestOrdering(t *testing.T) {
	noAge := Config{Ageing: priority.Ageing{}, EscalateTo: priority.P0}
	ageing := Config{Ageing: priority.Ageing{Step: 100 * time.Second, Ceiling: priority.P1}, EscalateTo: priority.P0}
	cases := []struct {
		name string
		cfg  Config
		pods []pod
		now  int
		want string
	}{
		{"class first", noAge, []pod{{"a", priority.P3, 0}, {"b", priority.P1, 5}, {"c", priority.P0, 9}, {"d", priority.P2, 1}}, 10, "c b d a"},
		{"fifo within a class", noAge, []pod{{"late", priority.P2, 7}, {"early", priority.P2, 3}, {"mid", priority.P2, 5}}, 10, "early mid late"},
		{"same submission: push order", noAge, []pod{{"x", priority.P1, 1}, {"y", priority.P1, 1}, {"z", priority.P1, 1}}, 10, "x y z"},
		// At now=150, p3old waited 150 s: aged one step to P2 and older than
		// every P2 pod, so it goes before them but after P1.
		{"aged P3 joins P2 in submission order", ageing, []pod{{"p3old", priority.P3, 0}, {"p2", priority.P2, 60}, {"p1", priority.P1, 140}, {"p3new", priority.P3, 100}}, 150, "p1 p3old p2 p3new"},
		// At 500 every P3 pod reached the ceiling P1 and competes by age with P1.
		{"ageing stops at the ceiling", ageing, []pod{{"p3", priority.P3, 0}, {"p1", priority.P1, 10}, {"p0", priority.P0, 499}}, 500, "p0 p3 p1"},
		{"no ageing: P3 waits behind everything", noAge, []pod{{"p3", priority.P3, 0}, {"p2", priority.P2, 400}}, 500, "p2 p3"},
	}
	for _, c := range cases {
		q := newQueue(t, c.cfg)
		for _, p := range c.pods {
			if err := q.Push(&Entry[struct{}]{Key: p.key, Class: p.class, Submitted: at(p.sub)}); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.Join(drain(q, at(c.now)), " "); got != c.want {
			t.Errorf("%s: order %q, want %q", c.name, got, c.want)
		}
	}
}

// The merge of per-class heaps must give exactly the order a full sort by
// (effective class, submission, push order) gives, at any instant.
func TestOrderMatchesSort(t *testing.T) {
	for _, join := range []priority.Join{priority.JoinAtSubmission, priority.JoinAtReach, priority.JoinAhead} {
		t.Run("join="+join.String(), func(t *testing.T) { testOrderMatchesSort(t, join) })
	}
}

// testOrderMatchesSort: the sort key is (effective class, under JoinAhead
// aged before not aged, under JoinAtReach the time the class was reached,
// submission).
func testOrderMatchesSort(t *testing.T, join priority.Join) {
	cfg := Config{Ageing: priority.Ageing{Step: 50 * time.Second, Ceiling: priority.P0, Join: join}, EscalateTo: priority.P0}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		q := newQueue(t, cfg)
		type ref struct {
			key   string
			class priority.Class
			sub   int
			order int
		}
		var refs []ref
		for i := 0; i < 200; i++ {
			r := ref{fmt.Sprint(i), priority.Class(rng.IntN(4)), rng.IntN(300), i}
			refs = append(refs, r)
			if err := q.Push(&Entry[struct{}]{Key: r.key, Class: r.class, Submitted: at(r.sub)}); err != nil {
				t.Fatal(err)
			}
		}
		now := 300 + rng.IntN(200)
		sort.SliceStable(refs, func(i, j int) bool {
			a, b := refs[i], refs[j]
			ea := cfg.Ageing.Effective(a.class, at(now).Sub(at(a.sub)))
			eb := cfg.Ageing.Effective(b.class, at(now).Sub(at(b.sub)))
			if ea != eb {
				return ea < eb
			}
			if aa, ba := ea < a.class, eb < b.class; join == priority.JoinAhead && aa != ba {
				return aa
			}
			if ra, rb := cfg.Ageing.Reached(a.class, ea, at(a.sub)), cfg.Ageing.Reached(b.class, eb, at(b.sub)); !ra.Equal(rb) {
				return ra.Before(rb)
			}
			if a.sub != b.sub {
				return a.sub < b.sub
			}
			return a.order < b.order
		})
		var want []string
		for _, r := range refs {
			want = append(want, r.key)
		}
		if got := drain(q, at(now)); !slices.Equal(got, want) {
			t.Fatalf("trial %d at %d: heap order differs from the sorted order", trial, now)
		}
	}
}

func TestDeadlineDropsWithReason(t *testing.T) {
	q := newQueue(t, DefaultConfig())
	var dropped []string
	q.OnDrop = func(e *Entry[struct{}], why Reason, now time.Time) {
		dropped = append(dropped, fmt.Sprintf("%s:%s@%d", e.Key, why, int(now.Sub(t0).Seconds())))
	}
	q.Push(&Entry[struct{}]{Key: "soon", Class: priority.P1, Submitted: at(0), Deadline: at(60)})
	q.Push(&Entry[struct{}]{Key: "later", Class: priority.P1, Submitted: at(1), Deadline: at(600)})
	q.Push(&Entry[struct{}]{Key: "never", Class: priority.P2, Submitted: at(2)})
	// "soon" fails once and sits in backoff across its deadline.
	e := q.Pop(at(10))
	if e.Key != "soon" {
		t.Fatalf("popped %s", e.Key)
	}
	q.Requeue(e, at(10))
	if next := q.NextEvent(); !next.Equal(at(11)) {
		t.Errorf("next event %v, want the end of a 1 s backoff", next)
	}
	got := drain(q, at(100))
	if !slices.Equal(got, []string{"later", "never"}) || !slices.Equal(dropped, []string{"soon:deadline passed@100"}) {
		t.Errorf("popped %v, dropped %v", got, dropped)
	}
	if q.Len() != 0 {
		t.Errorf("len %d after draining", q.Len())
	}
}

func TestEscalation(t *testing.T) {
	cfg := Config{EscalateTo: priority.P0, BackoffInitial: time.Second, BackoffMax: time.Second}
	q := newQueue(t, cfg)
	var esc []string
	q.OnEscalate = func(e *Entry[struct{}], now time.Time) { esc = append(esc, e.Key) }
	q.Push(&Entry[struct{}]{Key: "patient", Class: priority.P3, Submitted: at(0), MaxWait: time.Hour})
	q.Push(&Entry[struct{}]{Key: "p1", Class: priority.P1, Submitted: at(5)})
	if got := drain(q, at(3599)); !slices.Equal(got, []string{"p1", "patient"}) {
		t.Fatalf("before max wait: %v", got)
	}
	q.Push(&Entry[struct{}]{Key: "patient", Class: priority.P3, Submitted: at(0), MaxWait: time.Hour})
	q.Push(&Entry[struct{}]{Key: "p0", Class: priority.P0, Submitted: at(3000)})
	got := drain(q, at(3600))
	if !slices.Equal(got, []string{"patient", "p0"}) || !slices.Equal(esc, []string{"patient"}) {
		t.Errorf("after max wait: order %v, escalated %v", got, esc)
	}
}

func TestBackoffDoublesAndCaps(t *testing.T) {
	q := newQueue(t, Config{BackoffInitial: time.Second, BackoffMax: 5 * time.Second})
	q.Push(&Entry[struct{}]{Key: "a", Class: priority.P2, Submitted: at(0)})
	now := at(0)
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		e := q.Pop(now)
		if e == nil {
			t.Fatalf("attempt %d: nothing ready at %v", i, now)
		}
		q.Requeue(e, now)
		if q.Pop(now) != nil {
			t.Fatal("a pod in backoff was popped")
		}
		next := q.NextEvent()
		waits = append(waits, next.Sub(now))
		now = next
	}
	want := []time.Duration{1, 2, 4, 5, 5}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(waits, want) {
		t.Errorf("backoffs %v, want %v", waits, want)
	}
}

func TestRemoveAndDuplicates(t *testing.T) {
	q := newQueue(t, DefaultConfig())
	if err := q.Push(&Entry[struct{}]{Key: "a", Class: priority.P1, Submitted: at(0), Deadline: at(50), MaxWait: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := q.Push(&Entry[struct{}]{Key: "a", Class: priority.P1, Submitted: at(0)}); err == nil {
		t.Error("a duplicate key was accepted")
	}
	if err := q.Push(&Entry[struct{}]{Key: "bad", Class: 5}); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("bad class: %v", err)
	}
	if !q.Remove("a") || q.Remove("a") || q.Len() != 0 || !q.NextEvent().IsZero() {
		t.Error("Remove left the pod or its timers behind")
	}
	if _, err := New[int](Config{BackoffInitial: 2, BackoffMax: 1}); err == nil {
		t.Error("inverted backoff accepted")
	}
}

// A cluster change ends every backoff at once, in queue order, and keeps
// the attempts so the next failure backs off longer.
func TestActivateEndsBackoffKeepingAttempts(t *testing.T) {
	q := newQueue(t, Config{BackoffInitial: time.Second, BackoffMax: time.Minute})
	q.Push(&Entry[struct{}]{Key: "late", Class: priority.P3, Submitted: at(5)})
	q.Push(&Entry[struct{}]{Key: "early", Class: priority.P3, Submitted: at(1)})
	for _, e := range []*Entry[struct{}]{q.Pop(at(10)), q.Pop(at(10))} {
		q.Requeue(e, at(10))
	}
	if q.Pop(at(10)) != nil {
		t.Fatal("popped a pod in backoff")
	}
	q.Activate()
	if got := drain(q, at(10)); !slices.Equal(got, []string{"early", "late"}) {
		t.Fatalf("after Activate: %v", got)
	}
	q.Push(&Entry[struct{}]{Key: "x", Class: priority.P3, Submitted: at(0)})
	e := q.Pop(at(10))
	q.Requeue(e, at(10))
	q.Activate()
	e = q.Pop(at(10))
	q.Requeue(e, at(10))
	if got := q.NextEvent().Sub(at(10)); got != 2*time.Second {
		t.Fatalf("second backoff %v, want 2s (attempts kept)", got)
	}
}

// Where an aged pod queues in the class it reached. At 300 s, with one
// class per 100 s up to P1: p3-old (submitted at 10) reached P1 at 210,
// p2-old (20) at 120; the P1 pods were submitted at 0, 150 and 250.
// JoinAtSubmission orders by submission; JoinAtReach by the time the class
// was reached (p3-old behind p1-early, which was waiting when it arrived);
// JoinAhead puts both aged pods, oldest first, ahead of every P1 pod — also
// the one submitted before them.
func TestAgedPodJoins(t *testing.T) {
	for _, c := range []struct {
		join priority.Join
		want []string
	}{
		{priority.JoinAtSubmission, []string{"p1-first", "p3-old", "p2-old", "p1-early", "p1-late"}},
		{priority.JoinAtReach, []string{"p1-first", "p2-old", "p1-early", "p3-old", "p1-late"}},
		{priority.JoinAhead, []string{"p3-old", "p2-old", "p1-first", "p1-early", "p1-late"}},
	} {
		q := newQueue(t, Config{Ageing: priority.Ageing{Step: 100 * time.Second, Ceiling: priority.P1, Join: c.join}, EscalateTo: priority.P1})
		q.Push(&Entry[struct{}]{Key: "p1-first", Class: priority.P1, Submitted: at(0)})
		q.Push(&Entry[struct{}]{Key: "p3-old", Class: priority.P3, Submitted: at(10)})
		q.Push(&Entry[struct{}]{Key: "p2-old", Class: priority.P2, Submitted: at(20)})
		q.Push(&Entry[struct{}]{Key: "p1-early", Class: priority.P1, Submitted: at(150)})
		q.Push(&Entry[struct{}]{Key: "p1-late", Class: priority.P1, Submitted: at(250)})
		if got := drain(q, at(300)); !slices.Equal(got, c.want) {
			t.Errorf("join %v: order %v, want %v", c.join, got, c.want)
		}
	}
}

// Under JoinAhead with the ceiling at P2 an aged experiment overtakes the
// whole training backlog but never inference: a P3 pod that waited one
// step goes after every P1 pod and before every P2 pod, even P2 pods
// submitted long before it; a P3 pod not yet aged stays last.
func TestJoinAheadOvertakesTrainingNotInference(t *testing.T) {
	q := newQueue(t, Config{Ageing: priority.Ageing{Step: 30 * time.Minute, Ceiling: priority.P2, Join: priority.JoinAhead}, EscalateTo: priority.P2})
	q.Push(&Entry[struct{}]{Key: "p2-hours-old", Class: priority.P2, Submitted: at(0)})
	q.Push(&Entry[struct{}]{Key: "p3-aged", Class: priority.P3, Submitted: at(3600)})
	q.Push(&Entry[struct{}]{Key: "p1-new", Class: priority.P1, Submitted: at(5390)})
	q.Push(&Entry[struct{}]{Key: "p3-fresh", Class: priority.P3, Submitted: at(5000)})
	q.Push(&Entry[struct{}]{Key: "p2-new", Class: priority.P2, Submitted: at(5300)})
	want := []string{"p1-new", "p3-aged", "p2-hours-old", "p2-new", "p3-fresh"}
	if got := drain(q, at(5400)); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
