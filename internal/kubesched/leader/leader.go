// Package leader runs a function only while this replica holds a
// coordination.k8s.io Lease (client-go leaderelection), so of two
// scheduler replicas exactly one schedules and the other takes over
// within the lease duration when the leader stops renewing.
package leader

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	cfgv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

// Run campaigns for the Lease as identity and calls lead with a context
// that ends when leadership is lost. It returns when ctx ends (the Lease
// is released, so a standby takes over at once) or when leadership was
// lost (an error: the caller should exit and be restarted, as
// kube-scheduler does, rather than schedule from a state another leader
// has moved on from). onChange reports leadership for metrics.
func Run(ctx context.Context, client kubernetes.Interface, cfg cfgv1.LeaderElectionConfig, identity string, log *slog.Logger,
	onChange func(leading bool), lead func(ctx context.Context)) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(cfg.LeaseNamespace, cfg.LeaseName),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	lost := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration.Duration,
		RenewDeadline:   cfg.RenewDeadline.Duration,
		RetryPeriod:     cfg.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading", "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName, "identity", identity)
				onChange(true)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				onChange(false)
				select {
				case <-ctx.Done():
				default:
					close(lost)
				}
			},
			OnNewLeader: func(id string) {
				if id != identity {
					log.Info("standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	select {
	case <-lost:
		return fmt.Errorf("leader election: lost the lease %s/%s", cfg.LeaseNamespace, cfg.LeaseName)
	default:
		return nil
	}
}

// Settle is how long a standby may take to lead after the leader stopped
// renewing: the lease duration plus a retry period.
func Settle(cfg cfgv1.LeaderElectionConfig) time.Duration {
	return cfg.LeaseDuration.Duration + cfg.RetryPeriod.Duration
}
