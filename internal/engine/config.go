package engine

import (
	"fmt"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// ConfigFrom turns the typed scheduler configuration into the engine's:
// ageing in whole classes (one class per Interval × 100 ÷ Step of wait, at
// most MaxBoost, never above Ceiling), escalation after a class's MaxWait
// to the ageing ceiling — not to P0: an experiment past its maximum wait
// goes first among training, it does not compete with realtime inference
// (the ceiling says which classes a waiting pod may overtake) — backfill
// reservations, the cooldown; ageing.classes says which classes age,
// ageing.join where an aged pod queues in the class it reached.
// Per-pod values
// (minimum run time, maximum wait) come from PodDefaults.
func ConfigFrom(c *schedv1.Config) (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("engine: %w", err)
	}
	a := c.Priority.Ageing
	ceiling, err := priority.ParseClass(string(a.Ceiling))
	if a.Ceiling == "" {
		ceiling, err = priority.P0, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("engine: priority.ageing.ceiling: %w", err)
	}
	// MaxBoost bounds the classes gained: the ceiling is at most that far
	// above P3; a per-class bound the whole-class queue does not model
	// finer (documented in docs/scheduler.md).
	if boost := a.MaxBoost / schedv1.PointsPerClass; int(priority.Lowest)-boost > int(ceiling) {
		ceiling = priority.Class(int(priority.Lowest) - boost)
	}
	ageing := priority.Ageing{Step: a.ClassStep(), Ceiling: ceiling}
	if a.Join != "" {
		if ageing.Join, err = priority.ParseJoin(a.Join); err != nil {
			return Config{}, fmt.Errorf("engine: priority.ageing.join: %w", err)
		}
	}
	for c := priority.P0; c <= priority.Lowest; c++ {
		ageing.Skip[c] = !a.Ages(schedv1.Classes[c])
	}
	return Config{
		Queue: queue.Config{Ageing: ageing, EscalateTo: ceiling,
			BackoffInitial: time.Second, BackoffMax: 10 * time.Second},
		ReserveAfter:    c.Priority.Backfill.ReserveAfter.Duration,
		MaxReservations: c.Priority.Backfill.MaxReservations,
		Preemption:      true,
		Cooldown:        c.Preemption.Cooldown.Duration,
	}, nil
}

// PodDefaults fills what the configuration says about a pod of class c:
// whether it is preemptible, its minimum run time, its maximum wait, and
// its deadline (the class's, counted from submission) unless it has its own.
func PodDefaults(c *schedv1.Config, p *Pod) {
	k := schedv1.Classes[p.Class]
	p.Preemptible = c.Preemption.Preemptible[k]
	p.MinRun = max(p.MinRun, c.Preemption.MinRunTime.Duration)
	if w, ok := c.Priority.MaxWait[k]; ok && p.MaxWait == 0 {
		p.MaxWait = w.Duration
	}
	if d, ok := c.Priority.Deadline[k]; ok && p.Deadline.IsZero() && d.Duration > 0 {
		p.Deadline = p.Submitted.Add(d.Duration)
	}
}
