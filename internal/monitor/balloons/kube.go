package balloons

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	apiv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// API is what the controller's production side needs from the API server
// (internal/deviceplugin/kube.REST).
type API interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	EvictPod(ctx context.Context, namespace, name string) error
	AnnotateNode(ctx context.Context, name string, annotations map[string]string) error
}

// KubePods reads opt-in, borrower and priority from the pod, cached for TTL for the
// every-pass reads; annotations can change while the pod runs, so Confirm (before a
// cap is lowered) reads the pod again.
type KubePods struct {
	API API
	TTL time.Duration

	mu      sync.Mutex
	cache   map[string]cachedPod
	inserts int // since the last prune
}

// pruneEvery: expired entries are dropped every so many inserts (pods come and go
// on a node for months; the cache must not keep them all).
const pruneEvery = 256

type cachedPod struct {
	info PodInfo
	at   time.Time
}

// Info implements Pods.
func (k *KubePods) Info(ctx context.Context, o identity.Owner) (PodInfo, error) {
	key := o.Namespace + "/" + o.Pod
	k.mu.Lock()
	c, ok := k.cache[key]
	k.mu.Unlock()
	if ok && time.Since(c.at) < k.TTL {
		return c.info, nil
	}
	return k.Confirm(ctx, o)
}

// Confirm implements Pods: the pod as the API server has it now (and refreshes the
// cache).
func (k *KubePods) Confirm(ctx context.Context, o identity.Owner) (PodInfo, error) {
	key := o.Namespace + "/" + o.Pod
	pod, err := k.API.GetPod(ctx, o.Namespace, o.Pod)
	if err != nil {
		return PodInfo{}, fmt.Errorf("pod %s: %w", key, err)
	}
	info := InfoOf(pod)
	k.mu.Lock()
	if k.cache == nil {
		k.cache = map[string]cachedPod{}
	}
	k.cache[key] = cachedPod{info, time.Now()}
	if k.inserts++; k.inserts >= pruneEvery {
		k.inserts = 0
		for key, c := range k.cache {
			if time.Since(c.at) >= k.TTL {
				delete(k.cache, key)
			}
		}
	}
	k.mu.Unlock()
	return info, nil
}

// InfoOf reads a pod's balloon facts.
func InfoOf(pod *corev1.Pod) PodInfo {
	info := PodInfo{OptedIn: apiv1.OptedIn(pod.Annotations)}
	var loans string
	if loans, info.Borrower = pod.Annotations[apiv1.BorrowedKey]; info.Borrower {
		info.Loans, _ = apiv1.ParseBorrowed(loans) // unreadable: a borrower everywhere
	}
	if pod.Spec.Priority != nil {
		info.Priority = *pod.Spec.Priority
	}
	if pod.Status.StartTime != nil {
		info.Started = pod.Status.StartTime.Time
	}
	return info
}

// KubeEvictor evicts through the Eviction API (PodDisruptionBudgets and the pod's
// grace period honoured).
type KubeEvictor struct{ API API }

// Evict implements Evictor.
func (k KubeEvictor) Evict(ctx context.Context, o identity.Owner) error {
	return k.API.EvictPod(ctx, o.Namespace, o.Pod)
}

// NodeAnnotation publishes the state as the node's tessera.io/node-balloons.
type NodeAnnotation struct {
	API  API
	Node string
}

// Publish implements Publisher.
func (n NodeAnnotation) Publish(ctx context.Context, s apiv1.NodeBalloons) error {
	v, err := apiv1.Marshal(&s)
	if err != nil {
		return err
	}
	return n.API.AnnotateNode(ctx, n.Node, map[string]string{apiv1.NodeBalloonsKey: v})
}
