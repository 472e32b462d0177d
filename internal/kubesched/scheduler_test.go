package kubesched

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus/testutil"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

const gib = 1024

// Pods are bound with one Binding each, carrying the assignment; no GPU
// ends above its memory or compute.
func TestBindsWithAssignmentWithinCapacity(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 2, 40*gib, "A100")
	a.gpuNode("n2", 2, 40*gib, "A100")
	r := a.start(testConfig())
	for i := range 20 {
		a.pod(fmt.Sprint("p", i), res(string(translate.ResourceMemory), "10", string(translate.ResourceCore), "30"))
	}
	eventually(t, "12 pods bound (3 per GPU by compute)", func() bool {
		n := 0
		for i := range 20 {
			if a.get(fmt.Sprint("p", i)).Spec.NodeName != "" {
				n++
			}
		}
		return n == 12
	})
	time.Sleep(300 * time.Millisecond) // nothing more may bind
	where := a.checkCapacity(40 * gib)
	if len(where) != 12 {
		t.Fatalf("%d pods bound, want 12 (4 GPUs × 3 shares of 30%%)", len(where))
	}
	for i := range 20 {
		p := a.get(fmt.Sprint("p", i))
		if p.Spec.NodeName == "" {
			continue
		}
		if a.bindsOf(translateKey(p)) != 1 {
			t.Fatalf("pod %s: %d Binding writes, want 1", p.Name, a.bindsOf(translateKey(p)))
		}
		as, err := annv1.ParseAssignment(p.Annotations[annv1.AssignmentKey])
		if err != nil || len(as.Containers) != 1 || as.Containers[0].Name != "main" || as.Containers[0].GPUs[0].MemoryMiB != 10*gib || as.Containers[0].GPUs[0].CorePercent != 30 {
			t.Fatalf("pod %s assignment %+v, %v", p.Name, as, err)
		}
	}
	if a.otherWrites != 0 {
		t.Fatalf("%d pod updates besides the Binding", a.otherWrites)
	}
	m := r.s.metrics
	defer func() {
		if t.Failed() {
			t.Logf("binds %v pending %v n1 %v n2 %v", testutil.ToFloat64(m.Binds), testutil.ToFloat64(m.Pending.WithLabelValues("P2", "none")),
				testutil.ToFloat64(m.NodeAllocatedMilli.WithLabelValues("n1")), testutil.ToFloat64(m.NodeAllocatedMemMiB.WithLabelValues("n2")))
		}
	}()
	eventually(t, "metrics: 12 binds, 8 pending P2 pods, 1800 milli allocated per node", func() bool {
		return testutil.ToFloat64(m.Binds) == 12 && testutil.ToFloat64(m.Pending.WithLabelValues("P2", "none")) == 8 &&
			testutil.ToFloat64(m.NodeAllocatedMilli.WithLabelValues("n1")) == 1800 && testutil.ToFloat64(m.NodeAllocatedMemMiB.WithLabelValues("n2")) == 6*10*gib
	})
}

// A pod larger than every GPU gets FailedScheduling worded like
// kube-scheduler's and PodScheduled=False/Unschedulable; others go on.
func TestUnschedulableEventAndCondition(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.gpuNode("n2", 1, 16*gib, "T4")
	a.start(testConfig())
	a.pod("huge", res(string(translate.ResourceMemory), "80"))
	a.pod("small", res(string(translate.ResourceMemory), "4"))
	want := "0/2 nodes are available: 2 node(s) had no GPU with as much memory as requested."
	eventually(t, "FailedScheduling for huge", func() bool { return a.eventFor("huge", "FailedScheduling", want) })
	eventually(t, "PodScheduled=False on huge", func() bool {
		for _, c := range a.get("huge").Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == want {
				return true
			}
		}
		return false
	})
	eventually(t, "small bound", func() bool { return a.get("small").Spec.NodeName != "" })
}

// A pod that does not fit is retried when capacity frees (a pod deleted)
// and when a node joins.
func TestRetriedOnPodDeletedAndNodeAdded(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.start(testConfig())
	a.pod("first", res(string(translate.ResourceGPU), "1"))
	eventually(t, "first bound", func() bool { return a.get("first").Spec.NodeName == "n1" })
	a.pod("second", res(string(translate.ResourceGPU), "1"))
	a.pod("third", res(string(translate.ResourceGPU), "1"))
	eventually(t, "second unschedulable", func() bool {
		return a.eventFor("second", "FailedScheduling", "0/1 nodes are available: 1 Insufficient tessera.io/gpu.")
	})
	a.deletePod("first")
	eventually(t, "second bound after first was deleted", func() bool { return a.get("second").Spec.NodeName == "n1" })
	a.gpuNode("n2", 1, 16*gib, "T4")
	eventually(t, "third bound on the new node", func() bool { return a.get("third").Spec.NodeName == "n2" })
}

// A bind that fails is rolled back (the GPU is free again for others) and
// the pod is retried after a backoff.
func TestBindFailureRollsBackAndRetries(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.failBind["default/p"] = failure{1, fmt.Errorf("admission webhook denied the request")}
	r := a.start(testConfig())
	a.pod("p", res(string(translate.ResourceGPU), "1"))
	eventually(t, "rollback event", func() bool { return a.eventFor("p", "FailedScheduling", "rolled back") })
	eventually(t, "p bound on retry", func() bool { return a.get("p").Spec.NodeName == "n1" })
	if got := a.bindsOf("default/p"); got != 1 {
		t.Fatalf("%d successful binds, want 1", got)
	}
	_ = r
}

// A NoSchedule taint (a node not ready yet) closes the node until it is
// lifted; then waiting pods are placed there at once.
func TestTaintedNodeClosedUntilTheTaintGoes(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	n, _ := a.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	if _, err := a.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.start(testConfig())
	a.pod("p", res(string(translate.ResourceGPU), "1"))
	eventually(t, "p reported", func() bool {
		return a.eventFor("p", "FailedScheduling", "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }")
	})
	n.Spec.Taints = nil
	if _, err := a.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "p bound once the taint is gone", func() bool { return a.get("p").Spec.NodeName == "n1" })
}
