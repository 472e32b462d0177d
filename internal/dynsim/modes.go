package dynsim

import (
	"fmt"
	"time"

	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// Mode is one way of scheduling the same workload.
type Mode struct {
	Name string
	// Priorities: pods queue by class (else all queue as one class, FIFO).
	Priorities bool
	// Quotas: teams' queues with guarantees in one cohort (internal/quota
	// through the engine's admission stage), borrowing and reclaim.
	Quotas bool
	Engine engine.Config
	// MinRun protects preemptible pods (P2, P3) for this long after they
	// start; Preemptible says which classes may be evicted.
	MinRun      time.Duration
	Preemptible [priority.NumClasses]bool
}

// ModeNames lists the modes Modes knows, in report order.
var ModeNames = []string{"fifo", "priority_noaging", "full"}

// Modes returns the named mode. Every mode retries every pending pod each
// cycle (no backoff: the engine's exhaustion check keeps that cheap).
//
//   - fifo: one class, first come first served with backfill; no
//     preemption, no reservations, no ageing (a plain batch queue).
//   - priority_noaging: the full engine without ageing: classes, team
//     quotas (equal guarantees in one cohort unless configured), preemption
//     of P2/P3 by more urgent classes (10 min minimum run time, 30 min
//     cooldown), reservations after 10 min for pods that wait at the head.
//   - full: priority_noaging plus ageing: a waiting pod gains one class per
//     ageing step, up to the ceiling (by default P2: an old experiment
//     competes with training, not with inference); ageing never gives the
//     right to preempt: preemption uses the base class.
func Modes(name string, ageing priority.Ageing) (Mode, error) {
	noBackoff := queue.Config{EscalateTo: priority.P0}
	switch name {
	case "fifo":
		return Mode{Name: name, Engine: engine.Config{Queue: noBackoff}}, nil
	case "priority_noaging", "full":
		m := Mode{Name: name, Priorities: true, Quotas: true, MinRun: 10 * time.Minute, Preemptible: [4]bool{false, false, true, true},
			Engine: engine.Config{Queue: noBackoff, Preemption: true, Cooldown: 30 * time.Minute, RequeuePreempted: true,
				ReserveAfter: 10 * time.Minute, MaxReservations: 16, PreemptionSearches: 32}}
		if name == "full" {
			m.Engine.Queue.Ageing = ageing
		}
		return m, nil
	}
	return Mode{}, fmt.Errorf("mode %q: want one of %v", name, ModeNames)
}
