package kubesched

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// publishBalloons writes a node's tessera.io/node-balloons as vgpu-monitor does.
func (a *api) publishBalloons(node string, gpus ...annv1.GPUBalloon) {
	a.t.Helper()
	raw, err := annv1.Marshal(&annv1.NodeBalloons{Version: annv1.Version, GPUs: gpus})
	if err != nil {
		a.t.Fatal(err)
	}
	n, err := a.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	n.Annotations[annv1.NodeBalloonsKey] = raw
	if _, err := a.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

func (a *api) evictedPods() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.evicted)
}

func memAssignment(uuid string, mib int) string {
	return fmt.Sprintf(`{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":%q,"memoryMiB":%d,"corePercent":40}]}]}`, uuid, mib)
}

// balloonCluster: n1 holds an opted-in P1 owner (30 GiB of 40), n2 a P1 pod that
// did not opt in (30 GiB of 40). A P2 pod asking 20 GiB fits nowhere.
func balloonCluster(t *testing.T) *api {
	a := newAPI(t)
	a.evictDeletes = false // borrowers terminate in their own time
	a.gpuNode("n1", 1, 40*gib, "A100")
	a.gpuNode("n2", 1, 40*gib, "A100")
	a.pod("owner", res(string(translate.ResourceMemory), "30", string(translate.ResourceCore), "40"), onNode("n1"), created(time.Hour),
		ann(schedv1.PriorityAnnotation, "P1", annv1.BalloonKey, "true", annv1.AssignmentKey, memAssignment("GPU-n1-0", 30*gib)))
	a.pod("plain", res(string(translate.ResourceMemory), "30", string(translate.ResourceCore), "40"), onNode("n2"), created(time.Hour),
		ann(schedv1.PriorityAnnotation, "P1", annv1.AssignmentKey, memAssignment("GPU-n2-0", 30*gib)))
	return a
}

func lender(owner string, floor, lent, wantBack uint64) annv1.Lender {
	return annv1.Lender{Owner: owner, CeilingMiB: 30 * gib, FloorMiB: floor, LentMiB: lent, WantsBackMiB: wantBack}
}

// TestBorrowerPlacedOnLentMemoryThenReclaimed: a pod that fits nowhere is bound on
// the memory the node says an opted-in owner can lend (never on a pod that did
// not opt in, whatever a node says), with tessera.io/borrowed naming the owner and
// how much; when the node says the owner wants its memory back, the borrower is
// evicted through the Eviction API with Events on both pods, and the owner's
// memory is its own again (another 20 GiB pod is not placed there).
func TestBorrowerPlacedOnLentMemoryThenReclaimed(t *testing.T) {
	a := balloonCluster(t)
	r := a.start(testConfig())
	a.pod("borrower", res(string(translate.ResourceMemory), "20", string(translate.ResourceCore), "30"), ann(schedv1.PriorityAnnotation, "P2"))
	eventually(t, "borrower unschedulable", func() bool { return a.eventFor("borrower", "FailedScheduling", "") })

	// A node naming a pod that did not opt in lends nothing.
	a.publishBalloons("n2", annv1.GPUBalloon{UUID: "GPU-n2-0", ReclaimableMiB: 14 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/plain/main", 16*gib, 0, 0)}})
	time.Sleep(500 * time.Millisecond)
	if n := a.get("borrower").Spec.NodeName; n != "" {
		t.Fatalf("borrower bound to %s on memory of a pod that did not opt in", n)
	}

	a.publishBalloons("n1", annv1.GPUBalloon{UUID: "GPU-n1-0", ReclaimableMiB: 14 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/owner/main", 16*gib, 0, 0)}})
	eventually(t, "borrower bound on n1", func() bool { return a.get("borrower").Spec.NodeName == "n1" })
	b := a.get("borrower")
	rec, err := annv1.ParseBorrowed(b.Annotations[annv1.BorrowedKey])
	if err != nil {
		t.Fatalf("borrowed record: %v (%q)", err, b.Annotations[annv1.BorrowedKey])
	}
	// The GPU lacked 20 − 10 GiB: that much is borrowed, from the owner's container.
	if len(rec.GPUs) != 1 || rec.GPUs[0].UUID != "GPU-n1-0" || rec.GPUs[0].MemoryMiB != 10*gib || !slices.Equal(rec.GPUs[0].From, []string{"default/owner/main"}) {
		t.Fatalf("borrowed %+v", rec.GPUs)
	}
	if got := testutilValue(t, r.s.metrics.BalloonBorrowers); got != 1 {
		t.Fatalf("borrowers metric %v", got)
	}

	// The agent inflated the owner; later the owner grows and wants it back.
	a.publishBalloons("n1", annv1.GPUBalloon{UUID: "GPU-n1-0", LentMiB: 10 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/owner/main", 16*gib, 10*gib, 0)}})
	time.Sleep(300 * time.Millisecond)
	if ev := a.evictedPods(); len(ev) != 0 {
		t.Fatalf("evicted %v while the owner wants nothing back", ev)
	}
	a.publishBalloons("n1", annv1.GPUBalloon{UUID: "GPU-n1-0", LentMiB: 10 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/owner/main", 24*gib, 10*gib, 10*gib)}})
	eventually(t, "borrower evicted", func() bool { return slices.Equal(a.evictedPods(), []string{"default/borrower"}) })
	eventually(t, "events on both pods", func() bool {
		return a.eventFor("borrower", "BalloonReclaim", "default/owner") && a.eventFor("owner", "BalloonReclaim", "default/borrower") &&
			a.eventFor("borrower", "Preempted", "default/owner")
	})
	if got := testutilValue(t, r.s.metrics.BalloonReclaims); got != 1 {
		t.Fatalf("reclaims metric %v", got)
	}
	a.deletePod("borrower") // its grace period ends
	a.pod("next", res(string(translate.ResourceMemory), "20", string(translate.ResourceCore), "30"), ann(schedv1.PriorityAnnotation, "P2"))
	eventually(t, "next unschedulable", func() bool { return a.eventFor("next", "FailedScheduling", "") })
	time.Sleep(300 * time.Millisecond)
	if n := a.get("next").Spec.NodeName; n != "" {
		t.Fatalf("next bound to %s: the owner's memory was lent again while it wants it", n)
	}
}

// TestRestartKeepsLoans: a scheduler restarted with a borrower bound on lent memory
// books it on its owner's loan (no conflict, the node stays open: a pod that fits
// beside them is placed), and reclaims it when the owner wants its memory back.
func TestRestartKeepsLoans(t *testing.T) {
	a := balloonCluster(t)
	a.publishBalloons("n1", annv1.GPUBalloon{UUID: "GPU-n1-0", LentMiB: 10 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/owner/main", 16*gib, 10*gib, 0)}})
	a.pod("borrower", res(string(translate.ResourceMemory), "20", string(translate.ResourceCore), "30"), onNode("n1"), created(time.Minute),
		ann(schedv1.PriorityAnnotation, "P2", annv1.AssignmentKey, memAssignment("GPU-n1-0", 20*gib),
			annv1.BorrowedKey, `{"version":"v1","gpus":[{"uuid":"GPU-n1-0","memoryMiB":10240,"from":["default/owner/main"]}]}`))
	a.start(testConfig())
	a.pod("small", res(string(translate.ResourceMemory), "8", string(translate.ResourceCore), "10"), ann(schedv1.PriorityAnnotation, "P2"))
	eventually(t, "small bound on n2", func() bool { return a.get("small").Spec.NodeName == "n2" })
	if len(a.events("TesseraConflictingPlacement")) != 0 {
		t.Fatal("the borrower was taken for a double booking")
	}
	a.publishBalloons("n1", annv1.GPUBalloon{UUID: "GPU-n1-0", LentMiB: 10 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/owner/main", 24*gib, 10*gib, 10*gib)}})
	eventually(t, "borrower evicted after the restart", func() bool { return slices.Equal(a.evictedPods(), []string{"default/borrower"}) })
}

// TestReclaimRefusedIsAskedAgain: a PodDisruptionBudget refuses the reclaim
// eviction; the owner still needs its memory, so the scheduler says so and asks
// again. The second eviction deletes the pod at once (its deletion may reach the
// scheduler before the eviction's outcome): the Preempted event is still posted.
func TestReclaimRefusedIsAskedAgain(t *testing.T) {
	a := balloonCluster(t)
	a.evictDeletes = true
	a.publishBalloons("n1", annv1.GPUBalloon{UUID: "GPU-n1-0", LentMiB: 10 * gib, Owners: 1,
		Lenders: []annv1.Lender{lender("default/owner/main", 24*gib, 10*gib, 10*gib)}})
	a.mu.Lock()
	a.protected["default/borrower"] = true
	a.mu.Unlock()
	a.pod("borrower", res(string(translate.ResourceMemory), "20", string(translate.ResourceCore), "30"), onNode("n1"), created(time.Minute),
		ann(schedv1.PriorityAnnotation, "P2", annv1.AssignmentKey, memAssignment("GPU-n1-0", 20*gib),
			annv1.BorrowedKey, `{"version":"v1","gpus":[{"uuid":"GPU-n1-0","memoryMiB":10240,"from":["default/owner/main"]}]}`))
	a.start(testConfig())
	eventually(t, "refusal reported", func() bool { return a.eventFor("borrower", "BalloonReclaimBlocked", "default/owner") })
	a.mu.Lock()
	a.protected["default/borrower"] = false
	a.mu.Unlock()
	eventually(t, "evicted when asked again", func() bool { return slices.Equal(a.evictedPods(), []string{"default/borrower"}) })
	eventually(t, "Preempted posted", func() bool { return a.eventFor("borrower", "Preempted", "default/owner") })
}
