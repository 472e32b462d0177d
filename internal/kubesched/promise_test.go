package kubesched

import (
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// A rebuild (a node joined) while a bind is in flight keeps the promised
// placement: the GPU stays taken for the pod being bound, the next pod goes
// to the new node, and the slow bind lands where it was promised.
func TestRebuildKeepsBindsInFlight(t *testing.T) {
	a := newAPI(t)
	a.gpuNode("n1", 1, 16*gib, "T4")
	gate := make(chan struct{})
	a.gate["default/slow"] = gate
	a.start(testConfig())
	a.pod("slow", res(string(translate.ResourceGPU), "1"))
	eventually(t, "slow's bind in flight", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.binding["default/slow"]
	})
	a.gpuNode("n2", 1, 16*gib, "T4") // rebuild
	a.pod("next", res(string(translate.ResourceGPU), "1"))
	eventually(t, "next bound on the new node", func() bool { return a.get("next").Spec.NodeName == "n2" })
	close(gate)
	eventually(t, "slow bound where promised", func() bool { return a.get("slow").Spec.NodeName == "n1" })
	time.Sleep(100 * time.Millisecond)
	a.checkCapacity(16 * gib)
}
