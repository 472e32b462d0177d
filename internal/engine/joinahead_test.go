package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// Where an aged experiment stands against a training backlog when one GPU
// frees: with the ceiling at P2 a P3 pod that waited a step competes as
// P2. Joining at reach it queues behind the P2 pod that was waiting
// before it reached P2, so training gets the GPU; joining ahead it goes
// before every pod that did not age into P2, so it gets the GPU although
// the training pod was submitted first.
func TestJoinAheadGivesFreedCapacityToTheAgedPod(t *testing.T) {
	for join, want := range map[priority.Join]string{priority.JoinAtReach: "train@n1", priority.JoinAhead: "exp@n1"} {
		cfg := baseConfig()
		cfg.Queue.Ageing = priority.Ageing{Step: 1000 * time.Second, Ceiling: priority.P2, Join: join}
		e := newEngine(t, cfg, gpuNode("n1", 1))
		busy := gpus("busy", priority.P0, 1, 0)
		busy.Preemptible = false
		submit(t, e, busy)
		e.Cycle(at(0))
		placed(e)
		submit(t, e, gpus("train", priority.P2, 1, 10), gpus("exp", priority.P3, 1, 100))
		e.Cycle(at(600)) // nothing frees, nobody ages yet
		if got := placed(e); len(got) != 0 {
			t.Fatalf("join %v: %v placed on a full node", join, got)
		}
		if err := e.Complete("busy"); err != nil {
			t.Fatal(err)
		}
		e.Cycle(at(1200)) // exp waited 1100 s: P2
		if got := strings.Join(placed(e), " "); got != want {
			t.Errorf("join %v: %q placed, want %q", join, got, want)
		}
	}
}
