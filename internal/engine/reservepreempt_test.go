package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A pod's own reservation is capacity it may use, also when it preempts:
// planned with its placeholder still held, the node it waited for looked
// fuller than it is, and the pod evicted four pods on another node instead
// of the two that stood between it and its reserved node.
func TestPreemptionCountsTheOwnReservation(t *testing.T) {
	cfg := baseConfig()
	cfg.Preemption = true
	cfg.ReserveAfter, cfg.MaxReservations = time.Second, 1
	e := newEngine(t, cfg, gpuNode("n1", 4), gpuNode("n2", 4))
	var small []*Pod
	for i := range 6 {
		p := gpus(fmt.Sprintf("s%d", i), priority.P3, 1, 0)
		p.MinRun = 10 * time.Minute
		small = append(small, p)
	}
	submit(t, e, small...)
	e.Cycle(at(0))
	var onN1 []string
	for _, p := range small {
		if r, ok := e.Running(p.Key); ok && r.Decision.Node == 0 {
			onN1 = append(onN1, p.Key)
		}
	}
	placed(e)
	if len(onN1) != 2 && len(onN1) != 4 {
		t.Fatalf("setup: %d pods on n1", len(onN1))
	}
	wantNode, wantVictims := 0, onN1
	if len(onN1) == 4 { // binpack filled n1 first: the pair is on n2
		wantNode, wantVictims = 1, nil
		for _, p := range small {
			if r, _ := e.Running(p.Key); r.Decision.Node == 1 {
				wantVictims = append(wantVictims, p.Key)
			}
		}
	}
	// Inside the small pods' minimum run time nothing may be evicted: big
	// reserves the node with two free GPUs.
	submit(t, e, gpus("big", priority.P1, 4, 1))
	e.Cycle(at(5))
	if got := placed(e); len(got) != 0 {
		t.Fatalf("placed %v inside the minimum run time", got)
	}
	if res := e.Reservations(); len(res) != 1 || res["big"] != wantNode {
		t.Fatalf("reservations %v, want big on node %d", res, wantNode)
	}
	e.Cycle(at(700)) // past the minimum run time
	var victims []string
	bigNode := -1
	for _, ev := range e.Events() {
		switch ev.Kind {
		case Preempted:
			victims = append(victims, ev.Pod.Key)
		case Placed:
			if ev.Pod.Key == "big" {
				bigNode = ev.Decision.Node
			}
		}
	}
	slices.Sort(victims)
	slices.Sort(wantVictims)
	if bigNode != wantNode || !slices.Equal(victims, wantVictims) {
		t.Errorf("big on node %d evicting %s; want node %d evicting %s", bigNode, strings.Join(victims, ","), wantNode, strings.Join(wantVictims, ","))
	}
	if _, ok := e.Reservations()["big"]; ok {
		t.Errorf("big's reservation outlived its placement: %v", e.Reservations())
	}
}
