// Package pods lists the pods kubelet is about to admit on this node, in
// kubelet's admission order, from a client-go informer restricted to the
// node by a spec.nodeName field selector.
package pods

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	listerv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
)

// Source gives the pods bound to this node.
type Source interface {
	// Pending returns this node's pods in phase Pending, in kubelet's
	// admission order (creation time, then namespace/name).
	Pending() []*corev1.Pod
	// Get returns one pod of this node, or nil.
	Get(namespace, name string) *corev1.Pod
}

// Informer is a Source backed by a shared informer.
type Informer struct {
	informer cache.SharedIndexInformer
	lister   listerv1.PodLister
	done     chan struct{}

	mu      sync.Mutex
	next    uint64
	arrival map[string]uint64 // arrivalKey → order in which the watch delivered the pod
}

// NewInformer watches the pods whose spec.nodeName is node.
func NewInformer(client kube.Client, node string) *Informer {
	onNode := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			onNode(&o)
			return client.ListPods(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			onNode(&o)
			return client.WatchPods(ctx, o)
		},
	}
	// The client says whether it can stream a watch's initial list (the
	// API server can; the in-memory one of tests cannot).
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	i := &Informer{informer: inf, lister: listerv1.NewPodLister(inf.GetIndexer()), done: make(chan struct{}),
		arrival: map[string]uint64{}}
	// Fails only on a stopped informer; this one has not started.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: i.arrived, DeleteFunc: i.gone})
	return i
}

func (i *Informer) arrived(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		i.mu.Lock()
		defer i.mu.Unlock()
		i.next++
		i.arrival[arrivalKey(p)] = i.next
	}
}

func (i *Informer) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		i.mu.Lock()
		defer i.mu.Unlock()
		delete(i.arrival, arrivalKey(p))
	}
}

func arrivalKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name + "/" + string(p.UID) }

// arrivalOf is when the watch delivered the pod; one whose handler has
// not run yet arrived last.
func (i *Informer) arrivalOf(p *corev1.Pod) uint64 {
	if n, ok := i.arrival[arrivalKey(p)]; ok {
		return n
	}
	return math.MaxUint64
}

// Done is closed when the informer started by Start has stopped.
func (i *Informer) Done() <-chan struct{} { return i.done }

// Start runs the informer until ctx ends and waits for the first sync.
func (i *Informer) Start(ctx context.Context) error {
	go func() {
		defer close(i.done)
		i.informer.RunWithContext(ctx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), i.informer.HasSynced) {
		return fmt.Errorf("pod informer: cache did not sync")
	}
	return nil
}

// Pending implements Source.
func (i *Informer) Pending() []*corev1.Pod {
	all, err := i.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*corev1.Pod
	for _, p := range all {
		if p.Status.Phase == corev1.PodPending && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	SortAdmissionOrder(out, i.arrivalOf)
	return out
}

// Get implements Source.
func (i *Informer) Get(namespace, name string) *corev1.Pod {
	p, err := i.lister.Pods(namespace).Get(name)
	if err != nil {
		return nil
	}
	return p
}

// SortAdmissionOrder sorts pods the way kubelet admits them: by creation
// time, and within a second (the timestamps' resolution) in the order its
// watch delivered them, which arrival reports for the plugin's own watch
// of the same pods; then by namespace/name.
func SortAdmissionOrder(ps []*corev1.Pod, arrival func(*corev1.Pod) uint64) {
	sort.SliceStable(ps, func(a, b int) bool {
		ta, tb := ps[a].CreationTimestamp, ps[b].CreationTimestamp
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		if na, nb := arrival(ps[a]), arrival(ps[b]); na != nb {
			return na < nb
		}
		if ps[a].Namespace != ps[b].Namespace {
			return ps[a].Namespace < ps[b].Namespace
		}
		return ps[a].Name < ps[b].Name
	})
}

// Containers returns a pod's containers in kubelet's allocation order:
// init containers first, then app containers.
func Containers(p *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
	out = append(out, p.Spec.InitContainers...)
	return append(out, p.Spec.Containers...)
}

// Request is the container's integer quantity of an extended resource
// (limits, which kubelet uses for device plugins), 0 when absent.
func Request(c *corev1.Container, name string) int64 {
	q, ok := c.Resources.Limits[corev1.ResourceName(name)]
	if !ok {
		q, ok = c.Resources.Requests[corev1.ResourceName(name)]
	}
	if !ok {
		return 0
	}
	return q.Value()
}
