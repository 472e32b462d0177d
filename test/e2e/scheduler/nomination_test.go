package scheduler

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// holdFinalizer keeps an evicted victim terminating (kwok deletes pods at
// once; a real kubelet would take the victim's grace period) until the
// test lets it go.
const holdFinalizer = "tessera.io/e2e-hold"

// SIGKILL the scheduler while a preemption is in flight (victim
// terminating, preemptor nominated): the new scheduler rebuilds the
// nomination from the API server alone — it evicts nothing more, does not
// give the GPU being freed to a pod arriving meanwhile, and binds the
// preemptor there once the victim is gone. Nothing is double-booked.
func TestNominationSurvivesSIGKILL(t *testing.T) {
	c, ctx := setup(t, kwoknodes.UniformNodes("gpu", 1, kwoknodes.L4, 2))
	client := c.Client()
	setQueueConfig(t, ctx, c, "apiVersion: scheduler.tessera.io/v1\nkind: SchedulerConfig\npreemption: {minRunTime: 0s}\n")
	args := []string{"--queue-config-map=default/tessera-queues"}
	first := startScheduler(t, ctx, c, tesserascheduler.Options{Name: "first", Args: args})

	victim := withAnnotations(workload.WholeGPUPod(ns, "victim", workload.TesseraScheduler, 1), "tessera.io/priority", "P3")
	victim.Finalizers = []string{holdFinalizer}
	keeper := withAnnotations(workload.WholeGPUPod(ns, "keeper", workload.TesseraScheduler, 1), "tessera.io/priority", "P1")
	create(t, ctx, c, victim, keeper)
	eventually(t, ctx, "victim and keeper bound", func() bool {
		return nodeOf(t, ctx, client, "victim") != "" && nodeOf(t, ctx, client, "keeper") != ""
	})
	node := nodeOf(t, ctx, client, "victim")

	create(t, ctx, c, withAnnotations(workload.WholeGPUPod(ns, "urgent", workload.TesseraScheduler, 1), "tessera.io/priority", "P0"))
	eventually(t, ctx, "victim evicted and urgent nominated", func() bool {
		v, err := client.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		u, err2 := client.CoreV1().Pods(ns).Get(ctx, "urgent", metav1.GetOptions{})
		return err == nil && err2 == nil && v.DeletionTimestamp != nil && u.Status.NominatedNodeName == node
	})
	first.Kill()

	startScheduler(t, ctx, c, tesserascheduler.Options{Name: "second", Args: args})
	create(t, ctx, c, withAnnotations(workload.WholeGPUPod(ns, "intruder", workload.TesseraScheduler, 1), "tessera.io/priority", "P2"))
	eventually(t, ctx, "intruder told it waits", func() bool {
		return hasEvent(ctx, client, "intruder", "FailedScheduling", "Insufficient tessera.io/gpu")
	})
	if n := nodeOf(t, ctx, client, "urgent"); n != "" {
		t.Fatalf("urgent bound to %s while its victim still holds the GPU", n)
	}
	k, err := client.CoreV1().Pods(ns).Get(ctx, "keeper", metav1.GetOptions{})
	if err != nil || k.DeletionTimestamp != nil {
		t.Fatalf("keeper evicted (%v): the restarted scheduler preempted again", err)
	}

	// The victim's grace period ends.
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, "victim", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "urgent bound on "+node, func() bool { return nodeOf(t, ctx, client, "urgent") == node })
	if n := nodeOf(t, ctx, client, "intruder"); n != "" {
		t.Fatalf("intruder bound to %s: it took the GPU held for urgent", n)
	}
	if got := checkCapacity(t, ctx, client); got != 2 {
		t.Fatalf("%d pods bound, want keeper and urgent", got)
	}
}
