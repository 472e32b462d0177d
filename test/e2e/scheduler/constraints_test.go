package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// Kubernetes' node constraints come before GPU placement, on a real API
// server (which adds its default tolerations, and the controller manager
// its unschedulable taint): a nodeSelector pins a pod, a tainted node
// takes only the pod that tolerates its taint, a cordoned node takes
// nothing, a node where the host port is taken takes no pod asking for
// it; the pod that fits nowhere is told why, node by node.
func TestNodeConstraints(t *testing.T) {
	nodes := kwoknodes.UniformNodes("fit", 4, kwoknodes.L4, 2)
	nodes[0].Taints = []corev1.Taint{{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}}
	nodes[1].Labels = map[string]string{"pool": "inference"}
	nodes[2].Unschedulable = true
	tainted, pool, cordoned := nodes[0].Name, nodes[1].Name, nodes[2].Name
	c, ctx := setup(t, nodes)
	startScheduler(t, ctx, c, tesserascheduler.Options{})
	client := c.Client()

	pinned := workload.WholeGPUPod(ns, "pinned", workload.TesseraScheduler, 1)
	pinned.Spec.NodeSelector = map[string]string{"pool": "inference"}
	create(t, ctx, c, pinned)
	eventually(t, ctx, "pinned bound", func() bool { return nodeOf(t, ctx, client, "pinned") != "" })
	if got := nodeOf(t, ctx, client, "pinned"); got != pool {
		t.Fatalf("pinned went to %s, want %s (its nodeSelector)", got, pool)
	}

	// Three GPUs are left to pods without tolerations (pool's second,
	// the plain node's two); the fourth such pod waits.
	plain := numbered("plain", 4, func(_ int, name string) *corev1.Pod {
		return workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1)
	})
	create(t, ctx, c, plain...)
	var waiting string
	eventually(t, ctx, "three plain pods bound, one waiting", func() bool {
		bound, pending := 0, ""
		for _, p := range plain {
			if nodeOf(t, ctx, client, p.Name) != "" {
				bound++
			} else {
				pending = p.Name
			}
		}
		waiting = pending
		return bound == 3
	})
	for _, p := range plain {
		if n := nodeOf(t, ctx, client, p.Name); n == tainted || n == cordoned {
			t.Fatalf("%s went to %s, which its constraints exclude", p.Name, n)
		}
	}
	want := "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: training}, 1 node(s) were unschedulable, 2 Insufficient tessera.io/gpu."
	eventually(t, ctx, waiting+" told why", func() bool { return hasEvent(ctx, client, waiting, "FailedScheduling", want) })

	tolerant := workload.WholeGPUPod(ns, "tolerant", workload.TesseraScheduler, 1)
	tolerant.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "training", Effect: corev1.TaintEffectNoSchedule}}
	create(t, ctx, c, tolerant)
	eventually(t, ctx, "tolerant bound", func() bool { return nodeOf(t, ctx, client, "tolerant") != "" })
	if got := nodeOf(t, ctx, client, "tolerant"); got != tainted {
		t.Fatalf("tolerant went to %s, want the tainted %s (the only free GPUs)", got, tainted)
	}
	if n := nodeOf(t, ctx, client, waiting); n != "" {
		t.Fatalf("%s was bound to %s, though only the tainted and the cordoned node have room", waiting, n)
	}

	// Uncordoning the node lets the waiting pod in.
	n, err := client.CoreV1().Nodes().Get(ctx, cordoned, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = false
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, waiting+" bound once "+cordoned+" is uncordoned", func() bool { return nodeOf(t, ctx, client, waiting) == cordoned })
	if got := checkCapacity(t, ctx, client); got != 6 {
		t.Fatalf("%d pods bound, want 6", got)
	}

	// Host ports (kube-scheduler's NodePorts): one GPU is left on the
	// tainted node and one on the uncordoned one, where a pod placed
	// directly (no scheduler) binds port 9000. Of two pods asking for
	// GPU and port 9000, one gets the tainted node; the other waits, told
	// why.
	web := workload.Pod(ns, "web", "nobody", nil)
	web.Spec.NodeName = cordoned
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9000, HostPort: 9000}}
	create(t, ctx, c, web)
	ported := numbered("ported", 2, func(_ int, name string) *corev1.Pod {
		p := workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1)
		p.Spec.Tolerations = tolerant.Spec.Tolerations
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9000, HostPort: 9000, Protocol: corev1.ProtocolTCP}}
		return p
	})
	create(t, ctx, c, ported...)
	want = "0/4 nodes are available: 2 Insufficient tessera.io/gpu, 2 node(s) didn't have free ports for the requested pod ports."
	eventually(t, ctx, "one ported pod on "+tainted+", the other told why", func() bool {
		a, b := nodeOf(t, ctx, client, "ported-000"), nodeOf(t, ctx, client, "ported-001")
		return (a == tainted && b == "" && hasEvent(ctx, client, "ported-001", "FailedScheduling", want)) ||
			(b == tainted && a == "" && hasEvent(ctx, client, "ported-000", "FailedScheduling", want))
	})
	if got := checkCapacity(t, ctx, client); got != 8 {
		t.Fatalf("%d pods bound, want 8", got)
	}
}
