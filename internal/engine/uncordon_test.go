package engine

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A node that comes back from a cordon is capacity gained, like a node
// joining: shapes the placer remembered as fitting nowhere must be tried
// again, or pods wait on a free node until some unrelated pod ends.
func TestUncordonedNodeIsTriedAgain(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n1", 2))
	e.cluster.Cordon(0, true)
	submit(t, e, gpus("p", priority.P2, 1, 0))
	e.Cycle(at(1))
	if got := placed(e); len(got) != 0 {
		t.Fatalf("placed %v on a cordoned node", got)
	}
	e.cluster.Cordon(0, false)
	e.Cycle(at(2))
	if got := strings.Join(placed(e), " "); got != "p@n1" {
		t.Errorf("placed %q after the node was uncordoned, want p@n1", got)
	}
}
