package kubesched

import (
	"testing"
	"time"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

const wholeGPU0 = `{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":"GPU-n1-0"}]}]}`

// A P0 pod on a full node evicts the P3 pod there through the Eviction
// API, is nominated meanwhile, and the freed GPU is held for it: a P2 pod
// arriving during the victim's grace period does not take it. When the
// victim is gone the P0 pod is bound there.
func TestPreemptionEvictsNominatesAndHolds(t *testing.T) {
	a := newAPI(t)
	a.evictDeletes = false // the victim terminates in its own time
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.pod("victim", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour),
		ann(schedv1.PriorityAnnotation, "P3", annv1.AssignmentKey, wholeGPU0))
	a.start(testConfig())
	a.pod("urgent", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P0"))
	eventually(t, "victim evicted", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.evicted) == 1 && a.evicted[0] == "default/victim"
	})
	eventually(t, "urgent nominated to n1", func() bool { return a.get("urgent").Status.NominatedNodeName == "n1" })
	a.pod("filler", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P2"))
	time.Sleep(300 * time.Millisecond)
	if a.get("urgent").Spec.NodeName != "" || a.get("filler").Spec.NodeName != "" {
		t.Fatal("a pod was bound while the victim still held the GPU")
	}
	a.deletePod("victim") // the grace period ends
	eventually(t, "urgent bound on n1", func() bool { return a.get("urgent").Spec.NodeName == "n1" })
	time.Sleep(200 * time.Millisecond)
	if a.get("filler").Spec.NodeName != "" {
		t.Fatal("filler took the GPU held for urgent")
	}
	if !a.eventFor("victim", "Preempted", "urgent") {
		t.Fatal("no Preempted event on the victim")
	}
}

// An eviction refused with 429 (a PodDisruptionBudget) undoes the
// preemption: the victim keeps its GPU in the books, nothing is bound in
// its place, the preemptor says why and tries again later.
func TestPDBRefusalRollsPreemptionBack(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.protected["default/victim"] = true
	a.pod("victim", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour),
		ann(schedv1.PriorityAnnotation, "P3", annv1.AssignmentKey, wholeGPU0))
	a.start(testConfig())
	a.pod("urgent", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P0"))
	eventually(t, "urgent told about the budget", func() bool {
		return a.eventFor("urgent", "FailedScheduling", "PodDisruptionBudget")
	})
	a.pod("other", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P3"))
	time.Sleep(300 * time.Millisecond)
	if a.get("urgent").Spec.NodeName != "" || a.get("other").Spec.NodeName != "" {
		t.Fatal("a pod was bound on the GPU the protected victim still holds")
	}
	a.mu.Lock()
	a.protected["default/victim"] = false
	a.mu.Unlock()
	eventually(t, "urgent bound once the budget allows", func() bool { return a.get("urgent").Spec.NodeName == "n1" })
}

// A preemptor deleted while its victim terminates gives the victim its
// capacity back in the books: nothing is placed on it until it is gone.
func TestDeletedPreemptorHandsCapacityBackToTerminatingVictim(t *testing.T) {
	a := newAPI(t)
	a.evictDeletes = false
	a.gpuNode("n1", 1, 16*gib, "T4")
	a.pod("victim", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour),
		ann(schedv1.PriorityAnnotation, "P3", annv1.AssignmentKey, wholeGPU0))
	a.start(testConfig())
	a.pod("urgent", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P0"))
	eventually(t, "urgent nominated", func() bool { return a.get("urgent").Status.NominatedNodeName == "n1" })
	a.deletePod("urgent")
	a.pod("later", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P3"))
	time.Sleep(500 * time.Millisecond)
	if a.get("later").Spec.NodeName != "" {
		t.Fatal("later was bound on the GPU the terminating victim still holds")
	}
	a.deletePod("victim")
	eventually(t, "later bound once the victim is gone", func() bool { return a.get("later").Spec.NodeName == "n1" })
}

// A scheduler that starts while a preemption is in flight (its
// predecessor was killed after evicting) takes it over from the API
// server alone: the nominated pod holds the GPU its terminating victim
// frees, nothing else is evicted, a pod arriving meanwhile does not get
// the GPU, and the nominated pod is bound once the victim is gone.
func TestRestartTakesOverAPreemptionInFlight(t *testing.T) {
	a := newAPI(t)
	a.evictDeletes = false
	a.gpuNode("n1", 2, 16*gib, "T4")
	wholeGPU1 := `{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":"GPU-n1-1"}]}]}`
	a.pod("victim", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour), terminating(),
		ann(schedv1.PriorityAnnotation, "P3", annv1.AssignmentKey, wholeGPU0))
	a.pod("other", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour),
		ann(schedv1.PriorityAnnotation, "P1", annv1.AssignmentKey, wholeGPU1)) // filler cannot preempt it
	a.pod("urgent", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P0"), nominatedTo("n1"), created(time.Minute))
	a.start(testConfig())
	a.pod("filler", res(string(translate.ResourceGPU), "1"), ann(schedv1.PriorityAnnotation, "P2"))
	eventually(t, "filler reported", func() bool { return a.eventFor("filler", "FailedScheduling", "Insufficient tessera.io/gpu") })
	if a.get("urgent").Spec.NodeName != "" || a.get("filler").Spec.NodeName != "" {
		t.Fatal("a pod was bound while the victim still held the GPU")
	}
	a.mu.Lock()
	evicted := len(a.evicted)
	a.mu.Unlock()
	if evicted != 0 {
		t.Fatalf("%d evictions: the preemption in flight was not taken over", evicted)
	}
	a.deletePod("victim")
	eventually(t, "urgent bound on n1", func() bool { return a.get("urgent").Spec.NodeName == "n1" })
	as, err := annv1.ParseAssignment(a.get("urgent").Annotations[annv1.AssignmentKey])
	if err != nil || as.Containers[0].GPUs[0].UUID != "GPU-n1-0" {
		t.Fatalf("urgent's assignment %+v (%v): want the victim's GPU-n1-0", as, err)
	}
	time.Sleep(300 * time.Millisecond)
	if a.get("filler").Spec.NodeName != "" || a.get("other").DeletionTimestamp != nil {
		t.Fatal("filler was bound or other evicted")
	}
}
