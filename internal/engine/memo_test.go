package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// A pod whose reservation is on one node may be placed on another: the
// placeholder it held is then free, and a shape the placer remembered as
// fitting nowhere (while the placeholder held that capacity) may fit now.
// The memo must forget, or the freed GPUs sit idle until some unrelated
// pod ends.
func TestReservedPodPlacedElsewhereFreesItsPlaceholder(t *testing.T) {
	cfg := baseConfig()
	cfg.ReserveAfter, cfg.MaxReservations = time.Second, 1
	h100 := partition.NodeSpec{Name: "n2", Model: "H100", CPU: 64000, MemMiB: 1 << 20, GPUs: 4, GPUMemMiB: 81920}
	e := newEngine(t, cfg, gpuNode("n1", 4), h100)
	a100only := func(p *Pod) *Pod { p.Request.Models = []string{"A100"}; return p }
	// n1 (A100): a, b; n2 (H100): c..f.
	submit(t, e, a100only(gpus("a", priority.P2, 1, 0)), a100only(gpus("b", priority.P2, 1, 0)))
	h := func(p *Pod) *Pod { p.Request.Models = []string{"H100"}; return p }
	submit(t, e, h(gpus("c", priority.P2, 1, 0)), h(gpus("d", priority.P2, 1, 0)), h(gpus("e", priority.P2, 1, 0)), h(gpus("f", priority.P2, 1, 0)))
	e.Cycle(at(0))
	if got := strings.Join(placed(e), " "); got != "a@n1 b@n1 c@n2 d@n2 e@n2 f@n2" {
		t.Fatalf("setup placed %q", got)
	}
	// big (any model, 4 GPUs) waits and reserves n1's two free GPUs.
	submit(t, e, gpus("big", priority.P2, 4, 1))
	e.Cycle(at(5))
	if res := e.Reservations(); len(res) != 1 || res["big"] != 0 {
		t.Fatalf("reservations %v, want big on n1", res)
	}
	// n2 empties. In the next cycle "two" (A100 only, tried first) finds
	// n1's free GPUs held and fails; then big is placed
	// on n2, which lets n1's placeholder go.
	for _, k := range []string{"c", "d", "e", "f"} {
		if err := e.Complete(k); err != nil {
			t.Fatal(err)
		}
	}
	// (Of big's class, so it may not use big's placeholder; submitted
	// earlier — e.g. requeued with its old time — so it goes first.)
	submit(t, e, a100only(gpus("two", priority.P2, 2, 0)))
	e.Cycle(at(10))
	if got := strings.Join(placed(e), " "); got != "big@n2" {
		t.Fatalf("placed %q, want big@n2", got)
	}
	// Nothing else changes; n1 has two free GPUs and "two" must get them.
	e.Cycle(at(20))
	if got := strings.Join(placed(e), " "); got != "two@n1" {
		t.Errorf("placed %q, want two@n1: n1's freed placeholder stayed unused", got)
	}
}
