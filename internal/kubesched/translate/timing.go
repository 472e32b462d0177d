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

// DeadlineAnnotation is when a pod that is still pending is given up: an
// RFC 3339 time ("2026-12-02T18:00:00Z") or a Go duration counted from
// the pod's creation ("6h"). Past it the scheduler drops the pod with a
// FailedScheduling event and a PodScheduled=False condition (reason
// DeadlineExceeded) and never tries it again; it does not delete the pod
// (docs/scheduler.md, Kubernetes scheduler). It overrides the class's
// priority.deadline.
const DeadlineAnnotation = "tessera.io/deadline"

// maxRelativeDeadline bounds a duration deadline: a year is a typo.
const maxRelativeDeadline = 366 * 24 * time.Hour

// Deadline reads the deadline annotation's value for a pod created at
// created: a positive Go duration of at most 8784h after it, or an RFC
// 3339 time (which may already have passed: the pod is then dropped at
// once). The error names the annotation and the value.
func Deadline(value string, created time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(value); err == nil {
		if d <= 0 || d > maxRelativeDeadline {
			return time.Time{}, fmt.Errorf("annotation %s=%q: a duration after the pod's creation must be positive and at most %v", DeadlineAnnotation, value, maxRelativeDeadline)
		}
		return created.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("annotation %s=%q: neither an RFC 3339 time (2026-12-02T18:00:00Z) nor a duration after creation (6h)", DeadlineAnnotation, value)
	}
	if t.IsZero() {
		return time.Time{}, fmt.Errorf("annotation %s=%q: the zero time is no deadline", DeadlineAnnotation, value)
	}
	return t, nil
}
