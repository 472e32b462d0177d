package scheduler

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

const cohortQueues = `apiVersion: scheduler.tessera.io/v1
kind: SchedulerConfig
queues:
- {name: team-a, cohort: lab, nominal: {gpus: 4}}
- {name: team-b, cohort: lab, nominal: {gpus: 4}}
preemption: {minRunTime: 0s, cooldown: 0s}
`

func teamPod(name, team, class string) *corev1.Pod {
	return withAnnotations(workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1), "tessera.io/queue", team, "tessera.io/priority", class)
}

// Quotas: team-b borrows team-a's idle guarantee (8 GPUs for a nominal 4);
// when team-a submits work within its guarantee, team-b's borrowed pods are
// reclaimed (evicted) and team-a's pods run.
func TestQuotaBorrowAndReclaim(t *testing.T) {
	c, ctx := setup(t, kwoknodes.UniformNodes("gpu", 1, kwoknodes.H100SXM, 8))
	setQueueConfig(t, ctx, c, cohortQueues)
	startScheduler(t, ctx, c, tesserascheduler.Options{Args: []string{"--queue-config-map=default/tessera-queues"}})
	binds, err := workload.WatchBinds(ctx, c.Client(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer binds.Stop()
	create(t, ctx, c, numbered("b", 8, func(i int, name string) *corev1.Pod { return teamPod(name, "team-b", "P3") })...)
	if err := binds.WaitBound(ctx, 8, true); err != nil {
		t.Fatal(err) // team-b borrowed team-a's idle 4 GPUs
	}
	create(t, ctx, c, numbered("a", 4, func(i int, name string) *corev1.Pod { return teamPod(name, "team-a", "P2") })...)
	eventually(t, ctx, "team-a's 4 pods bound", func() bool {
		for i := range 4 {
			if nodeOf(t, ctx, c.Client(), fmt.Sprintf("a-%03d", i)) == "" {
				return false
			}
		}
		return true
	})
	l, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	teamB := 0
	for _, p := range l.Items {
		if p.Annotations["tessera.io/queue"] == "team-b" && p.DeletionTimestamp == nil {
			teamB++
		}
	}
	if teamB != 4 {
		t.Fatalf("team-b keeps %d pods, want its guarantee of 4", teamB)
	}
	checkCapacity(t, ctx, c.Client())
}

// Ageing: a P3 pod that has waited on a full cluster overtakes P2 pods
// submitted after it (one class per second here), so it gets the first GPU
// that frees.
func TestP3AgesPastFreshP2(t *testing.T) {
	c, ctx := setup(t, kwoknodes.UniformNodes("gpu", 1, kwoknodes.L4, 4))
	setQueueConfig(t, ctx, c, `apiVersion: scheduler.tessera.io/v1
kind: SchedulerConfig
priority:
  ageing: {interval: 1s, step: 100, maxBoost: 200, ceiling: P2}
`)
	startScheduler(t, ctx, c, tesserascheduler.Options{Args: []string{"--queue-config-map=default/tessera-queues"}})
	binds, err := workload.WatchBinds(ctx, c.Client(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer binds.Stop()
	create(t, ctx, c, numbered("fill", 4, func(i int, name string) *corev1.Pod {
		return withAnnotations(workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1), "tessera.io/priority", "P2")
	})...)
	if err := binds.WaitBound(ctx, 4, true); err != nil {
		t.Fatal(err)
	}
	create(t, ctx, c, withAnnotations(workload.WholeGPUPod(ns, "experiment", workload.TesseraScheduler, 1), "tessera.io/priority", "P3"))
	time.Sleep(3 * time.Second) // two classes of ageing: P3 → P2 (the ceiling)
	create(t, ctx, c, numbered("fresh", 4, func(i int, name string) *corev1.Pod {
		return withAnnotations(workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1), "tessera.io/priority", "P2")
	})...)
	time.Sleep(time.Second)
	if err := c.Client().CoreV1().Pods(ns).Delete(ctx, "fill-000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "one pod bound on the freed GPU", func() bool { n, _ := binds.Counts(); return n >= 5 })
	if nodeOf(t, ctx, c.Client(), "experiment") == "" {
		t.Fatal("a fresh P2 pod took the freed GPU before the aged P3 pod")
	}
}
