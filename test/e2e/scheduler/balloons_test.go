package scheduler

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// publishBalloons writes tessera.io/node-balloons on a node, as vgpu-monitor's
// balloon controller does (a merge patch of the node's annotations).
func publishBalloons(t *testing.T, ctx context.Context, client kubernetes.Interface, node string, gpus ...annv1.GPUBalloon) {
	t.Helper()
	raw, err := annv1.Marshal(&annv1.NodeBalloons{Version: annv1.Version, GPUs: gpus})
	if err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[annv1.NodeBalloonsKey] = raw
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gone says whether a pod is deleted or being deleted.
func gone(ctx context.Context, client kubernetes.Interface, name string) bool {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
}

// On a real control plane with the real cluster-scheduler binary: a P2 pod that
// fits only on memory an opted-in P1 owner can lend is bound there with
// tessera.io/borrowed; when the node says the owner wants its memory back, the
// borrower is evicted through the Eviction API with Events on both pods, and the
// owner keeps its memory (a pod of the same size waits) until the node lends it
// again, when that pod is bound as the next borrower.
func TestBalloonBorrowAndReclaim(t *testing.T) {
	c, ctx := setup(t, kwoknodes.UniformNodes("gpu", 1, kwoknodes.A100SXM80, 1))
	cl := c.Client()
	s := startScheduler(t, ctx, c, tesserascheduler.Options{})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	owner := withAnnotations(workload.FractionalPod(ns, "owner", workload.TesseraScheduler, 60, 40),
		"tessera.io/priority", "P1", annv1.BalloonKey, "true")
	create(t, ctx, c, owner)
	eventually(t, ctx, "owner bound", func() bool { return nodeOf(t, ctx, cl, "owner") == "gpu-0000" })
	p, err := cl.CoreV1().Pods(ns).Get(ctx, "owner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as, err := annv1.ParseAssignment(p.Annotations[annv1.AssignmentKey])
	if err != nil || len(as.Containers) != 1 || len(as.Containers[0].GPUs) != 1 {
		t.Fatalf("owner's assignment: %+v %v", as, err)
	}
	gpu := as.Containers[0].GPUs[0].UUID

	borrower := func(name string) *corev1.Pod {
		return withAnnotations(workload.FractionalPod(ns, name, workload.TesseraScheduler, 40, 30), "tessera.io/priority", "P2")
	}
	create(t, ctx, c, borrower("borrower"))
	eventually(t, ctx, "borrower unschedulable (20 of its 40 GiB are free)", func() bool {
		return hasEvent(ctx, cl, "borrower", "FailedScheduling", "")
	})

	settled := annv1.GPUBalloon{UUID: gpu, ReclaimableMiB: 30 << 10, Owners: 1,
		Lenders: []annv1.Lender{{Owner: "default/owner/main", CeilingMiB: 60 << 10, FloorMiB: 30 << 10}}}
	publishBalloons(t, ctx, cl, "gpu-0000", settled)
	eventually(t, ctx, "borrower bound on lent memory", func() bool { return nodeOf(t, ctx, cl, "borrower") == "gpu-0000" })
	b, err := cl.CoreV1().Pods(ns).Get(ctx, "borrower", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := annv1.ParseBorrowed(b.Annotations[annv1.BorrowedKey])
	if err != nil {
		t.Fatalf("borrowed record: %v", err)
	}
	if len(rec.GPUs) != 1 || rec.GPUs[0].UUID != gpu || rec.GPUs[0].MemoryMiB != 20<<10 || !slices.Equal(rec.GPUs[0].From, []string{"default/owner/main"}) {
		t.Fatalf("borrowed %+v, want 20 GiB on %s from default/owner/main", rec.GPUs, gpu)
	}
	checkCapacity(t, ctx, cl) // the owner's 60 + the borrower's 40 GiB, less the 20 lent, fit the 80 GiB GPU
	// The agent lowered the owner by 20 GiB; then the owner grows back.
	publishBalloons(t, ctx, cl, "gpu-0000", annv1.GPUBalloon{UUID: gpu, LentMiB: 20 << 10, Owners: 1,
		Lenders: []annv1.Lender{{Owner: "default/owner/main", CeilingMiB: 60 << 10, FloorMiB: 50 << 10, LentMiB: 20 << 10, WantsBackMiB: 20 << 10}}})
	eventually(t, ctx, "borrower evicted", func() bool { return gone(ctx, cl, "borrower") })
	eventually(t, ctx, "reclaim events on both pods", func() bool {
		return hasEvent(ctx, cl, "borrower", "BalloonReclaim", "default/owner") && hasEvent(ctx, cl, "owner", "BalloonReclaim", "default/borrower") &&
			hasEvent(ctx, cl, "borrower", "Preempted", "default/owner")
	})
	if gone(ctx, cl, "owner") {
		t.Fatal("the owner was evicted")
	}
	eventually(t, ctx, "borrower deleted", func() bool {
		_, err := cl.CoreV1().Pods(ns).Get(ctx, "borrower", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	// The owner has its memory: a pod of the borrower's size waits ...
	publishBalloons(t, ctx, cl, "gpu-0000", annv1.GPUBalloon{UUID: gpu, Owners: 1}) // deflated, not settled
	create(t, ctx, c, borrower("next"))
	eventually(t, ctx, "next unschedulable", func() bool { return hasEvent(ctx, cl, "next", "FailedScheduling", "") })
	if n := nodeOf(t, ctx, cl, "next"); n != "" {
		t.Fatalf("next bound to %s on the owner's memory", n)
	}
	// ... until the owner settles again and the node lends it.
	publishBalloons(t, ctx, cl, "gpu-0000", settled)
	eventually(t, ctx, "next bound as a borrower", func() bool { return nodeOf(t, ctx, cl, "next") == "gpu-0000" })
	if got := scrapeCounter(ctx, s.MetricsURL, "tessera_scheduler_balloon_reclaims_total"); got != 1 {
		t.Fatalf("balloon_reclaims_total %v, want 1", got)
	}
	if got := scrapeCounter(ctx, s.MetricsURL, "tessera_scheduler_balloon_borrowers_total"); got != 2 {
		t.Fatalf("balloon_borrowers_total %v, want 2", got)
	}
}
