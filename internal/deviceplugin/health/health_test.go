package health

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

type recorder struct {
	mu      sync.Mutex
	healthy map[string]bool
	changes int
	history map[string][]bool // every transition, so fast flips are not missed
}

func (r *recorder) SetHealth(uuid string, healthy bool, _ string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.healthy[uuid]; ok && old == healthy || !ok && healthy {
		return false
	}
	r.healthy[uuid] = healthy
	r.changes++
	if r.history == nil {
		r.history = map[string][]bool{}
	}
	r.history[uuid] = append(r.history[uuid], healthy)
	return true
}

func (r *recorder) get(uuid string) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.healthy[uuid]
	return !ok || h, r.changes
}

func TestXidFilterAndRecovery(t *testing.T) {
	node := gputest.MustNew(gputest.DGXH100)
	node.Init()
	var uuids []string
	for i := 0; i < 8; i++ {
		uuids = append(uuids, node.Device(i).UUID)
	}
	rec := &recorder{healthy: map[string]bool{}}
	w := &Watcher{Lib: node, GPUs: uuids, Target: rec, IgnoredXids: []uint64{13, 43}, RecoverAfter: 150 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WaitMs: 10}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	node.InjectXid(0, 13)
	node.InjectXid(0, 43)
	node.Events <- nvml.EventData{Device: node.Devices[5], EventType: nvml.EventTypeDoubleBitEccError}
	wait(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.history[uuids[5]]) == 2
	})
	rec.mu.Lock()
	if h := rec.history[uuids[5]]; h[0] || !h[1] {
		t.Fatalf("GPU 5 transitions = %v, want unhealthy then recovered", h)
	}
	if len(rec.history[uuids[0]]) != 0 {
		t.Fatal("ignored Xids made GPU 0 unhealthy")
	}
	rec.mu.Unlock()
	// An event without a device affects every GPU.
	node.Events <- nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	wait(t, func() bool {
		for _, u := range uuids {
			if h, _ := rec.get(u); h {
				return false
			}
		}
		return true
	})
}

func wait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLostGPUMarksAll(t *testing.T) {
	node := gputest.MustNew(gputest.DGXH100)
	lost := true
	es := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			if lost {
				lost = false
				return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
			}
			time.Sleep(5 * time.Millisecond)
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	node.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return es, nvml.SUCCESS }
	uuids := []string{node.Device(0).UUID, node.Device(1).UUID}
	rec := &recorder{healthy: map[string]bool{}}
	w := &Watcher{Lib: node, GPUs: uuids, Target: rec, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), WaitMs: 5}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait(t, func() bool {
		a, _ := rec.get(uuids[0])
		b, _ := rec.get(uuids[1])
		return !a && !b
	})
}
