package kubesched

import (
	"fmt"
	"testing"
	"time"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// A scheduler restarted in front of the same API server rebuilds what is
// taken from the bound pods alone: it binds nothing twice and places
// nothing on capacity that is taken.
func TestRestartRebuildsWithoutDoubleBooking(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 2, 40*gib, "A100")
	a.gpuNode("n2", 2, 40*gib, "A100")
	first := a.start(testConfig())
	for i := range 8 {
		a.pod(fmt.Sprint("a", i), res(string(translate.ResourceMemory), "10", string(translate.ResourceCore), "50"))
	}
	eventually(t, "8 pods bound", func() bool {
		for i := range 8 {
			if a.get(fmt.Sprint("a", i)).Spec.NodeName == "" {
				return false
			}
		}
		return true
	})
	first.stop()
	a.start(testConfig())
	for i := range 4 {
		a.pod(fmt.Sprint("b", i), res(string(translate.ResourceMemory), "10", string(translate.ResourceCore), "50"))
	}
	a.pod("small", res(string(translate.ResourceMemory), "10", string(translate.ResourceCore), "0"))
	eventually(t, "b0 reported unschedulable by the new scheduler", func() bool {
		return a.eventFor("b0", "FailedScheduling", "0/2 nodes are available: 2 Insufficient tessera.io/gpu-core.")
	})
	time.Sleep(200 * time.Millisecond)
	for i := range 4 {
		if n := a.get(fmt.Sprint("b", i)).Spec.NodeName; n != "" {
			t.Fatalf("b%d bound to %s on a full cluster", i, n)
		}
	}
	for i := range 8 {
		if got := a.bindsOf(fmt.Sprint("default/a", i)); got != 1 {
			t.Fatalf("a%d bound %d times", i, got)
		}
	}
	a.checkCapacity(40 * gib)
}

// On rebuild tessera.io/allocated (the device plugin's read-back) wins
// over the assignment when they differ.
func TestAllocatedWinsOverAssignment(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 2, 16*gib, "T4")
	assigned := `{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":"GPU-n1-0"}]}]}`
	allocated := `{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":"GPU-n1-1","slots":1}]}]}`
	a.pod("old", res(string(translate.ResourceGPU), "1"), onNode("n1"), created(time.Hour),
		ann(annv1.AssignmentKey, assigned, annv1.AllocatedKey, allocated))
	a.start(testConfig())
	a.pod("new", res(string(translate.ResourceGPU), "1"))
	eventually(t, "new bound", func() bool { return a.get("new").Spec.NodeName == "n1" })
	as, err := annv1.ParseAssignment(a.get("new").Annotations[annv1.AssignmentKey])
	if err != nil || as.Containers[0].GPUs[0].UUID != "GPU-n1-0" {
		t.Fatalf("new got %+v (%v); GPU-n1-1 is the one old really holds", as, err)
	}
}

// The scheduler dies with a bind on the wire; its successor places the pod
// again and binds it; the dead one's request then reaches the server and
// is refused (already bound). The pod is bound once, where the successor's
// assignment says.
func TestRestartWithABindOnTheWire(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 2, 16*gib, "T4")
	wire := make(chan struct{})
	a.crashGate["default/p"] = wire
	first := a.start(testConfig())
	a.pod("p", res(string(translate.ResourceGPU), "1"))
	eventually(t, "the first bind on the wire", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.binding["default/p"]
	})
	go first.stop()
	a.start(testConfig())
	eventually(t, "p bound by the successor", func() bool { return a.get("p").Spec.NodeName == "n1" })
	close(wire)
	time.Sleep(200 * time.Millisecond)
	if got := a.bindsOf("default/p"); got != 1 {
		t.Fatalf("%d successful binds", got)
	}
	a.pod("q", res(string(translate.ResourceGPU), "1"))
	eventually(t, "q bound", func() bool { return a.get("q").Spec.NodeName == "n1" })
	a.checkCapacity(16 * gib)
}
