// Package agent wires the node monitor together: identity (PodResources),
// accounting and GPU metrics served over HTTP, the reaper and the enforcer.
// cmd/vgpu-monitor only parses flags and calls Run.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/arbiterproc"
	"github.com/tessera-gpu/tessera/internal/balloon"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/health"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/accounting"
	"github.com/tessera-gpu/tessera/internal/monitor/balloons"
	"github.com/tessera-gpu/tessera/internal/monitor/enforce"
	"github.com/tessera-gpu/tessera/internal/monitor/gpus"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/lease"
	"github.com/tessera-gpu/tessera/internal/monitor/metrics"
	"github.com/tessera-gpu/tessera/internal/monitor/reaper"
)

// arbiterRescan is how often the arbiter lists the state directory for new
// and removed allocations.
const arbiterRescan = 200 * time.Millisecond

// Agent is one running monitor.
type Agent struct {
	Config   *configv1.MonitorConfig
	Log      *slog.Logger
	Identity *identity.Resolver
	GPUs     *gpus.Node // nil: NVML unavailable, per-GPU series and enforcement off
	Registry *prometheus.Registry
	Counters *metrics.Agent
	Reader   *accounting.Reader
	Reaper   *reaper.Reaper
	// Enforcer is the out-of-band check (nil without NVML).
	Enforcer *enforce.Enforcer
	// Balloons is the memory-balloon controller (nil unless balloon.enabled; the
	// caller sets its Pods, Evictor and Publisher, which need the API server).
	Balloons *balloons.Controller
	// Lease makes one monitor per node the acting one (node.go).
	Lease *lease.Lease
	Node  *metrics.Node
	// Arbiter hands out compute time between gpu-core tenants in this
	// process (nil when disabled or run as a process of its own).
	Arbiter *arbiter.Arbiter
	// ArbiterProcess runs the arbiter as a process of its own
	// (arbiter.process; nil otherwise).
	ArbiterProcess *arbiterproc.Supervisor
}

// New builds an agent from a validated configuration.
func New(cfg *configv1.MonitorConfig, log *slog.Logger, source identity.Source, node *gpus.Node) *Agent {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counters := metrics.NewAgent(reg, cfg.NodeName)
	a := &Agent{Config: cfg, Log: log, Identity: &identity.Resolver{Source: source}, GPUs: node, Registry: reg, Counters: counters}
	a.Reader = &accounting.Reader{StateDir: cfg.StateDir, Log: log, OnSkip: func(s accounting.Skip) {
		counters.Skipped.WithLabelValues(s.Reason, s.File).Inc()
	}}
	a.Reaper = &reaper.Reaper{StateDir: cfg.StateDir, ProcRoot: cfg.ProcRoot, Log: log, OnReap: func(_ string, procs int, bytes uint64) {
		counters.ReapedSlots.Add(float64(procs))
		counters.ReapedBytes.Add(float64(bytes))
	}}
	if node != nil {
		a.Enforcer = &enforce.Enforcer{Config: cfg.Enforcement, ProcRoot: cfg.ProcRoot, GPUs: node, Owner: a.Identity.Owner, Log: log,
			// Its own reader: the scrape's reader counts the skips.
			Reader:   &accounting.Reader{StateDir: cfg.StateDir, Log: log},
			OnDetect: func(v enforce.Violation) { counters.Bypass.WithLabelValues(v.Kind).Inc() },
			OnKill:   func(hostproc.Process) { counters.Kills.Inc() },
			OnSpare:  func(_ hostproc.Process, reason string) { counters.Spared.WithLabelValues(reason).Inc() },
		}
	}
	if cfg.Balloon.Enabled {
		a.Balloons = newBalloons(cfg, log, a.Identity, node, metrics.NewBalloon(reg, cfg.NodeName))
	}
	if ac := cfg.Arbiter; ac.Enabled {
		policy := arbiter.Policy{Quantum: ac.Quantum.Duration, IdleAfter: ac.IdleAfter.Duration,
			PriorityHold: ac.PriorityHold.Duration, PriorityFloor: float64(ac.PriorityFloorPercent) / 100,
			TurnGrace: ac.TurnGrace.Duration}
		if ac.Process {
			a.ArbiterProcess = &arbiterproc.Supervisor{Log: log, Config: arbiterproc.Config{
				StateDir: cfg.StateDir, Tick: ac.Tick.Duration, HandOverPoll: ac.HandOverPoll.Duration,
				Rescan: arbiterRescan, Policy: policy,
				RealtimePriority: ac.RealtimePriority, MemoryLimit: int64(ac.MemoryLimitMiB) << 20,
				LogLevel: cfg.Log.Level, LogFormat: cfg.Log.Format}}
		} else {
			a.Arbiter = &arbiter.Arbiter{StateDir: cfg.StateDir, Tick: ac.Tick.Duration, HandOverPoll: ac.HandOverPoll.Duration,
				Rescan: arbiterRescan, Log: log,
				RealtimePriority: ac.RealtimePriority, Policy: policy}
		}
	}
	c := &metrics.Collector{Node: cfg.NodeName, Reader: a.Reader, Owner: a.Identity.Owner, Processes: a.Reaper.Owners}
	if node != nil {
		c.GPUs = node
	}
	reg.MustRegister(c)
	a.initNode()
	// Grants are written into limits files: only the monitor holding the
	// node lease arbitrates (a DaemonSet surge runs two).
	if a.Arbiter != nil {
		a.Arbiter.Active = a.Lease.Held
	}
	if a.ArbiterProcess != nil {
		a.ArbiterProcess.Active = a.Lease.Held
	}
	return a
}

// HealthWatcher is the device plugin's NVML event watcher feeding the GPUs'
// health and Xid counts.
func (a *Agent) HealthWatcher() *health.Watcher {
	return &health.Watcher{Lib: a.GPUs.Lib(), GPUs: a.GPUs.UUIDs(), Target: a.GPUs, Log: a.Log,
		IgnoredXids: a.Config.Health.IgnoredXids, RecoverAfter: a.Config.Health.RecoverAfter.Duration,
		OnXid: a.GPUs.ObserveXid, WaitMs: 200}
}

// Handler serves /metrics, /healthz and /readyz.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", gzipFast(promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn), DisableCompression: true})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Identity.Ready() {
			http.Error(w, "PodResources has not answered yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Run serves and runs the loops until ctx ends. ln may be nil: it listens on
// the configured address.
func (a *Agent) Run(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", a.Config.ListenAddress); err != nil {
			return fmt.Errorf("listen %s: %w", a.Config.ListenAddress, err)
		}
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	// The loops call NVML: they must all have returned before the caller
	// shuts NVML down.
	var loops sync.WaitGroup
	defer a.runLease(ctx, &loops)() // given back after the loops below have returned
	defer loops.Wait()
	defer cancel()
	loops.Go(func() {
		a.Identity.Run(ctx, a.Config.IdentityInterval.Duration, func(err error) {
			a.Counters.IdentityErrors.Inc()
			a.Log.Warn("identity refresh failed; keeping the previous mapping", "err", err)
		})
	})
	loops.Go(func() { a.Reaper.Run(ctx, a.Config.ReapInterval.Duration) })
	if a.Arbiter != nil {
		loops.Go(func() { a.Arbiter.Run(ctx) })
	}
	if a.ArbiterProcess != nil {
		loops.Go(func() {
			defer a.ArbiterProcess.Close()
			if err := a.ArbiterProcess.Run(ctx); err != nil {
				a.Log.Error("compute arbiter not run: hooks keep their static shares", "err", err)
			}
		})
	}
	if a.Enforcer != nil {
		loops.Go(func() { a.Enforcer.Run(ctx, a.Config.Enforcement.Interval.Duration) })
	}
	if a.Balloons != nil && a.Balloons.Pods != nil {
		loops.Go(func() { a.runBalloons(ctx, a.Config.Balloon.Interval.Duration) })
	}
	if a.GPUs != nil && a.Config.Health.Enabled {
		loops.Go(func() {
			if err := a.HealthWatcher().Run(ctx); err != nil {
				a.Log.Warn("GPU health and Xid events not watched", "err", err)
			}
		})
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	}
}

// newBalloons builds the balloon controller from the configuration. GPU memory
// comes from NVML; without NVML no GPU is known and the controller leaves every
// cap alone.
func newBalloons(cfg *configv1.MonitorConfig, log *slog.Logger, id *identity.Resolver, node *gpus.Node, m *metrics.Balloon) *balloons.Controller {
	b := cfg.Balloon
	physical := func(string) (uint64, bool) { return 0, false }
	if node != nil {
		physical = node.MemoryTotal
	}
	return &balloons.Controller{
		StateDir: cfg.StateDir,
		Policy: balloon.Policy{Window: b.Window.Duration, Settle: b.Settle.Duration, MarginFraction: float64(b.MarginPercent) / 100,
			MinFloorBytes: uint64(b.MinFloorMiB) << 20, WaitMS: uint64(b.WaitMS)},
		Owner: id.Owner, Physical: physical, Metrics: m, Log: log,
	}
}

// runBalloons runs the balloon controller's passes while this monitor holds
// the node lease: the controller writes caps into limits files and evicts
// pods, which a standby monitor (a DaemonSet surge) must never do.
func (a *Agent) runBalloons(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer a.Balloons.Close()
	for {
		if a.Lease.Held() {
			if err := a.Balloons.Step(ctx); err != nil {
				a.Log.Warn("balloon pass failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
