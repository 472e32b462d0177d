package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/quota"
)

func quotaEngine(t *testing.T, queues []schedv1.QueueConfig) *Engine {
	t.Helper()
	sc := schedv1.Default()
	sc.Queues = queues
	books, err := quota.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := placement.NewCluster(smallCluster()[:2]) // 2 + 4 GPUs
	p, _ := placement.NewPolicy("binpack", c, placement.Options{})
	cfg, err := ConfigFrom(sc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Queue.BackoffInitial, cfg.Queue.BackoffMax, cfg.RequeuePreempted = 0, 0, true
	e, err := New(cfg, placement.NewScheduler(c, p, false), &QuotaAdmission{Books: books, Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func teamPod(key, team string, class priority.Class, n int, sub int) *Pod {
	p := gpus(key, class, n, sub)
	p.Team, p.Preemptible, p.MinRun = team, true, 0
	return p
}

// A queue borrows its cohort's idle capacity; when the owner needs its
// guarantee back, the borrower is reclaimed whatever its class; a queue
// without a cohort is held at its nominal quota.
func TestQuotaBorrowReclaimAndHold(t *testing.T) {
	e := quotaEngine(t, []schedv1.QueueConfig{
		{Name: "a", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 3000}},
		{Name: "b", Cohort: "c", Nominal: schedv1.Resources{GPUMilli: 3000}},
		{Name: "solo", Nominal: schedv1.Resources{GPUMilli: 1000}},
	})
	// a uses its 3 GPUs and borrows b's idle 3 (six 1-GPU pods).
	for i := 0; i < 6; i++ {
		submit(t, e, teamPod(fmt.Sprint("a", i), "a", priority.P1, 1, i))
	}
	e.Cycle(at(10))
	if got := placed(e); len(got) != 6 {
		t.Fatalf("borrowing: placed %q", got)
	}
	// b wants its guarantee: a borrowing P1 pod gives way to a P3 pod.
	submit(t, e, teamPod("b1", "b", priority.P3, 1, 20))
	e.Cycle(at(30))
	got := strings.Join(placed(e), " ")
	if !strings.Contains(got, "evict:a") || !strings.Contains(got, "b1@") {
		t.Errorf("reclaim: %q, want a borrower evicted for b1", got)
	}
	// solo has no cohort: a second GPU is over its quota and waits.
	for _, k := range []string{"a0", "a1"} {
		if _, ok := e.Running(k); ok {
			e.Complete(k)
		}
	}
	e.Delete("a5")
	e.Delete("a4")
	submit(t, e, teamPod("s1", "solo", priority.P0, 1, 40), teamPod("s2", "solo", priority.P0, 1, 41))
	e.Cycle(at(50))
	got = strings.Join(placed(e), " ")
	if !strings.Contains(got, "s1@") || strings.Contains(got, "s2@") {
		t.Errorf("nominal limit: %q, want s1 placed and s2 held", got)
	}
}

func TestConfigFrom(t *testing.T) {
	sc := schedv1.Default()
	cfg, err := ConfigFrom(sc)
	if err != nil {
		t.Fatal(err)
	}
	// 10 points per minute, 100 points a class: one class per 10 minutes, up to P2.
	if cfg.Queue.Ageing.Step != 10*time.Minute || cfg.Queue.Ageing.Ceiling != priority.P2 || cfg.Queue.EscalateTo != priority.P2 || cfg.ReserveAfter != 5*time.Minute || cfg.Cooldown != 30*time.Minute {
		t.Errorf("ConfigFrom(Default) = %+v", cfg)
	}
	p := &Pod{Class: priority.P3}
	PodDefaults(sc, p)
	if !p.Preemptible || p.MinRun != 10*time.Minute || p.MaxWait != 6*time.Hour {
		t.Errorf("PodDefaults(P3) = %+v", p)
	}
	if cfg.Queue.Ageing.Skip != [priority.NumClasses]bool{} {
		t.Errorf("every class ages by default: skip %v", cfg.Queue.Ageing.Skip)
	}
	sc.Priority.Ageing.Classes = []schedv1.Class{schedv1.P3}
	if cfg, err = ConfigFrom(sc); err != nil || cfg.Queue.Ageing.Skip != [priority.NumClasses]bool{true, true, true, false} {
		t.Errorf("ageing.classes [P3]: skip %v, %v; want only P3 to age", cfg.Queue.Ageing.Skip, err)
	}
	for join, want := range map[string]priority.Join{"": priority.JoinAtSubmission, schedv1.JoinReach: priority.JoinAtReach, schedv1.JoinAhead: priority.JoinAhead} {
		sc.Priority.Ageing.Join = join
		if cfg, err = ConfigFrom(sc); err != nil || cfg.Queue.Ageing.Join != want {
			t.Errorf("ageing.join %q: %v, %v; want %v", join, cfg.Queue.Ageing.Join, err, want)
		}
	}
	sc.Priority.Ageing.Ceiling = "P9"
	if _, err := ConfigFrom(sc); err == nil || !strings.Contains(err.Error(), "ceiling") {
		t.Errorf("bad ceiling: %v", err)
	}
}

// Capacity is reclaimed within a cohort only: a pod within its guarantee
// does not evict a borrower of another cohort.
func TestReclaimStaysInItsCohort(t *testing.T) {
	e := quotaEngine(t, []schedv1.QueueConfig{
		{Name: "a", Cohort: "c1", Nominal: schedv1.Resources{GPUMilli: 2000}},
		{Name: "b", Cohort: "c1", Nominal: schedv1.Resources{GPUMilli: 3000}},
		{Name: "x", Cohort: "c2", Nominal: schedv1.Resources{GPUMilli: 2000}},
	})
	for i := 0; i < 5; i++ { // a: 2 guaranteed + 3 borrowed from b
		submit(t, e, teamPod(fmt.Sprint("a", i), "a", priority.P1, 1, i))
	}
	submit(t, e, teamPod("y", "x", priority.P1, 1, 5)) // the 6th GPU
	e.Cycle(at(10))
	if got := placed(e); len(got) != 6 {
		t.Fatalf("set-up placed %v", got)
	}
	submit(t, e, teamPod("x2", "x", priority.P3, 1, 20))
	e.Cycle(at(30))
	if got := strings.Join(placed(e), " "); got != "" {
		t.Errorf("x is within its guarantee but a's borrowers are in another cohort, yet: %q", got)
	}
	// b (a's cohort, within its guarantee) does reclaim.
	submit(t, e, teamPod("b1", "b", priority.P3, 1, 40))
	e.Cycle(at(50))
	if got := strings.Join(placed(e), " "); !strings.Contains(got, "evict:a") || !strings.Contains(got, "b1@") {
		t.Errorf("b within its guarantee: %q, want an a borrower evicted", got)
	}
}
