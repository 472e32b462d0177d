package kubesched

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	cfgv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/metrics"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// api is a fake API server with what the fake clientset lacks: the
// Binding subresource as kube-apiserver implements it (nodeName and the
// Binding's annotations in one update, a UID precondition, a conflict
// for a bound pod) and the Eviction subresource (deletes the pod, or 429
// for pods a test marks as protected by a PodDisruptionBudget).
type api struct {
	t      *testing.T
	client *fake.Clientset
	mu     sync.Mutex
	binds  map[string]int // successful Binding writes per pod
	// failBind makes the next n binds of a pod fail with err.
	failBind  map[string]failure
	protected map[string]bool // evictions answer 429
	// evictDeletes deletes an evicted pod at once (else a test deletes it,
	// as a kubelet would after the grace period).
	evictDeletes bool
	evicted      []string
	// gate holds binds of a pod until the channel is closed (outside the
	// fake's lock: see gatedClient); binding records binds that started.
	gate    map[string]chan struct{}
	binding map[string]bool
	// crashGate holds the first bind of a pod, even past its sender's end.
	crashGate   map[string]chan struct{}
	otherWrites int // pod updates other than binds and status patches
}

type failure struct {
	n   int
	err error
}

func newAPI(t *testing.T) *api {
	a := &api{t: t, client: fake.NewClientset(), binds: map[string]int{}, gate: map[string]chan struct{}{}, binding: map[string]bool{}, crashGate: map[string]chan struct{}{}, failBind: map[string]failure{}, protected: map[string]bool{}, evictDeletes: true}
	a.client.PrependReactor("create", "pods", a.subresource)
	// The API server refuses field selectors a resource does not support
	// (nodes support none the scheduler could use); the fake ignores them.
	a.client.PrependReactor("list", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if la, ok := act.(k8stesting.ListAction); ok && la.GetListRestrictions().Fields != nil && !la.GetListRestrictions().Fields.Empty() {
			return true, nil, apierrors.NewBadRequest("field label not supported: " + la.GetListRestrictions().Fields.String())
		}
		return false, nil, nil
	})
	a.client.PrependReactor("update", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetSubresource() == "" {
			a.mu.Lock()
			a.otherWrites++
			a.mu.Unlock()
		}
		return false, nil, nil
	})
	return a
}

func (a *api) subresource(act k8stesting.Action) (bool, runtime.Object, error) {
	ca := act.(k8stesting.CreateAction)
	switch act.GetSubresource() {
	case "binding":
		b := ca.GetObject().(*corev1.Binding)
		key := b.Namespace + "/" + b.Name
		a.mu.Lock()
		defer a.mu.Unlock()
		if f := a.failBind[key]; f.n > 0 {
			a.failBind[key] = failure{f.n - 1, f.err}
			return true, nil, f.err
		}
		obj, err := a.client.Tracker().Get(podsGVR, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		if b.UID != "" && b.UID != pod.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, b.Name, fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", b.UID, pod.UID))
		}
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, b.Name, fmt.Errorf("pod %s is already assigned to node %q", b.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		for k, v := range b.Annotations {
			pod.Annotations[k] = v
		}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
		a.binds[key]++
		return true, nil, a.client.Tracker().Update(podsGVR, pod, b.Namespace)
	case "eviction":
		ev := ca.GetObject().(*policyv1.Eviction)
		key := act.GetNamespace() + "/" + ev.Name
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.protected[key] {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		a.evicted = append(a.evicted, key)
		if a.evictDeletes {
			return true, nil, a.client.Tracker().Delete(podsGVR, act.GetNamespace(), ev.Name)
		}
		return true, nil, nil
	}
	return false, nil, nil
}

func (a *api) bindsOf(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.binds[key]
}

// gpuNode adds a node with n GPUs of memMiB each.
func (a *api) gpuNode(name string, n int, memMiB uint64, model string) {
	a.t.Helper()
	inv := annv1.NodeGPUs{Version: annv1.Version}
	for i := range n {
		inv.GPUs = append(inv.GPUs, annv1.NodeGPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, MemoryMiB: memMiB, NUMANode: 0, Healthy: true})
	}
	raw, err := annv1.Marshal(&inv)
	if err != nil {
		a.t.Fatal(err)
	}
	a.rawNode(name, raw)
}

func (a *api) rawNode(name, inventory string) {
	a.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name), Annotations: map[string]string{annv1.NodeGPUsKey: inventory}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}}}
	if _, err := a.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

type podOpt func(*corev1.Pod)

func res(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		rl := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			rl[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl, Limits: rl}
	}
}

func ann(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func created(ago time.Duration) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(time.Now().Add(-ago)) }
}

func scheduler(name string) podOpt { return func(p *corev1.Pod) { p.Spec.SchedulerName = name } }

func (a *api) pod(name string, opts ...podOpt) *corev1.Pod {
	a.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{},
		CreationTimestamp: metav1.NewTime(time.Now())},
		Spec: corev1.PodSpec{SchedulerName: cfgv1.DefaultSchedulerName, Containers: []corev1.Container{{Name: "main"}}}}
	for _, o := range opts {
		o(p)
	}
	out, err := a.client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

func (a *api) deletePod(name string) {
	a.t.Helper()
	if err := a.client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

func (a *api) get(name string) *corev1.Pod {
	a.t.Helper()
	p, err := a.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return p
}

// events lists events whose reason is reason (any object).
func (a *api) events(reason string) []corev1.Event {
	l, _ := a.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	var out []corev1.Event
	for _, e := range l.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func (a *api) eventFor(name, reason, contains string) bool {
	for _, e := range a.events(reason) {
		if e.InvolvedObject.Name == name && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// running is one scheduler replica under test.
type running struct {
	s      *Scheduler
	cancel context.CancelFunc
	done   chan error
}

func testConfig() *cfgv1.SchedulerConfig {
	c := cfgv1.DefaultScheduler()
	c.LeaderElection.Enabled = false
	c.BindWorkers = 4
	c.Policy = "bestfit"
	return c
}

func (a *api) start(cfg *cfgv1.SchedulerConfig) *running {
	a.t.Helper()
	s, err := New(cfg, gatedClient{a.client, a}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: s, cancel: cancel, done: make(chan error, 1)}
	s.Start(ctx)
	go func() { r.done <- s.Run(ctx) }()
	a.t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// checkCapacity parses every bound pod's assignment and checks that no
// GPU holds more memory or compute than it has.
func (a *api) checkCapacity(memMiB uint64) map[string]string {
	a.t.Helper()
	l, _ := a.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	mem, core := map[string]uint64{}, map[string]uint32{}
	where := map[string]string{}
	for _, p := range l.Items {
		raw, ok := p.Annotations[annv1.AssignmentKey]
		if !ok || p.Spec.NodeName == "" {
			continue
		}
		as, err := annv1.ParseAssignment(raw)
		if err != nil {
			continue
		}
		for _, c := range as.Containers {
			for _, g := range c.GPUs {
				if !strings.HasPrefix(g.UUID, "GPU-"+p.Spec.NodeName+"-") {
					a.t.Fatalf("pod %s bound to %s with GPU %s of another node", p.Name, p.Spec.NodeName, g.UUID)
				}
				mem[g.UUID] += g.MemoryMiB
				core[g.UUID] += max(g.CorePercent, boolToCore(g.CorePercent == 0 && g.MemoryMiB == 0))
				where[p.Name] = g.UUID
			}
		}
	}
	for u := range mem {
		if mem[u] > memMiB || core[u] > 100 {
			a.t.Fatalf("GPU %s oversubscribed: %d MiB of %d, %d%% compute", u, mem[u], memMiB, core[u])
		}
	}
	return where
}

// boolToCore counts a whole-GPU share (no core and no memory named) as 100.
func boolToCore(whole bool) uint32 {
	if whole {
		return 100
	}
	return 0
}

func translateKey(p *corev1.Pod) string { return translate.Key(p) }

func testutilValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// quiet reports whether no bind happened for 300 ms.
func (a *api) quiet() bool {
	count := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for _, b := range a.binds {
			n += b
		}
		return n
	}
	before := count()
	time.Sleep(300 * time.Millisecond)
	return count() == before
}

// gatedClient is the fake clientset with binds that may be held at a gate
// before they reach the fake (whose reactors run under one lock, so a
// reactor that waited would stop every other call).
type gatedClient struct {
	*fake.Clientset
	a *api
}

func (g gatedClient) CoreV1() typedcorev1.CoreV1Interface {
	return gatedCore{g.Clientset.CoreV1(), g.a}
}

type gatedCore struct {
	typedcorev1.CoreV1Interface
	a *api
}

func (g gatedCore) Pods(ns string) typedcorev1.PodInterface {
	return gatedPods{g.CoreV1Interface.Pods(ns), g.a, ns}
}

type gatedPods struct {
	typedcorev1.PodInterface
	a  *api
	ns string
}

func (g gatedPods) Bind(ctx context.Context, b *corev1.Binding, opts metav1.CreateOptions) error {
	key := g.ns + "/" + b.Name
	g.a.mu.Lock()
	g.a.binding[key] = true
	gate := g.a.gate[key]
	crash := g.a.crashGate[key]
	delete(g.a.crashGate, key)
	g.a.mu.Unlock()
	if crash != nil {
		<-crash // a request already on the wire reaches the server even if its sender dies
	} else if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.PodInterface.Bind(ctx, b, opts)
}

// terminating marks a pod as being deleted (a grace period running).
func terminating() podOpt {
	return func(p *corev1.Pod) {
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Finalizers = append(p.Finalizers, "tessera.io/test-hold")
	}
}

func nominatedTo(node string) podOpt {
	return func(p *corev1.Pod) { p.Status.NominatedNodeName = node }
}
