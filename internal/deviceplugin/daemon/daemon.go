// Package daemon assembles the device plugin from its configuration, an
// NVML library and a Kubernetes client, and runs it: PodResources
// read-back first (so a restarted plugin answers from kubelet's truth),
// then health watching, periodic reconciliation, the node inventory, the
// metrics endpoint and the kubelet-facing servers.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/health"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/inventory"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/plugin"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/pods"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/preferred"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/reconcile"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/server"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/mig"
	"github.com/tessera-gpu/tessera/internal/podresources"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// AwaitPod bounds how long a request waits for the pod informer to deliver
// the pod kubelet is admitting (both watch the API server; kubelet may be
// first by a few milliseconds).
const AwaitPod = 500 * time.Millisecond

// Daemon is a fully wired device plugin.
type Daemon struct {
	Config     *configv1.Config
	Manager    *resource.Manager
	Ledger     *ledger.Ledger
	Chooser    *preferred.Chooser
	Builder    *allocation.Builder
	Plugin     *plugin.Plugin
	Health     *health.Watcher
	Reconciler *reconcile.Reconciler
	Inventory  *inventory.Publisher
	Pods       *pods.Informer
	Registry   *prometheus.Registry
	Log        *slog.Logger

	lib  nvml.Interface
	deps server.Deps
}

// New discovers the GPUs through lib (already initialised) and wires the plugin.
func New(cfg *configv1.Config, lib nvml.Interface, client kube.Client, podResources podresources.Lister, log *slog.Logger) (*Daemon, error) {
	gpus, err := gpu.Discover(lib, log)
	if err != nil {
		return nil, fmt.Errorf("GPU discovery: %w", err)
	}
	mgr, err := resource.NewManager(gpus, resource.Options{SplitCount: cfg.SplitCount, MemoryUnit: cfg.MemoryUnitBytes(),
		ReservedMemory: cfg.ReservedMemoryBytes(), MIG: cfg.MIGStrategy == configv1.MIGStrategyMixed})
	if err != nil {
		return nil, err
	}
	topo, err := gpuallocator.NewDevices(gpuallocator.WithNvmlLib(lib))
	if err != nil {
		log.Warn("no GPU topology for multi-GPU placement", "err", err)
	}
	d := &Daemon{Config: cfg, Manager: mgr, Ledger: ledger.New(), Pods: pods.NewInformer(client, cfg.NodeName), Registry: prometheus.NewRegistry(), Log: log, lib: lib}
	warn := eventWarner(client, cfg.NodeName, log)
	d.Chooser = &preferred.Chooser{Manager: mgr, Pods: d.Pods, Ledger: d.Ledger, Policy: cfg.Placement, Topology: topo, Log: log, Warn: warn,
		AllowGPUSpill: cfg.AllowGPUSpill, AwaitPod: AwaitPod}
	d.Builder = &allocation.Builder{Manager: mgr, HookLibrary: cfg.HookLibrary, StateDir: cfg.StateDir,
		ContextReserveMiB: cfg.ContextReserveMiB, HookLogLevel: cfg.HookLogLevel, ProcRoot: cfg.ProcRoot, DevRoot: cfg.DevRoot,
		AllowGPUSpill: cfg.AllowGPUSpill, DeviceList: cfg.DeviceListStrategy, CDIKind: cfg.CDIKind,
		LocateMIG: func(u string) (mig.Location, error) { return mig.Locate(lib, u) }}
	table, err := priority.ComputeTable(cfg.ComputePriority)
	if err != nil {
		return nil, err
	}
	d.Reconciler = &reconcile.Reconciler{PodResources: podResources, Pods: d.Pods, Client: client, Manager: mgr, Ledger: d.Ledger,
		Builder: d.Builder, Metrics: reconcile.NewMetrics(d.Registry), Log: log, Warn: warn, GCGrace: 10 * time.Minute, Priority: table}
	d.Inventory = &inventory.Publisher{Client: client, Node: cfg.NodeName, Manager: mgr, Log: log}
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	d.Health = &health.Watcher{Lib: lib, GPUs: uuids, Target: mgr, IgnoredXids: cfg.Health.IgnoredXids, RecoverAfter: cfg.Health.RecoverAfter.Duration, Log: log}
	d.deps = server.Deps{Manager: mgr, Chooser: d.Chooser, Builder: d.Builder, Ledger: d.Ledger, Log: log, Priority: table,
		OnAllocate: d.registerMetrics(gpus)}
	d.Plugin = &plugin.Plugin{Dir: cfg.KubeletSocketDir, Log: log}
	for _, res := range mgr.Resources() {
		d.Plugin.Servers = append(d.Plugin.Servers, server.New(res, cfg.KubeletSocketDir, d.deps))
	}
	if len(d.Plugin.Servers) == 0 {
		return nil, errors.New("no GPUs to advertise")
	}
	return d, nil
}

// registerMetrics adds per-GPU health gauges and returns the allocation counter hook.
func (d *Daemon) registerMetrics(gpus []gpu.GPU) func(string, []string) {
	for _, g := range gpus {
		uuid := g.UUID
		d.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tessera_deviceplugin_gpu_healthy",
			Help: "1 if the GPU is healthy, 0 if its devices are advertised Unhealthy.", ConstLabels: prometheus.Labels{"gpu": uuid}},
			func() float64 {
				if d.Manager.Healthy(uuid) {
					return 1
				}
				return 0
			}))
	}
	allocs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_deviceplugin_allocations_total",
		Help: "Container allocations answered, by resource."}, []string{"resource"})
	d.Registry.MustRegister(allocs)
	return func(res string, _ []string) { allocs.WithLabelValues(res).Inc() }
}

// Run runs the plugin until ctx ends. It returns only after every
// goroutine it started has ended, so the caller may shut NVML down.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.Builder.Prepare(); err != nil {
		return err
	}
	if _, err := os.Stat(d.Config.HookLibrary); err != nil {
		// Containers will fail to start (the bind mount has no source)
		// until the hook is installed; say so loudly at start.
		d.Log.Error("CUDA hook library missing on the host; tessera containers cannot start until it is installed", "hookLibrary", d.Config.HookLibrary, "err", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: ends what wg waits for
	err := d.Pods.Start(ctx)
	wg.Go(func() { <-d.Pods.Done() })
	if err != nil {
		return err
	}
	// Rebuild state from kubelet before answering it: after a plugin
	// restart the ledger and the containers' files come back from here.
	if err := d.Reconciler.Once(ctx); err != nil {
		d.Log.Warn("initial PodResources read-back failed; continuing", "err", err)
	}
	if d.Config.Health.Enabled {
		wg.Go(func() {
			if err := d.Health.Run(ctx); err != nil {
				d.Log.Error("health watching stopped", "err", err)
			}
		})
	}
	wg.Go(func() { d.Reconciler.Run(ctx, d.Config.ReconcileInterval.Duration) })
	if every := d.Config.RediscoverInterval.Duration; every > 0 {
		wg.Go(func() { d.rediscoverEvery(ctx, every) })
	}
	wg.Go(func() { d.Inventory.Run(ctx, 5*time.Minute) })
	if d.Config.MetricsAddress != "" {
		srv := d.metricsServer()
		wg.Go(func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.Log.Error("metrics server", "err", err)
			}
		})
		defer srv.Close()
	}
	d.Log.Info("device plugin running", "node", d.Config.NodeName, "resources", d.Manager.Resources(), "gpus", len(d.Manager.GPUs()))
	return d.Plugin.Run(ctx)
}

func (d *Daemon) rediscoverEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := d.Rediscover(); err != nil {
				d.Log.Warn("GPU rediscovery failed; keeping the current devices", "err", err)
			}
		}
	}
}

// Rediscover reads the GPUs again and applies a changed MIG layout without
// a restart: the resource manager advertises the new MIG devices and keeps
// vanished ones Unhealthy until no container holds them (by the ledger,
// i.e. kubelet's PodResources plus fresh allocations), every ListAndWatch
// stream gets a fresh message, a profile seen for the first time gets its
// own server registered with kubelet, and the node inventory annotation is
// republished (the publisher watches the manager). It reports whether the
// advertised devices changed.
func (d *Daemon) Rediscover() (bool, error) {
	gpus, err := gpu.Discover(d.lib, d.Log)
	if err != nil {
		return false, fmt.Errorf("GPU discovery: %w", err)
	}
	held := map[string]map[string]bool{}
	for _, byRes := range d.Ledger.Snapshot() {
		for res, ids := range byRes {
			if held[res] == nil {
				held[res] = map[string]bool{}
			}
			for _, id := range ids {
				held[res][id] = true
			}
		}
	}
	changed, unknown := d.Manager.UpdateMIG(gpus, func(res, key string) bool { return held[res][key] })
	if len(unknown) > 0 {
		d.Log.Warn("GPUs appeared after start; restart the plugin to advertise them", "gpus", unknown)
	}
	if !changed {
		return false, nil
	}
	for _, res := range d.Manager.Resources() {
		if d.Plugin.Server(res) == nil {
			d.Plugin.Add(server.New(res, d.Config.KubeletSocketDir, d.deps))
		}
	}
	d.Log.Info("MIG layout changed; devices re-advertised", "resources", d.Manager.Resources())
	return true, nil
}

func (d *Daemon) metricsServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return &http.Server{Addr: d.Config.MetricsAddress, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// eventWarner records a Warning event on the pod.
func eventWarner(client kube.Client, node string, log *slog.Logger) func(*corev1.Pod, string, string) {
	return func(pod *corev1.Pod, reason, msg string) {
		now := metav1.Now()
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
			Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "tessera-device-plugin", Host: node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := client.CreateEvent(ctx, ev); err != nil {
			log.Warn("event not recorded", "reason", reason, "err", err)
		}
	}
}
