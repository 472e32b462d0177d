package translate

import (
	"fmt"
	"time"
)

// CheckpointAnnotation declares that a pod saves its work every interval
// from its start (a Go duration: "30m", "1h30m"). As a preemption victim
// it then loses only the work since its last checkpoint, so the scheduler
// prefers it right after one (docs/scheduler.md, Preemption).
const CheckpointAnnotation = "tessera.io/checkpoint-interval"

// Bounds of a checkpoint interval: shorter is not a checkpoint a scheduler
// can act on, longer than a month is a typo.
const (
	minCheckpointInterval = time.Second
	maxCheckpointInterval = 30 * 24 * time.Hour
)

// CheckpointInterval reads the checkpoint annotation's value: a Go
// duration of 1s to 720h, nothing around it. The error names the
// annotation and the value.
func CheckpointInterval(value string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%q: not a duration such as 30m or 1h30m", CheckpointAnnotation, value)
	}
	if d < minCheckpointInterval || d > maxCheckpointInterval {
		return 0, fmt.Errorf("annotation %s=%q: want %v to %v", CheckpointAnnotation, value, minCheckpointInterval, maxCheckpointInterval)
	}
	return d, nil
}
