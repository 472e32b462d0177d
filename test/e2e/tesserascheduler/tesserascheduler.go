// Package tesserascheduler builds `cluster-scheduler` from this repository
// and runs `cluster-scheduler run` against an end-to-end control plane as
// the tessera-scheduler, with its metrics on a loopback port.
package tesserascheduler

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/process"
)

// BinaryEnv names a prebuilt cluster-scheduler (make test-e2e and make
// bench-e2e set it to the one make built); unset, Binary builds one.
const BinaryEnv = "TESSERA_CLUSTER_SCHEDULER"

// Name is the scheduler name its pods carry in spec.schedulerName.
const Name = "tessera-scheduler"

// MetricAttemptLatency is the scheduler's histogram of engine time per
// scheduling attempt.
const MetricAttemptLatency = "tessera_scheduler_scheduling_attempt_duration_seconds"

var build struct {
	once sync.Once
	path string
	err  error
}

// Binary returns $TESSERA_CLUSTER_SCHEDULER, or builds ./cmd/cluster-scheduler
// of the main module (once per test binary) into build/e2e of that
// checkout: a path shared by all checkouts on the machine (the binary
// cache) would let tests of one checkout run another's scheduler.
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", BinaryEnv, p, err)
		}
		return p, nil
	}
	build.once.Do(func() { build.path, build.err = buildBinary(ctx) })
	return build.path, build.err
}

func buildBinary(ctx context.Context) (string, error) {
	root, err := mainModuleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "build", "e2e")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build cluster-scheduler: %w", err)
	}
	// A name of our own, then a rename: test binaries of several packages
	// of this checkout may build at once.
	tmp, err := os.CreateTemp(dir, "cluster-scheduler-*")
	if err != nil {
		return "", fmt.Errorf("build cluster-scheduler: %w", err)
	}
	tmp.Close()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp.Name(), "./cmd/cluster-scheduler")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("go build ./cmd/cluster-scheduler in %s: %w\n%s", root, err, out)
	}
	path := filepath.Join(dir, "cluster-scheduler")
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("build cluster-scheduler: %w", err)
	}
	return path, nil
}

// mainModuleRoot finds the repository root above the working directory
// (a test runs in its package directory under test/e2e).
func mainModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/tessera-gpu/tessera\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/tessera-gpu/tessera above %s", dir)
		}
	}
}

// Options configure Start.
type Options struct {
	// Name of the process and its log file (default "tessera-scheduler";
	// give replicas distinct names).
	Name string
	// Kubeconfig defaults to the control plane's admin kubeconfig.
	Kubeconfig string
	// LeaderElect runs leader election (default off: one replica).
	LeaderElect bool
	// QPS and Burst of its API client (default 1000 and 1000).
	QPS, Burst int
	// Args are appended to the flags.
	Args []string
}

// Scheduler is a running cluster-scheduler.
type Scheduler struct {
	*process.Process
	// MetricsURL is http://127.0.0.1:<port>; /metrics, /healthz, /readyz.
	MetricsURL string
}

// Start runs `cluster-scheduler run` against cp and waits until its
// metrics endpoint answers /healthz. cp.Stop stops it (or cp.StopProcess).
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (*Scheduler, error) {
	path, err := Binary(ctx)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = Name
	}
	if opts.Kubeconfig == "" {
		opts.Kubeconfig = cp.AdminKubeconfig
	}
	if opts.QPS == 0 {
		opts.QPS, opts.Burst = 1000, 1000
	}
	// The metrics port is free when chosen; another test binary (the e2e
	// packages run in parallel) may bind it before the scheduler does: then
	// it is started again on another port, up to three times.
	for attempt := 1; ; attempt++ {
		s, err := start(ctx, cp, path, opts)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
}

func start(ctx context.Context, cp *controlplane.ControlPlane, path string, opts Options) (*Scheduler, error) {
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"run",
		"--kubeconfig=" + opts.Kubeconfig,
		"--scheduler-name=" + Name,
		"--leader-elect=" + strconv.FormatBool(opts.LeaderElect),
		"--kube-api-qps=" + strconv.Itoa(opts.QPS),
		"--kube-api-burst=" + strconv.Itoa(opts.Burst),
		"--metrics-bind-address=" + addr,
	}, opts.Args...)
	p, err := cp.StartProcess(process.Spec{Name: opts.Name, Path: path, Args: args})
	if err != nil {
		return nil, err
	}
	s := &Scheduler{Process: p, MetricsURL: "http://" + addr}
	if err := controlplane.WaitHealthy(ctx, p, s.MetricsURL+"/healthz"); err != nil {
		cp.StopProcess(p)
		return nil, fmt.Errorf("cluster-scheduler run (%s) did not come up: %w; log tail (%s):\n%s", path, err, p.LogPath, p.Tail(4096))
	}
	return s, nil
}

// WaitReady waits until /readyz answers 200 (caches synced; the leader,
// where leader election runs).
func (s *Scheduler) WaitReady(ctx context.Context) error {
	if err := controlplane.WaitHealthy(ctx, s.Process, s.MetricsURL+"/readyz"); err != nil {
		return fmt.Errorf("%s not ready: %w; log tail (%s):\n%s", s.Name, err, s.LogPath, s.Tail(4096))
	}
	return nil
}
