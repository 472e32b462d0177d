// Command vgpu-monitor is tessera's node agent. It runs beside the device
// plugin on every GPU node (host pid namespace, the plugin's state directory
// mounted) and
//   - serves per-container and per-GPU metrics on /metrics (and /healthz,
//     /readyz), read from the accounting regions and NVML at scrape time;
//   - reclaims the region slots of dead processes (TESSERA_REAPER_NODE);
//   - compares what the driver says each process holds with the regions and
//     reports or kills processes that bypass the hook.
//
// See docs/metrics.md and docs/security.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/arbiterproc"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/monitor/agent"
	"github.com/tessera-gpu/tessera/internal/monitor/balloons"
	"github.com/tessera-gpu/tessera/internal/monitor/gpus"
)

func main() {
	// The compute arbiter's own process, which the monitor starts from
	// this binary (arbiter.process): hidden, not for operators to run.
	arbiterproc.MainIfSubcommand()
	// A scrape of a full node builds thousands of short-lived series; a
	// node agent should rather collect a little more often than hold twice
	// its live heap (GOGC still wins when set).
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-monitor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	cfg, opts, err := parseFlags(args)
	if err != nil {
		return err
	}
	log := cfg.Log.Logger("tessera-vgpu-monitor")

	source, closeSource, err := podResourcesSource(cfg.PodResourcesSocket)
	if err != nil {
		return err
	}
	defer closeSource()
	node, shutdown := openGPUs(log, opts.nvmlLibrary)
	defer shutdown()
	a := agent.New(cfg, log, source, node)
	if resolver, closeResolver := containerdResolver(log, cfg.Containerd); resolver != nil {
		defer closeResolver()
		a.UseContainerd(resolver)
	}
	if cfg.Enforcement.Events {
		rec, err := eventRecorder(cfg.Kubernetes.Kubeconfig, cfg.NodeName)
		if err != nil {
			log.Info("no Kubernetes API client: findings are reported by metric and log only", "err", err)
		} else {
			defer rec.Shutdown()
			a.UseEvents(rec)
		}
	}
	if a.Balloons != nil {
		api, err := kube.NewFromKubeconfig(cfg.Kubernetes.Kubeconfig)
		if err != nil {
			return fmt.Errorf("balloon.enabled needs the API server (pods' opt-in, evictions): %w", err)
		}
		a.Balloons.Pods = &balloons.KubePods{API: api, TTL: time.Minute}
		a.Balloons.Evictor = balloons.KubeEvictor{API: api}
		a.Balloons.Publisher = balloons.NodeAnnotation{API: api, Node: cfg.NodeName}
	}
	log.Info("vgpu-monitor starting", "listen", cfg.ListenAddress, "stateDir", cfg.StateDir, "policy", cfg.Enforcement.Policy, "gpus", node != nil)
	return a.Run(ctx, nil)
}

// openGPUs initialises NVML. Without it the monitor still serves the
// containers' accounting and reaps; per-GPU series and enforcement are off.
func openGPUs(log *slog.Logger, library string) (*gpus.Node, func()) {
	var nvmlOpts []nvml.LibraryOption
	if library != "" {
		nvmlOpts = append(nvmlOpts, nvml.WithLibraryPath(library))
	}
	lib := nvml.New(nvmlOpts...)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		log.Warn("NVML unavailable: no per-GPU metrics, no enforcement", "err", ret)
		return nil, func() {}
	}
	node, err := gpus.Open(lib)
	if err != nil {
		log.Warn("NVML devices unreadable: no per-GPU metrics, no enforcement", "err", err)
		lib.Shutdown()
		return nil, func() {}
	}
	return node, func() { lib.Shutdown() }
}

// options are the flags that are not configuration fields.
type options struct {
	nvmlLibrary string
}

// parseFlags resolves the configuration: defaults, then --config, then the
// flags that were set.
func parseFlags(args []string) (*configv1.MonitorConfig, options, error) {
	fs := flag.NewFlagSet("vgpu-monitor", flag.ContinueOnError)
	path := fs.String("config", "", "configuration file (api/config/v1 MonitorConfig)")
	var opts options
	fs.StringVar(&opts.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1 (default: the dynamic loader's search)")
	overrides := map[string]func(c *configv1.MonitorConfig, v string) error{
		"node-name":            func(c *configv1.MonitorConfig, v string) error { c.NodeName = v; return nil },
		"state-dir":            func(c *configv1.MonitorConfig, v string) error { c.StateDir = v; return nil },
		"proc-root":            func(c *configv1.MonitorConfig, v string) error { c.ProcRoot = v; return nil },
		"pod-resources-socket": func(c *configv1.MonitorConfig, v string) error { c.PodResourcesSocket = v; return nil },
		"listen-address":       func(c *configv1.MonitorConfig, v string) error { c.ListenAddress = v; return nil },
		"enforcement-policy":   func(c *configv1.MonitorConfig, v string) error { c.Enforcement.Policy = v; return nil },
		"containerd-socket":    func(c *configv1.MonitorConfig, v string) error { c.Containerd.Socket = v; return nil },
		"kubeconfig":           func(c *configv1.MonitorConfig, v string) error { c.Kubernetes.Kubeconfig = v; return nil },
		"arbiter-realtime-priority": func(c *configv1.MonitorConfig, v string) (err error) {
			if c.Arbiter.RealtimePriority, err = strconv.Atoi(v); err != nil {
				return fmt.Errorf("--arbiter-realtime-priority (arbiter.realtimePriority): %q is not a number", v)
			}
			return nil
		},
	}
	vals := map[string]*string{}
	for name := range overrides {
		vals[name] = fs.String(name, "", "overrides the config field of the same meaning")
	}
	if err := fs.Parse(args); err != nil {
		return nil, opts, err
	}
	cfg, err := configv1.LoadMonitor(*path)
	if err != nil {
		return nil, opts, err
	}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		if set, ok := overrides[f.Name]; ok && flagErr == nil {
			flagErr = set(cfg, *vals[f.Name])
		}
	})
	if flagErr != nil {
		return nil, opts, flagErr
	}
	if err := cfg.Validate(); err != nil {
		return nil, opts, fmt.Errorf("configuration: %w", err)
	}
	return cfg, opts, nil
}
