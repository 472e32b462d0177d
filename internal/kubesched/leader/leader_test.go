package leader

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	cfgv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

// Two replicas over one API server: exactly one leads; when the leader
// stops, the other leads within the lease duration, and never both at once.
func TestOnlyOneLeadsAndTheStandbyTakesOver(t *testing.T) {
	client := fake.NewClientset()
	cfg := cfgv1.LeaderElectionConfig{Enabled: true, LeaseNamespace: "kube-system", LeaseName: "tessera-scheduler",
		LeaseDuration: cfgv1.Duration{Duration: 2 * time.Second}, RenewDeadline: cfgv1.Duration{Duration: 1500 * time.Millisecond},
		RetryPeriod: cfgv1.Duration{Duration: 200 * time.Millisecond}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var leading atomic.Int32
	var mu sync.Mutex
	var maxConcurrent int32
	started := map[string]time.Time{}
	ctxs := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[id] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = Run(ctx, client, cfg, id, log, func(bool) {}, func(lctx context.Context) {
				n := leading.Add(1)
				mu.Lock()
				maxConcurrent = max(maxConcurrent, n)
				started[id] = time.Now()
				mu.Unlock()
				<-lctx.Done()
				leading.Add(-1)
			})
		}()
	}
	first := waitLeader(t, &mu, started, "")
	time.Sleep(2 * cfg.LeaseDuration.Duration) // the standby must not take over a renewing leader
	mu.Lock()
	if len(started) != 1 {
		t.Fatalf("both replicas led while the leader renewed: %v", started)
	}
	mu.Unlock()
	stopped := time.Now()
	ctxs[first]() // the leader stops: the lease is released on cancel
	second := waitLeader(t, &mu, started, first)
	mu.Lock()
	took := started[second].Sub(stopped)
	mu.Unlock()
	if took > Settle(cfg) {
		t.Fatalf("standby %s took over after %v, more than the lease duration %v", second, took, Settle(cfg))
	}
	ctxs[second]()
	wg.Wait()
	if maxConcurrent != 1 {
		t.Fatalf("%d replicas led at once", maxConcurrent)
	}
}

func waitLeader(t *testing.T, mu *sync.Mutex, started map[string]time.Time, not string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		for id := range started {
			if id != not {
				mu.Unlock()
				return id
			}
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no replica led")
	return ""
}
