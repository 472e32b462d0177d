package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Binds watches the pods of one namespace and records when each was first
// seen bound (spec.nodeName set) and Running. Timestamps are taken when the
// watch event arrives, so they include the watch latency, the same for
// every scheduler measured.
type Binds struct {
	mu      sync.Mutex
	bound   map[string]time.Time // pod name → first seen bound
	node    map[string]string    // pod name → node
	running map[string]bool
	changed chan struct{} // closed and replaced on every change
	stop    context.CancelFunc
}

// WatchBinds starts watching namespace and returns once the watch has
// listed it.
func WatchBinds(ctx context.Context, client kubernetes.Interface, namespace string) (*Binds, error) {
	ctx, cancel := context.WithCancel(ctx)
	b := &Binds{bound: map[string]time.Time{}, node: map[string]string{}, running: map[string]bool{},
		changed: make(chan struct{}), stop: cancel}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.see,
		UpdateFunc: func(_, obj any) { b.see(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watch pods in %s: %w", namespace, err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("watch pods in %s: not synced: %w", namespace, ctx.Err())
	}
	return b, nil
}

// Stop ends the watch.
func (b *Binds) Stop() { b.stop() }

func (b *Binds) see(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := false
	if _, seen := b.bound[pod.Name]; !seen {
		b.bound[pod.Name] = now
		b.node[pod.Name] = pod.Spec.NodeName
		changed = true
	}
	if pod.Status.Phase == corev1.PodRunning && !b.running[pod.Name] {
		b.running[pod.Name] = true
		changed = true
	}
	if changed {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// Counts are the pods seen bound and Running so far.
func (b *Binds) Counts() (bound, running int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.bound), len(b.running)
}

// Node is the node pod was bound to ("" if not yet).
func (b *Binds) Node(pod string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.node[pod]
}

// Times are the bind times seen, in no order.
func (b *Binds) Times() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := make([]time.Time, 0, len(b.bound))
	for _, t := range b.bound {
		ts = append(ts, t)
	}
	return ts
}

// WaitBound waits until n pods are bound, and also Running if running.
func (b *Binds) WaitBound(ctx context.Context, n int, running bool) error {
	for {
		b.mu.Lock()
		got := len(b.bound)
		if running {
			got = len(b.running)
		}
		changed := b.changed
		b.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			what := "bound"
			if running {
				what = "running"
			}
			return fmt.Errorf("%d of %d pods %s: %w", got, n, what, ctx.Err())
		case <-changed:
		}
	}
}
