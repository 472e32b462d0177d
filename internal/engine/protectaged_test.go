package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A P3 pod that starts after ageing to P1 runs at P1 with ProtectAged: a
// P1 pod cannot evict it (it would throw away the wait that earned the
// start), a P0 pod can. Without ProtectAged the P1 pod evicts it.
func TestProtectAgedRunsAtTheReachedClass(t *testing.T) {
	for _, protect := range []bool{true, false} {
		cfg := baseConfig()
		cfg.Queue.Ageing = priority.Ageing{Step: 100 * time.Second, Ceiling: priority.P1}
		cfg.Preemption, cfg.ProtectAged, cfg.RequeuePreempted = true, protect, false
		e := newEngine(t, cfg, gpuNode("n1", 1))
		busy := gpus("busy", priority.P0, 1, 0)
		busy.Preemptible = false
		submit(t, e, busy, gpus("exp", priority.P3, 1, 0))
		e.Cycle(at(0))
		placed(e)
		if err := e.Complete("busy"); err != nil {
			t.Fatal(err)
		}
		e.Cycle(at(300)) // exp waited 3 steps: P1
		if r, ok := e.Running("exp"); !ok || (protect && r.Class != priority.P1) || (!protect && r.Class != priority.P3) {
			t.Fatalf("protect %v: exp running %v as %+v", protect, ok, r)
		}
		placed(e)
		submit(t, e, gpus("infer", priority.P1, 1, 400))
		e.Cycle(at(400))
		got := strings.Join(placed(e), " ")
		if protect && got != "" {
			t.Errorf("protected: a P1 pod evicted the aged P3 pod: %q", got)
		}
		if !protect && got != "evict:exp infer@n1" {
			t.Errorf("unprotected: %q, want the P1 pod to evict exp", got)
		}
		if !protect {
			continue
		}
		submit(t, e, gpus("rt", priority.P0, 1, 500))
		e.Cycle(at(500))
		if got := strings.Join(placed(e), " "); got != "evict:exp rt@n1" {
			t.Errorf("protected: %q, want the P0 pod to evict exp", got)
		}
	}
}
