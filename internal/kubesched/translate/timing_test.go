package translate

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
)

func TestCheckpointInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{"30m": 30 * time.Minute, "1h30m": 90 * time.Minute, "1s": time.Second, "720h": 720 * time.Hour} {
		if got, err := CheckpointInterval(v); err != nil || got != want {
			t.Errorf("CheckpointInterval(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "30", "abc", " 30m", "30m ", "-5m", "0s", "500ms", "721h", "1e3h"} {
		if _, err := CheckpointInterval(v); err == nil || !strings.Contains(err.Error(), CheckpointAnnotation) {
			t.Errorf("CheckpointInterval(%q): %v, want an error naming %s", v, err, CheckpointAnnotation)
		}
	}
}

func TestEnginePodReadsTheCheckpointInterval(t *testing.T) {
	p := pod(ctr("c", map[corev1.ResourceName]string{ResourceGPU: "1"}))
	p.Annotations = map[string]string{CheckpointAnnotation: "45m"}
	ep, _, err := EnginePod(p, schedv1.Default(), 1024)
	if err != nil || ep.CheckpointInterval != 45*time.Minute {
		t.Fatalf("EnginePod: %+v, %v; want a 45m checkpoint interval", ep, err)
	}
	p.Annotations[CheckpointAnnotation] = "often"
	if _, _, err := EnginePod(p, schedv1.Default(), 1024); err == nil || !strings.Contains(err.Error(), "ns/p") || !strings.Contains(err.Error(), CheckpointAnnotation) {
		t.Errorf("bad interval: %v, want an error naming the pod and the annotation", err)
	}
}

// FuzzCheckpointInterval: whatever is accepted is within the bounds and
// reads back the same; whatever is refused says which annotation.
func FuzzCheckpointInterval(f *testing.F) {
	for _, s := range []string{"30m", "1h30m", "0s", "-1m", "721h", "9223372036854775807ns", "1.5h", "abc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := CheckpointInterval(v)
		if err != nil {
			if !strings.Contains(err.Error(), CheckpointAnnotation) {
				t.Fatalf("error %v does not name the annotation", err)
			}
			return
		}
		if d < minCheckpointInterval || d > maxCheckpointInterval {
			t.Fatalf("%q accepted as %v, out of bounds", v, d)
		}
		if again, err := CheckpointInterval(d.String()); err != nil || again != d {
			t.Fatalf("%q = %v does not read back: %v, %v", v, d, again, err)
		}
	})
}

func TestDeadline(t *testing.T) {
	created := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Time{
		"6h":                        created.Add(6 * time.Hour),
		"90m":                       created.Add(90 * time.Minute),
		"2026-12-02T18:00:00Z":      time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC),
		"2026-12-02T19:00:00+01:00": time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC),
		"2026-12-01T00:00:00Z":      time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), // passed: dropped at once
	} {
		if got, err := Deadline(v, created); err != nil || !got.Equal(want) {
			t.Errorf("Deadline(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "6", "-1h", "0s", "9000h", "tomorrow", "2026-12-02", "2026-12-02 18:00:00", " 6h", "0001-01-01T00:00:00Z"} {
		if _, err := Deadline(v, created); err == nil || !strings.Contains(err.Error(), DeadlineAnnotation) {
			t.Errorf("Deadline(%q): %v, want an error naming %s", v, err, DeadlineAnnotation)
		}
	}
}

// The annotation wins over the class's configured deadline; without it a
// class deadline counts from creation; a bad value refuses the pod.
func TestEnginePodReadsTheDeadline(t *testing.T) {
	created := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	cfg := schedv1.Default()
	cfg.Priority.Deadline = map[schedv1.Class]schedv1.Duration{schedv1.P2: {Duration: 12 * time.Hour}}
	p := pod(ctr("c", map[corev1.ResourceName]string{ResourceGPU: "1"}))
	p.CreationTimestamp.Time = created
	ep, _, err := EnginePod(p, cfg, 1024)
	if err != nil || !ep.Deadline.Equal(created.Add(12*time.Hour)) {
		t.Fatalf("class deadline: %v, %v; want creation + 12h", ep.Deadline, err)
	}
	p.Annotations = map[string]string{DeadlineAnnotation: "30m"}
	if ep, _, err = EnginePod(p, cfg, 1024); err != nil || !ep.Deadline.Equal(created.Add(30*time.Minute)) {
		t.Fatalf("annotation: %v, %v; want creation + 30m", ep.Deadline, err)
	}
	p.Annotations[DeadlineAnnotation] = "soon"
	if _, _, err := EnginePod(p, cfg, 1024); err == nil || !strings.Contains(err.Error(), DeadlineAnnotation) {
		t.Errorf("bad deadline: %v, want an error naming %s", err, DeadlineAnnotation)
	}
}

// FuzzDeadline: an accepted value is a non-zero time, after creation when
// it was a duration; a refused one names the annotation.
func FuzzDeadline(f *testing.F) {
	for _, s := range []string{"6h", "-1h", "0s", "8785h", "2026-12-02T18:00:00Z", "2026-12-02T18:00:00.5+05:30", "0001-01-01T00:00:00Z", "tomorrow", ""} {
		f.Add(s)
	}
	created := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		got, err := Deadline(v, created)
		if err != nil {
			if !strings.Contains(err.Error(), DeadlineAnnotation) {
				t.Fatalf("error %v does not name the annotation", err)
			}
			return
		}
		if got.IsZero() {
			t.Fatalf("%q accepted as the zero time", v)
		}
		if _, isDuration := time.ParseDuration(v); isDuration == nil && (!got.After(created) || got.After(created.Add(maxRelativeDeadline))) {
			t.Fatalf("duration %q accepted as %v, not within (creation, creation + %v]", v, got, maxRelativeDeadline)
		}
	})
}
