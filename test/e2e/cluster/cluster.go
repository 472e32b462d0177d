// Package cluster is the entry point of end-to-end tests: one call starts a
// control plane (controlplane), kwok and simulated GPU nodes (kwoknodes),
// and optionally kube-scheduler, and registers their teardown with the
// test, dumping the components' logs when the test failed.
//
//	c := cluster.Start(t, cluster.Options{Nodes: kwoknodes.MixedNodes("gpu", 20)})
//	c.Client().CoreV1().Pods("default").Create(...)
//
// Starting the tessera scheduler beside it: c.StartProcess(process.Spec{...})
// with c.AdminKubeconfig (or c.WriteKubeconfig for an identity of its own);
// Stop ends it with the rest.
package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/process"
)

// Options configure Start.
type Options struct {
	// Nodes are created, managed by kwok, and waited for until Ready.
	Nodes []kwoknodes.NodeSpec
	// KubeScheduler starts kube-scheduler (the default-scheduler) too.
	KubeScheduler        bool
	KubeSchedulerOptions controlplane.KubeSchedulerOptions
	// ControlPlane tunes the control plane; its Logf defaults to t.Logf.
	ControlPlane controlplane.Options
}

// Cluster is a running control plane with kwok nodes.
type Cluster struct {
	*controlplane.ControlPlane
	Kwok          *process.Process
	KubeScheduler *process.Process // nil unless Options.KubeScheduler
	Nodes         []kwoknodes.NodeSpec
	// StartupTime is how long Start took up to Ready nodes.
	StartupTime time.Duration
}

// Start brings the cluster up or fails the test, and stops it when the test
// ends (also on a failure or panic; if the test binary dies, the kernel
// kills the processes, see package process).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := StartContext(context.Background(), t, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartContext is Start returning the error. A start that fails stops
// what it started before returning; a started cluster is stopped when the
// test ends.
func StartContext(ctx context.Context, t testing.TB, opts Options) (c *Cluster, err error) {
	if opts.ControlPlane.Logf == nil {
		opts.ControlPlane.Logf = t.Logf
	}
	began := time.Now()
	cp, err := controlplane.Start(ctx, opts.ControlPlane)
	if err != nil {
		return nil, err
	}
	c = &Cluster{ControlPlane: cp, Nodes: opts.Nodes}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.Kwok, err = kwoknodes.Start(ctx, cp); err != nil {
		return c, err
	}
	if opts.KubeScheduler {
		if c.KubeScheduler, err = cp.StartKubeScheduler(ctx, opts.KubeSchedulerOptions); err != nil {
			return c, err
		}
	}
	if len(opts.Nodes) > 0 {
		if err := kwoknodes.Create(ctx, cp.Client(), opts.Nodes); err != nil {
			return c, err
		}
		wait, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(len(opts.Nodes))*200*time.Millisecond)
		defer cancel()
		if err := kwoknodes.WaitReady(wait, cp.Client(), opts.Nodes); err != nil {
			return c, fmt.Errorf("kwok nodes: %w (component errors: %v)", err, cp.Err())
		}
	}
	c.StartupTime = time.Since(began)
	t.Cleanup(func() { c.stop(t) })
	t.Logf("cluster: %s up with %d kwok nodes in %v (dir %s)", cp.URL, len(opts.Nodes), c.StartupTime.Round(time.Millisecond), cp.Dir)
	return c, nil
}

// stop dumps the logs of a failed test, then stops everything (Stop is
// idempotent: a test may have stopped the cluster itself).
func (c *Cluster) stop(t testing.TB) {
	if t.Failed() {
		for _, p := range c.Processes() {
			t.Logf("--- %s (pid %d) log tail, %s:\n%s", p.Name, p.PID, p.LogPath, p.Tail(3000))
		}
	}
	c.Stop()
}
