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
