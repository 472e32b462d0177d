package agent

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tessera-gpu/tessera/internal/monitor/accounting"
	"github.com/tessera-gpu/tessera/internal/monitor/containerd"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/lease"
	"github.com/tessera-gpu/tessera/internal/monitor/metrics"
	"github.com/tessera-gpu/tessera/internal/region"
)

// LeaseRetry is how often a standby monitor tries to take the node lease.
var LeaseRetry = time.Second

// initNode sets up what is node-wide rather than per container: the node
// lease (one acting monitor per node, package lease) and the state
// directory's health (free space, failed writes).
func (a *Agent) initNode() {
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	a.Node = metrics.NewNode(a.Config.NodeName, a.Config.StateDir, a.Log)
	a.Node.MinFree = uint64(region.RegionSize + region.LimitsSize)
	a.Lease = &lease.Lease{Dir: a.Config.StateDir, Log: a.Log, Self: lease.Holder{Pod: pod, Node: a.Config.NodeName},
		OnWriteError: func(error) { a.Node.WriteErrors.WithLabelValues(lease.HolderFile).Inc() }}
	a.Node.Held = a.Lease.Held
	a.Reaper.Active = a.Lease.Held
	if a.Enforcer != nil {
		a.Enforcer.Active = a.Lease.Held
	}
	a.Registry.MustRegister(a.Node)
}

// runLease takes the node lease in the background (a standby keeps trying)
// and returns the function that gives it back. Call that only once the
// reaper and enforcer have stopped: the lease guards their writes.
func (a *Agent) runLease(ctx context.Context, loops *sync.WaitGroup) (release func()) {
	loops.Go(func() { a.Lease.Run(ctx, LeaseRetry) })
	loops.Go(func() {
		// The free-space log line must not wait for a scrape.
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			if _, err := a.Node.Check(); err != nil {
				a.Log.Debug("state directory free space", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return a.Lease.Release
}

// Warner posts Warning Events on pods (events.Recorder).
type Warner interface {
	Warn(ctx context.Context, owner identity.Owner, reason, message string)
}

// ReasonRegionSkipped is the Event reason of a container's state file the
// monitor cannot use (foreign, another ABI version, truncated, corrupt).
const ReasonRegionSkipped = "TesseraRegionUnusable"

// UseEvents posts the agent's findings as Events: enforcement findings and
// kills on the pod concerned, and a container's unusable region or limits
// file (once per file and reason) on the pod PodResources says holds it.
func (a *Agent) UseEvents(w Warner) {
	if a.Enforcer != nil {
		a.Enforcer.Event = func(ctx context.Context, o identity.Owner, reason, message string) {
			if a.Lease.Held() {
				w.Warn(ctx, o, reason, message)
			}
		}
	}
	a.Reader.OnNewSkip = func(s accounting.Skip) {
		owner, ok := a.Identity.Owner(s.Key)
		if !ok || !a.Lease.Held() {
			return
		}
		w.Warn(context.Background(), owner, ReasonRegionSkipped,
			fmt.Sprintf("tessera's %s file is unusable (%s): this container's GPU memory is not accounted by the node monitor: %v", s.File, s.Reason, s.Err))
	}
}

// UseContainerd names processes' containers through containerd (enforcement
// log lines and Events for processes outside any region; kills of processes
// containerd places in a Kubernetes container).
func (a *Agent) UseContainerd(r *containerd.Resolver) {
	if a.Enforcer == nil {
		return
	}
	a.Enforcer.ProcessOwner = func(ctx context.Context, pid uint32) (identity.Owner, bool) {
		c, ok := r.Lookup(ctx, pid)
		return c.Owner, ok
	}
}
