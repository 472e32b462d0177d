package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	cfgv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched"
	"github.com/tessera-gpu/tessera/internal/kubesched/leader"
	"github.com/tessera-gpu/tessera/internal/kubesched/metrics"
	"github.com/tessera-gpu/tessera/internal/kubesched/webhook"
)

const runHelp = `usage: cluster-scheduler run [flags]

Runs tessera's GPU scheduler against a Kubernetes API server. It places the
pods whose spec.schedulerName is --scheduler-name (default
tessera-scheduler) on nodes that carry the device plugin's
tessera.io/node-gpus inventory: it chooses the node and the GPUs, writes the
choice as the tessera.io/assignment annotation in the same Binding that sets
the pod's node, and the device plugin on that node hands out exactly those
GPUs. Every other pod stays with kube-scheduler; tessera counts what they use.

Pods ask for tessera.io/gpu (whole GPUs), tessera.io/gpu-mem (memory units
of --memory-unit) and tessera.io/gpu-core (percent of one GPU). Priority
classes, queues (team quotas with borrowing), preemption and gangs come from
the scheduling engine's YAML (kind SchedulerConfig, docs/scheduler.md), read
from --queue-config-map and reloaded when it changes; a bad edit keeps the
last good configuration and says why (an event on the ConfigMap, a log line
and tessera_scheduler_config_last_reload_successful 0).

Optionally, --webhook-bind-address with --webhook-cert-file/--webhook-key-file
serves a mutating admission webhook on /mutate (register it with a
MutatingWebhookConfiguration for pods): pods that request gpu-mem/gpu-core
get spec.schedulerName set to this scheduler (unless they name another one)
and tessera.io/gpu: 1 where they give no GPU count. It is off by default.

Run two replicas with --leader-elect=true: they share a Lease; only the
leader schedules and the other takes over within the lease duration.
Metrics are on --metrics-bind-address at /metrics, with /healthz and /readyz;
--profiling adds Go's pprof there under /debug/pprof/ (off by default).

Every flag can also be set in a --config file (version: v1, kind-less,
fields as in api/config/v1 SchedulerConfig); a flag given on the command
line wins over the file.

Examples:
  cluster-scheduler run --kubeconfig=$HOME/.kube/config --leader-elect=false
  cluster-scheduler run --queue-config-map=kube-system/tessera-queues   # in a pod: in-cluster config

flags:
`

// runFlag is one flag overriding a config field when given.
type runFlag struct {
	usage string
	set   func(c *cfgv1.SchedulerConfig, v string) error
}

var runFlags = map[string]runFlag{
	"kubeconfig":      {"kubeconfig file; empty: the in-cluster configuration", func(c *cfgv1.SchedulerConfig, v string) error { c.Kubeconfig = v; return nil }},
	"scheduler-name":  {"spec.schedulerName of the pods to place (default tessera-scheduler)", func(c *cfgv1.SchedulerConfig, v string) error { c.SchedulerName = v; return nil }},
	"leader-elect":    {"true: campaign for the Lease and schedule only while leading (default true)", func(c *cfgv1.SchedulerConfig, v string) error { return parseBool(&c.LeaderElection.Enabled, v) }},
	"profiling":       {"true: serve Go's pprof at /debug/pprof/ on the metrics listener (default false)", func(c *cfgv1.SchedulerConfig, v string) error { return parseBool(&c.Profiling, v) }},
	"lease-namespace": {"namespace of the leader election Lease (default kube-system)", func(c *cfgv1.SchedulerConfig, v string) error { c.LeaderElection.LeaseNamespace = v; return nil }},
	"lease-name":      {"name of the leader election Lease (default tessera-scheduler)", func(c *cfgv1.SchedulerConfig, v string) error { c.LeaderElection.LeaseName = v; return nil }},
	"lease-duration": {"how long a standby waits for a silent leader (default 15s)", func(c *cfgv1.SchedulerConfig, v string) error {
		return parseDuration(&c.LeaderElection.LeaseDuration, v)
	}},
	"renew-deadline": {"how long the leader tries to renew before it stops (default 10s)", func(c *cfgv1.SchedulerConfig, v string) error {
		return parseDuration(&c.LeaderElection.RenewDeadline, v)
	}},
	"retry-period":         {"how often replicas try the Lease (default 2s)", func(c *cfgv1.SchedulerConfig, v string) error { return parseDuration(&c.LeaderElection.RetryPeriod, v) }},
	"kube-api-qps":         {"client requests per second to the API server (default 50)", setQPS},
	"kube-api-burst":       {"client request burst (default 100)", func(c *cfgv1.SchedulerConfig, v string) error { return parseInt(&c.KubeAPIBurst, v) }},
	"metrics-bind-address": {"host:port for /metrics, /healthz, /readyz (default :10259)", func(c *cfgv1.SchedulerConfig, v string) error { c.MetricsBindAddress = v; return nil }},
	"queue-config-map":     {"namespace/name of the ConfigMap holding the engine's SchedulerConfig YAML under key config.yaml; empty: defaults, no queues", func(c *cfgv1.SchedulerConfig, v string) error { c.QueueConfigMap = v; return nil }},
	"policy":               {"placement policy: tessera, fgd, bestfit, binpack, spread, random (default tessera)", func(c *cfgv1.SchedulerConfig, v string) error { c.Policy = v; return nil }},
	"memory-unit":          {"the device plugin's gpu-mem unit, e.g. 1Gi (must match the plugin's memoryUnit)", func(c *cfgv1.SchedulerConfig, v string) error { return parseQuantity(&c.MemoryUnit, v) }},
	"bind-workers":         {"binds, evictions and status patches in flight at once (default 64)", func(c *cfgv1.SchedulerConfig, v string) error { return parseInt(&c.BindWorkers, v) }},
	"webhook-bind-address": {"host:port of the optional mutating admission webhook (/mutate); empty: off", func(c *cfgv1.SchedulerConfig, v string) error { c.Webhook.BindAddress = v; return nil }},
	"webhook-cert-file":    {"TLS certificate of the webhook (PEM)", func(c *cfgv1.SchedulerConfig, v string) error { c.Webhook.CertFile = v; return nil }},
	"webhook-key-file":     {"TLS key of the webhook (PEM)", func(c *cfgv1.SchedulerConfig, v string) error { c.Webhook.KeyFile = v; return nil }},
	"log-level":            {"debug, info, warn or error", func(c *cfgv1.SchedulerConfig, v string) error { c.Log.Level = v; return nil }},
	"log-format":           {"json or text", func(c *cfgv1.SchedulerConfig, v string) error { c.Log.Format = v; return nil }},
}

// boolFlag is a string flag that may be given without a value.
type boolFlag struct{ v *string }

func (b boolFlag) String() string {
	if b.v == nil {
		return ""
	}
	return *b.v
}
func (b boolFlag) Set(s string) error { *b.v = s; return nil }
func (b boolFlag) IsBoolFlag() bool   { return true }

func parseBool(dst *bool, v string) error {
	b, err := strconv.ParseBool(v)
	*dst = b
	return err
}

func parseInt(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	*dst = n
	return err
}

func parseDuration(dst *cfgv1.Duration, v string) error {
	d, err := time.ParseDuration(v)
	dst.Duration = d
	return err
}

func parseQuantity(dst *resource.Quantity, v string) error {
	q, err := resource.ParseQuantity(v)
	*dst = q
	return err
}

func setQPS(c *cfgv1.SchedulerConfig, v string) error {
	f, err := strconv.ParseFloat(v, 32)
	c.KubeAPIQPS = float32(f)
	return err
}

// runConfig parses the flags over the file over the defaults.
func runConfig(args []string, stderr io.Writer) (*cfgv1.SchedulerConfig, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "scheduler process config file (version: v1); flags override it")
	vals := map[string]*string{}
	for name, f := range runFlags {
		v := new(string)
		vals[name] = v
		if name == "leader-elect" || name == "profiling" {
			fs.Var(boolFlag{v}, name, f.usage) // --leader-elect alone means true
			continue
		}
		fs.StringVar(v, name, "", f.usage)
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, runHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	c, err := cfgv1.LoadScheduler(*path)
	if err != nil {
		return nil, err
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if rf, ok := runFlags[f.Name]; ok {
			if err := rf.set(c, *vals[f.Name]); err != nil {
				errs = append(errs, fmt.Errorf("--%s=%s: %w", f.Name, *vals[f.Name], err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

func runRun(args []string, _, stderr io.Writer) error {
	cfg, err := runConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	log := cfg.Log.Logger("cluster-scheduler")
	m := metrics.New()
	s, err := kubesched.New(cfg, client, log, m)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s.Start(ctx)
	srv, err := serveMetrics(cfg.MetricsBindAddress, cfg.Profiling, m, s)
	if err != nil {
		return err
	}
	defer srv.Close()
	if cfg.Webhook.BindAddress != "" {
		wh, err := serveWebhook(cfg)
		if err != nil {
			return err
		}
		defer wh.Close()
	}
	log.Info("starting", "scheduler", cfg.SchedulerName, "leaderElect", cfg.LeaderElection.Enabled, "metrics", cfg.MetricsBindAddress)
	if !cfg.LeaderElection.Enabled {
		m.Leader.Set(1)
		return s.Run(ctx)
	}
	host, _ := os.Hostname()
	id := host + "_" + uuid.NewString()
	var runErr error
	err = leader.Run(ctx, client, cfg.LeaderElection, id, log, func(leading bool) { m.Leader.Set(b2f(leading)) },
		func(lctx context.Context) { runErr = s.Run(lctx) })
	return errors.Join(err, runErr)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// serveWebhook serves the mutating admission webhook on /mutate over TLS.
func serveWebhook(cfg *cfgv1.SchedulerConfig) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/mutate", &webhook.Handler{SchedulerName: cfg.SchedulerName})
	ln, err := net.Listen("tcp", cfg.Webhook.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("webhook-bind-address: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ServeTLS(ln, cfg.Webhook.CertFile, cfg.Webhook.KeyFile) }()
	return srv, nil
}

// restConfig is the kubeconfig's, or the in-cluster one, with the QPS.
func restConfig(cfg *cfgv1.SchedulerConfig) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API server configuration (set --kubeconfig outside a cluster): %w", err)
	}
	rc.QPS, rc.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	rc.UserAgent = "tessera-scheduler"
	return rc, nil
}

// serveMetrics serves /metrics, /healthz (the process answers) and /readyz
// (the informers have listed: a standby is ready to take over), and with
// profiling Go's pprof handlers under /debug/pprof/.
func serveMetrics(addr string, profiling bool, m *metrics.Metrics, s *kubesched.Scheduler) (*http.Server, error) {
	mux := http.NewServeMux()
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index) // named profiles: heap, goroutine, allocs, block, mutex
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Synced() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics-bind-address: %w", err)
	}
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second} // Addr: the port bound
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
