package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

func container(name string, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Image: workload.Image, Resources: corev1.ResourceRequirements{Limits: limits}}
}

func share(memUnits, core int64) corev1.ResourceList {
	return corev1.ResourceList{
		workload.GPU:       *apiresource.NewQuantity(1, apiresource.DecimalSI),
		workload.GPUMemory: *apiresource.NewQuantity(memUnits, apiresource.DecimalSI),
		workload.GPUCore:   *apiresource.NewQuantity(core, apiresource.DecimalSI),
	}
}

func gpus(n int64) corev1.ResourceList {
	return corev1.ResourceList{workload.GPU: *apiresource.NewQuantity(n, apiresource.DecimalSI)}
}

// Pods of several containers with tessera requests: each container gets
// its own slice in the assignment — fractional containers one GPU
// together with their own amounts, whole-GPU containers GPUs of their own,
// an init container the pod's first GPU — and the node's GPUs stay within
// capacity as more pods fill them.
func TestMultiContainerPods(t *testing.T) {
	c, ctx := setup(t, kwoknodes.UniformNodes("ctr", 1, kwoknodes.A100SXM80, 4))
	startScheduler(t, ctx, c, tesserascheduler.Options{})
	client := c.Client()

	shared := workload.Pod(ns, "shared", workload.TesseraScheduler, nil)
	shared.Spec.InitContainers = []corev1.Container{container("warm", share(2, 60))}
	shared.Spec.Containers = []corev1.Container{container("a", share(8, 30)), container("b", share(4, 20))}
	whole := workload.Pod(ns, "whole", workload.TesseraScheduler, nil)
	whole.Spec.Containers = []corev1.Container{container("x", gpus(2)), container("y", gpus(1))}
	create(t, ctx, c, shared, whole)
	eventually(t, ctx, "both bound", func() bool {
		return nodeOf(t, ctx, client, "shared") != "" && nodeOf(t, ctx, client, "whole") != ""
	})
	assignment := func(name string) *annv1.Assignment {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := annv1.ParseAssignment(p.Annotations[annv1.AssignmentKey])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return a
	}
	sa := assignment("shared")
	warm, a, b := sa.Container("warm"), sa.Container("a"), sa.Container("b")
	if warm == nil || a == nil || b == nil || len(a.GPUs) != 1 || len(b.GPUs) != 1 || len(warm.GPUs) != 1 {
		t.Fatalf("shared's assignment %+v: want warm, a and b on one GPU each", sa)
	}
	gib := uint64(1024)
	if a.GPUs[0].UUID != b.GPUs[0].UUID || warm.GPUs[0].UUID != a.GPUs[0].UUID ||
		a.GPUs[0].CorePercent != 30 || a.GPUs[0].MemoryMiB != 8*gib || b.GPUs[0].CorePercent != 20 || b.GPUs[0].MemoryMiB != 4*gib ||
		warm.GPUs[0].CorePercent != 60 || warm.GPUs[0].MemoryMiB != 2*gib {
		t.Fatalf("shared's assignment %+v: want a (30 %%, 8 GiB), b (20 %%, 4 GiB) and warm (60 %%, 2 GiB) on one GPU", sa)
	}
	wa := assignment("whole")
	x, y := wa.Container("x"), wa.Container("y")
	if x == nil || y == nil || len(x.GPUs) != 2 || len(y.GPUs) != 1 {
		t.Fatalf("whole's assignment %+v: want x on 2 GPUs, y on 1", wa)
	}
	seen := map[string]bool{a.GPUs[0].UUID: true}
	for _, g := range append(x.GPUs, y.GPUs...) {
		if seen[g.UUID] {
			t.Fatalf("GPU %s given twice (whole %+v, shared %+v)", g.UUID, wa, sa)
		}
		seen[g.UUID] = true
	}

	// The pod holds 60 % of the shared GPU's compute (its init
	// container's, the larger of init and app containers, as
	// kube-scheduler counts them): a 40 % pod fits there, then nothing.
	create(t, ctx, c, workload.FractionalPod(ns, "rest", workload.TesseraScheduler, 4, 40))
	eventually(t, ctx, "rest bound", func() bool { return nodeOf(t, ctx, client, "rest") != "" })
	if g := assignment("rest").Containers[0].GPUs[0].UUID; g != a.GPUs[0].UUID {
		t.Fatalf("rest went to GPU %s, want the shared GPU %s (the others are taken whole)", g, a.GPUs[0].UUID)
	}
	create(t, ctx, c, workload.FractionalPod(ns, "over", workload.TesseraScheduler, 4, 10))
	eventually(t, ctx, "over told why", func() bool {
		return hasEvent(ctx, client, "over", "FailedScheduling", "Insufficient tessera.io/gpu-core")
	})
	if got := checkCapacity(t, ctx, client); got != 3 {
		t.Fatalf("%d pods bound, want 3", got)
	}
}
