package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A reservation on a node that is then cordoned holds capacity no pod can
// use and keeps its pod waiting for a node that will never take it: the
// reservation must move to a node that admits the pod. Here the other node
// frees one GPU per round and a new 1-GPU pod arrives each round; without
// a reservation there, the 4-GPU pod never runs.
func TestReservationLeavesCordonedNode(t *testing.T) {
	cfg := baseConfig()
	cfg.ReserveAfter, cfg.MaxReservations = time.Second, 1
	e := newEngine(t, cfg, gpuNode("n1", 4), gpuNode("n2", 4))
	for i := range 8 {
		submit(t, e, gpus(fmt.Sprintf("s%d", i), priority.P2, 1, 0))
	}
	e.Cycle(at(0))
	placed(e)
	onNode := func(node int) []string {
		var out []string
		for i := range 8 {
			if r, ok := e.Running(fmt.Sprintf("s%d", i)); ok && r.Decision.Node == node {
				out = append(out, r.Pod.Key)
			}
		}
		return out
	}
	// Free two GPUs on n1: the big pod's reservation goes there.
	for _, k := range onNode(0)[:2] {
		if err := e.Complete(k); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, e, gpus("big", priority.P2, 4, 1))
	e.Cycle(at(5))
	placed(e)
	if res := e.Reservations(); len(res) != 1 || res["big"] != 0 {
		t.Fatalf("reservations %v, want big on n1", res)
	}
	e.cluster.Cordon(0, true)

	running := onNode(1)
	bigNode := -1
	for round := 0; round < 12 && bigNode < 0; round++ {
		now := at(10 * (round + 1))
		if err := e.Complete(running[0]); err != nil {
			t.Fatal(err)
		}
		running = running[1:]
		submit(t, e, gpus(fmt.Sprintf("new%d", round), priority.P2, 1, 10*(round+1)))
		e.Cycle(now)
		for _, ev := range e.Events() {
			if ev.Kind != Placed {
				continue
			}
			if ev.Pod.Key == "big" {
				bigNode = ev.Decision.Node
			} else {
				running = append(running, ev.Pod.Key)
			}
		}
		if n, ok := e.Reservations()["big"]; ok && n == 0 {
			t.Errorf("round %d: big's reservation is still on the cordoned node", round)
		}
	}
	if bigNode != 1 {
		t.Fatalf("big placed on node %d, want n2 (index 1): starved behind a reservation on a cordoned node", bigNode)
	}
}
