package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A reservation holds capacity against the pods behind its pod — backfill
// — not against more urgent ones: a P0 pod must not wait (or evict running
// work) while an idle GPU is held for an experiment.
func TestMoreUrgentPodMayUseALessUrgentReservation(t *testing.T) {
	cfg := baseConfig()
	cfg.ReserveAfter, cfg.MaxReservations = time.Second, 1
	e := newEngine(t, cfg, gpuNode("n1", 2))
	run := gpus("run", priority.P2, 1, 0)
	run.Preemptible = false
	submit(t, e, run)
	e.Cycle(at(0))
	submit(t, e, gpus("exp", priority.P3, 2, 1))
	e.Cycle(at(5)) // exp waits and holds n1's free GPU
	if res := e.Reservations(); len(res) != 1 {
		t.Fatalf("reservations %v, want exp's", res)
	}
	placed(e)
	submit(t, e, gpus("rt", priority.P0, 1, 6), gpus("late", priority.P3, 1, 6))
	e.Cycle(at(7))
	if got := strings.Join(placed(e), " "); got != "rt@n1" {
		t.Errorf("placed %q, want rt@n1 on the GPU held for the less urgent exp (and not late, behind exp)", got)
	}
	// exp keeps its reservation and gets the node once both have ended.
	for _, k := range []string{"run", "rt"} {
		if err := e.Complete(k); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(at(8))
	if got := strings.Join(placed(e), " "); got != "exp@n1" {
		t.Errorf("placed %q, want exp@n1", got)
	}
}
