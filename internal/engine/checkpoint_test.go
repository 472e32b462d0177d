package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A pod that declares a checkpoint interval is taken right after a
// checkpoint: "old" started first but checkpointed 10 s ago (every 990 s),
// "young" started 900 s ago without checkpoints; evicting old loses less.
// Without the interval the youngest goes, as before.
func TestVictimJustAfterACheckpointGoesFirst(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     string
	}{{990 * time.Second, "evict:old"}, {0, "evict:young"}, {2000 * time.Second, "evict:young"}} {
		cfg := baseConfig()
		cfg.Preemption = true
		e := newEngine(t, cfg, gpuNode("n1", 2))
		old := gpus("old", priority.P3, 1, 0)
		old.CheckpointInterval = tc.interval
		submit(t, e, old)
		e.Cycle(at(0))
		submit(t, e, gpus("young", priority.P3, 1, 100))
		e.Cycle(at(100))
		e.Events()
		submit(t, e, gpus("urgent", priority.P0, 1, 1000))
		e.Cycle(at(1000))
		got := strings.Join(placed(e), " ")
		if !strings.Contains(got, tc.want) || !strings.Contains(got, "urgent@n1") {
			t.Errorf("old's checkpoint interval %v: %q, want %s", tc.interval, got, tc.want)
		}
	}
}

func TestLastCheckpoint(t *testing.T) {
	start := at(0)
	for _, tc := range []struct {
		interval  time.Duration
		now, want time.Time
	}{
		{time.Hour, start.Add(59 * time.Minute), time.Time{}},
		{time.Hour, start.Add(time.Hour), start.Add(time.Hour)},
		{time.Hour, start.Add(150 * time.Minute), start.Add(2 * time.Hour)},
		{30 * time.Minute, start.Add(-time.Minute), time.Time{}},
	} {
		if got := lastCheckpoint(start, tc.interval, tc.now); !got.Equal(tc.want) {
			t.Errorf("lastCheckpoint(every %v, %v after start) = %v, want %v", tc.interval, tc.now.Sub(start), got, tc.want)
		}
	}
}
