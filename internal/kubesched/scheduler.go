// Package kubesched is tessera's scheduler in front of a Kubernetes API
// server: pods with spec.schedulerName = the configured name are placed by
// the scheduling engine (internal/engine: queues, quotas, preemption,
// gangs over internal/placement); everything else stays with its own
// scheduler but is counted where it runs.
//
// One goroutine, the loop, owns the engine. Informer handlers only mark
// what changed; the loop reads the changed objects from the informers'
// caches, updates the engine, runs a scheduling cycle and hands binds,
// evictions and status patches to a worker pool (internal/kubesched/bind),
// whose outcomes come back to the loop. The engine's state is a function
// of the API server's objects plus the loop's own promises (binds in
// flight, nominated pods): rebuild.go builds it from those alone, at start,
// on leadership, on an inventory change and on a new queue configuration.
package kubesched

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	cfgv1 "github.com/tessera-gpu/tessera/api/config/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/bind"
	"github.com/tessera-gpu/tessera/internal/kubesched/interpod"
	"github.com/tessera-gpu/tessera/internal/kubesched/metrics"
	"github.com/tessera-gpu/tessera/internal/kubesched/nodefit"
	"github.com/tessera-gpu/tessera/internal/kubesched/volumes"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Scheduler is one replica's scheduler.
type Scheduler struct {
	cfg     *cfgv1.SchedulerConfig
	client  kubernetes.Interface
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time

	factory    informers.SharedInformerFactory // nodes
	podFactory informers.SharedInformerFactory
	cmFactory  informers.SharedInformerFactory // nil without a queue ConfigMap
	pods       corelisters.PodLister
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	configMaps corelisters.ConfigMapLister
	synced     []cache.InformerSynced
	recorder   record.EventRecorder
	broadcast  record.EventBroadcaster

	changes changeSet

	// Owned by the loop.
	engineCfg     *schedv1.Config // last good queue configuration
	cfgSeen       string          // resourceVersion of the ConfigMap last read
	eng           *engine.Engine
	admit         *engine.QuotaAdmission
	cluster       *placement.Cluster
	sched         *placement.Scheduler
	nodeState     map[string]*nodeEntry
	byIndex       []*nodeEntry               // usable nodes by engine index
	fits          map[string]*fit            // pods' constraints by key (constraints.go)
	portPods      cache.Indexer              // bound pods that bind host ports, by node (hostPortIndex)
	claimPods     cache.Indexer              // bound pods by the claims they mount (claimIndex)
	promisedPorts map[string]map[string]bool // node → our pods binding host ports promised there (assumed, nominated)
	// affinity is the placed pods as the inter-pod rules read them, descs
	// every known pod's labels and terms (interpods.go).
	affinity *interpod.Index
	descs    map[string]*interpod.Pod
	// volumes answers pods' PersistentVolumeClaims and holds the volumes
	// chosen for pods whose bind is in flight (volumes.go).
	volumes *volumes.Binder
	// trials holds the constraint keys each gang member's trial placement
	// moved, until the member starts (memberTrial).
	trials        map[string][]string
	podState      map[string]*podEntry
	held          map[string]*podEntry // waiting to be queued again after a failed bind
	rebind        map[string]*podEntry // gang members whose failed bind is retried on held capacity
	lastReport    time.Time
	pool          *bind.Pool
	rebuildWanted bool
	lastMetrics   time.Time
	frag          *placement.Fragmentation // per engine, built on first use
	// Balloons (balloons.go): the owners' floors given to the engine, whether
	// nodes or pods changed since, and refused reclaim evictions to ask again.
	floors        map[string]int32
	balloonsDirty bool
	reclaims      map[string]*podEntry
}

// New builds a scheduler over client and starts nothing. Informers start
// with Start; scheduling with Run (only the leader runs).
func New(cfg *cfgv1.SchedulerConfig, client kubernetes.Interface, log *slog.Logger, m *metrics.Metrics) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := placement.NewPolicy(cfg.Policy, &placement.Cluster{}, placement.Options{}); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	s := &Scheduler{cfg: cfg, client: client, log: log, metrics: m, now: time.Now, engineCfg: schedv1.Default(),
		nodeState: map[string]*nodeEntry{}, podState: map[string]*podEntry{}, held: map[string]*podEntry{}, rebind: map[string]*podEntry{},
		floors: map[string]int32{}, reclaims: map[string]*podEntry{}, fits: map[string]*fit{}, descs: map[string]*interpod.Pod{}, trials: map[string][]string{},
		promisedPorts: map[string]map[string]bool{}}
	none, _ := nodefit.For(&corev1.Pod{})
	s.fits[""] = &fit{node: none}
	s.affinity = interpod.NewIndex(view{s})
	s.changes.init()
	// Terminal pods hold nothing; the API server filters them out. The
	// selector is valid for pods only, so pods get their own factory.
	s.podFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase!=Succeeded,status.phase!=Failed"
	}))
	s.factory = informers.NewSharedInformerFactory(client, 0)
	podInf := s.podFactory.Core().V1().Pods()
	nodeInf := s.factory.Core().V1().Nodes()
	nsInf := s.factory.Core().V1().Namespaces() // their labels, for pod affinity's namespaceSelector
	s.pods, s.nodes, s.namespaces = podInf.Lister(), nodeInf.Lister(), nsInf.Lister()
	_, _ = podInf.Informer().AddEventHandler(s.changes.handler(kindPod))
	if err := podInf.Informer().AddIndexers(cache.Indexers{hostPortIndex: hostPortNode}); err != nil {
		return nil, fmt.Errorf("pod informer: host port index: %w", err)
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{claimIndex: boundClaims}); err != nil {
		return nil, fmt.Errorf("pod informer: claim index: %w", err)
	}
	s.portPods = podInf.Informer().GetIndexer()
	s.claimPods = s.portPods
	_, _ = podInf.Informer().AddEventHandler(s.changes.portHandler())
	_, _ = podInf.Informer().AddEventHandler(s.changes.claimHandler())
	_, _ = nodeInf.Informer().AddEventHandler(s.changes.handler(kindNode))
	_, _ = nsInf.Informer().AddEventHandler(s.changes.handler(kindNamespace))
	s.synced = []cache.InformerSynced{podInf.Informer().HasSynced, nodeInf.Informer().HasSynced, nsInf.Informer().HasSynced}
	// Claims, volumes and classes: a change may let pods waiting on their
	// volumes in (a claim bound, a volume created).
	pvcInf, pvInf := s.factory.Core().V1().PersistentVolumeClaims(), s.factory.Core().V1().PersistentVolumes()
	classInf := s.factory.Storage().V1().StorageClasses()
	s.volumes = volumes.NewBinder(pvcInf.Lister(), pvInf.Lister(), classInf.Lister(), s.claimInUse)
	for _, inf := range []cache.SharedIndexInformer{pvcInf.Informer(), pvInf.Informer(), classInf.Informer()} {
		_, _ = inf.AddEventHandler(s.changes.handler(kindVolume))
		s.synced = append(s.synced, inf.HasSynced)
	}
	if cfg.QueueConfigMap != "" {
		ns, name := splitRef(cfg.QueueConfigMap)
		s.cmFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
		cmInf := s.cmFactory.Core().V1().ConfigMaps()
		s.configMaps = cmInf.Lister()
		_, _ = cmInf.Informer().AddEventHandler(s.changes.handler(kindConfig))
		s.synced = append(s.synced, cmInf.Informer().HasSynced)
	}
	s.broadcast = record.NewBroadcaster()
	s.recorder = s.broadcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: cfg.SchedulerName})
	return s, nil
}

// Start runs the informers and the event sink until ctx ends; standbys run
// them too, so a takeover starts from warm caches.
func (s *Scheduler) Start(ctx context.Context) {
	s.broadcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	s.factory.Start(ctx.Done())
	s.podFactory.Start(ctx.Done())
	if s.cmFactory != nil {
		s.cmFactory.Start(ctx.Done())
	}
	go func() {
		<-ctx.Done()
		s.broadcast.Shutdown()
	}()
}

// Synced reports whether every informer has listed once (readiness).
func (s *Scheduler) Synced() bool {
	for _, f := range s.synced {
		if !f() {
			return false
		}
	}
	return true
}

// Run schedules until ctx ends: it waits for the caches, builds the engine
// from them and loops. Only the leader calls it.
func (s *Scheduler) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	s.pool = bind.New(ctx, s.client, s.cfg.BindWorkers, s.cfg.BindAttempts)
	defer s.pool.Wait()
	s.changes.takeAll() // the rebuild reads everything
	s.readQueueConfig()
	if err := s.rebuild("start"); err != nil {
		return err
	}
	s.log.Info("scheduling", "scheduler", s.cfg.SchedulerName, "nodes", len(s.nodeState), "pods", len(s.podState))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		s.iterate(ctx)
		wait := time.Second
		if next := s.eng.NextEvent(); !next.IsZero() {
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-s.changes.ready:
		case <-s.pool.Ready():
		case <-timer.C:
		}
	}
}

// iterate is one turn of the loop: apply what changed, take outcomes,
// rebuild if asked, run a cycle, carry its decisions out.
func (s *Scheduler) iterate(ctx context.Context) {
	pods, nodes, config, namespaces := s.changes.take()
	if config {
		s.readQueueConfig()
	}
	if namespaces {
		s.topologyChanged()
	}
	for name := range nodes {
		s.syncNode(name)
	}
	for key := range pods {
		s.syncPod(key)
	}
	s.refilterPorts(s.changes.takePortNodes(), true)
	if s.changes.takeVolumes() {
		s.refilterVolumes(true)
	}
	if len(pods) > 0 {
		s.balloonsDirty = true // an owner named on a node may have become known
	}
	for _, o := range s.pool.Take() {
		s.outcome(o)
	}
	if s.rebuildWanted {
		if err := s.rebuild("change"); err != nil {
			s.log.Error("rebuild failed; keeping the engine as it was", "err", err)
		}
	}
	s.retryDue()
	s.sweepPortPromises()
	s.sweepVolumes()
	s.retryReclaims(ctx)
	s.syncBalloons(s.now())
	start := s.now()
	tried := s.eng.Cycle(start)
	took := s.now().Sub(start)
	if tried > 0 {
		s.metrics.CycleLatency.Observe(took.Seconds())
		per := took.Seconds() / float64(tried)
		for range min(tried, 1000) {
			s.metrics.AttemptLatency.Observe(per)
		}
	}
	s.apply(ctx, s.eng.Events(), start)
	if start.Sub(s.lastReport) >= time.Second { // a pass over the pending pods, at most once a second
		s.lastReport = start
		s.reportUnschedulable(ctx, start)
	}
	if s.now().Sub(s.lastMetrics) >= time.Second {
		s.lastMetrics = s.now()
		s.observe()
	}
}

func splitRef(ref string) (string, string) {
	for i := range ref {
		if ref[i] == '/' {
			return ref[:i], ref[i+1:]
		}
	}
	return "", ref
}

// kinds of changed objects.
const (
	kindPod = iota
	kindNode
	kindConfig
	kindNamespace
	kindVolume // a PersistentVolumeClaim, PersistentVolume or StorageClass
)

// changeSet collects the keys informers reported, for the loop to read.
type changeSet struct {
	mu     sync.Mutex
	pods   map[string]struct{}
	nodes  map[string]struct{}
	config bool
	// namespaces: a namespace changed (its labels, for namespaceSelector).
	namespaces bool
	// volumes: a claim, volume or class changed.
	volumes bool
	// portNodes are nodes where a pod binding host ports came or went.
	portNodes map[string]struct{}
	ready     chan struct{}
}

func (c *changeSet) init() {
	c.pods, c.nodes, c.portNodes, c.ready = map[string]struct{}{}, map[string]struct{}{}, map[string]struct{}{}, make(chan struct{}, 1)
}

func (c *changeSet) handler(kind int) cache.ResourceEventHandler {
	mark := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		c.mu.Lock()
		switch kind {
		case kindPod:
			c.pods[key] = struct{}{}
		case kindNode:
			c.nodes[key] = struct{}{}
		case kindConfig:
			c.config = true
		case kindNamespace:
			c.namespaces = true
		case kindVolume:
			c.volumes = true
		}
		c.mu.Unlock()
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: mark, UpdateFunc: func(_, n any) { mark(n) }, DeleteFunc: mark}
}

func (c *changeSet) take() (map[string]struct{}, map[string]struct{}, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, n, cfg, ns := c.pods, c.nodes, c.config, c.namespaces
	c.pods, c.nodes, c.config, c.namespaces = map[string]struct{}{}, map[string]struct{}{}, false, false
	return p, n, cfg, ns
}

func (c *changeSet) takeAll() {
	c.take()
	c.takePortNodes()
	c.takeVolumes()
}

func (c *changeSet) takeVolumes() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.volumes
	c.volumes = false
	return v
}

// podFor returns the cached pod, or nil when it is gone.
func (s *Scheduler) podFor(key string) *corev1.Pod {
	ns, name := splitRef(key)
	p, err := s.pods.Pods(ns).Get(name)
	if err != nil {
		return nil
	}
	return p
}

func (s *Scheduler) ours(p *corev1.Pod) bool { return p.Spec.SchedulerName == s.cfg.SchedulerName }

func (s *Scheduler) memUnit() uint64 { return s.cfg.MemoryUnitMiB() }
