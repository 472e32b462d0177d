package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A gang of two 1-GPU members behind a stream of 1-GPU pods on a full
// cluster: each cycle one GPU frees, too little for the gang, and a new
// single pod takes it — the gang starves. Once it has waited ReserveAfter,
// every member holds a reservation; freed GPUs are held for it and it
// starts. Without reservations it never starts.
func TestGangReservationStopsStarvation(t *testing.T) {
	for _, reserve := range []bool{true, false} {
		cfg := baseConfig()
		if reserve {
			cfg.ReserveAfter, cfg.MaxReservations = 100*time.Second, 4
		}
		e := newEngine(t, cfg, gpuNode("n1", 2), gpuNode("n2", 2))
		var running []string
		for i := range 4 {
			p := gpus(fmt.Sprintf("s%d", i), priority.P2, 1, 0)
			submit(t, e, p)
			running = append(running, p.Key)
		}
		e.Cycle(at(0))
		if got := len(placed(e)); got != 4 {
			t.Fatalf("setup: %d placed", got)
		}
		submit(t, e, member("g-a", "g", 2, priority.P2, 1, 0), member("g-b", "g", 2, priority.P2, 1, 0))
		started, reserved := false, 0
		for step := 1; step <= 20 && !started; step++ {
			now := step * 100
			// One running single pod ends, alternating nodes; a new one arrives.
			victim := running[0]
			if step%2 == 0 && len(running) > 2 {
				victim = running[2]
			}
			if err := e.Complete(victim); err != nil {
				t.Fatal(err)
			}
			running = removeKey(running, victim)
			submit(t, e, gpus(fmt.Sprintf("new%d", step), priority.P2, 1, now))
			e.Cycle(at(now))
			for _, ev := range e.Events() {
				switch {
				case ev.Kind == Placed && strings.HasPrefix(ev.Pod.Key, "g-"):
					started = true
				case ev.Kind == Placed:
					running = append(running, ev.Pod.Key)
				case ev.Kind == Reserved && strings.HasPrefix(ev.Pod.Key, "g-"):
					reserved++
				}
			}
		}
		if reserve && (!started || reserved != 2) {
			t.Errorf("with reservations: started %v, %d member reservations (want 2)", started, reserved)
		}
		if !reserve && started {
			t.Errorf("without reservations the gang started: the test does not starve it")
		}
		if reserve {
			for key := range e.Reservations() {
				if strings.HasPrefix(key, "g-") {
					t.Errorf("member %s still holds a reservation after the gang started", key)
				}
			}
		}
	}
}

func removeKey(keys []string, k string) []string {
	for i, x := range keys {
		if x == k {
			return append(keys[:i:i], keys[i+1:]...)
		}
	}
	return keys
}
