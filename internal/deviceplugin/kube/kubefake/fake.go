// Package kubefake is an in-memory kube.Client: the API server of the
// plugin's tests and of its simulated node (build tag tessera_sim). Pods
// carry resource versions and watches replay what happened after the
// version they start from, so an informer never misses a pod created
// between its list and its watch.
package kubefake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
)

var (
	podsGR  = schema.GroupResource{Resource: "pods"}
	nodesGR = schema.GroupResource{Resource: "nodes"}
	_       = kube.Client((*Client)(nil))
)

// queueLen is how many pod changes a watcher may lag behind before
// writers wait for it.
const queueLen = 1000

// Client is an in-memory API server holding pods, nodes and events.
type Client struct {
	mu      sync.Mutex
	rv      int64
	pods    map[string]*corev1.Pod // namespace/name
	nodes   map[string]*corev1.Node
	events  []corev1.Event
	history []watch.Event // every pod change, in resource-version order
	bcast   *watch.Broadcaster
}

// New returns an API server holding nodes and pods.
func New(nodes []*corev1.Node, pods ...*corev1.Pod) *Client {
	c := &Client{pods: map[string]*corev1.Pod{}, nodes: map[string]*corev1.Node{},
		bcast: watch.NewLongQueueBroadcaster(queueLen, watch.WaitIfChannelFull)}
	for _, n := range nodes {
		n = n.DeepCopy()
		n.ResourceVersion = c.nextRV()
		c.nodes[n.Name] = n
	}
	for _, p := range pods {
		if err := c.CreatePod(p); err != nil {
			panic(err) // duplicate pods in a test's fixture
		}
	}
	return c
}

// NewNode returns an API server holding one empty node.
func NewNode(name string, pods ...*corev1.Pod) *Client {
	return New([]*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: name}}}, pods...)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list,
// then watch: this server does not stream initial events.
func (c *Client) IsWatchListSemanticsUnSupported() bool { return true }

func (c *Client) nextRV() string {
	c.rv++
	return strconv.FormatInt(c.rv, 10)
}

func key(namespace, name string) string { return namespace + "/" + name }

// record stores a pod change and sends it to the watchers; c.mu is held.
func (c *Client) record(t watch.EventType, p *corev1.Pod) {
	ev := watch.Event{Type: t, Object: p.DeepCopy()}
	c.history = append(c.history, ev)
	_ = c.bcast.Action(t, ev.Object)
}

// CreatePod adds a pod, as kubectl create would.
func (c *Client) CreatePod(p *corev1.Pod) error { return c.putPod(p, watch.Added) }

// UpdatePod replaces a pod.
func (c *Client) UpdatePod(p *corev1.Pod) error { return c.putPod(p, watch.Modified) }

// putPod stores a copy of a new pod (Added) or of an existing one (Modified).
func (c *Client) putPod(p *corev1.Pod, t watch.EventType) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(p.Namespace, p.Name)
	switch _, exists := c.pods[k]; {
	case t == watch.Added && exists:
		return apierrors.NewAlreadyExists(podsGR, k)
	case t == watch.Modified && !exists:
		return apierrors.NewNotFound(podsGR, k)
	}
	p = p.DeepCopy()
	p.ResourceVersion = c.nextRV()
	c.pods[k] = p
	c.record(t, p)
	return nil
}

// DeletePod removes a pod.
func (c *Client) DeletePod(namespace, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key(namespace, name)
	p, ok := c.pods[k]
	if !ok {
		return apierrors.NewNotFound(podsGR, k)
	}
	delete(c.pods, k)
	p = p.DeepCopy()
	p.ResourceVersion = c.nextRV()
	c.record(watch.Deleted, p)
	return nil
}

// GetPod returns a copy of a pod.
func (c *Client) GetPod(namespace, name string) (*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[key(namespace, name)]
	if !ok {
		return nil, apierrors.NewNotFound(podsGR, key(namespace, name))
	}
	return p.DeepCopy(), nil
}

// Events returns the events recorded in a namespace.
func (c *Client) Events(namespace string) []corev1.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []corev1.Event
	for _, e := range c.events {
		if e.Namespace == namespace {
			out = append(out, *e.DeepCopy())
		}
	}
	return out
}

// podFields are the fields a pod field selector may name here.
func podFields(p *corev1.Pod) fields.Set {
	return fields.Set{"metadata.name": p.Name, "metadata.namespace": p.Namespace, "spec.nodeName": p.Spec.NodeName,
		"status.phase": string(p.Status.Phase)}
}

func selector(opts metav1.ListOptions) (fields.Selector, error) {
	if opts.FieldSelector == "" {
		return fields.Everything(), nil
	}
	sel, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("field selector %q: %v", opts.FieldSelector, err))
	}
	return sel, nil
}

// ListPods implements kube.Client.
func (c *Client) ListPods(_ context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	sel, err := selector(opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(c.rv, 10)}}
	// In key order, as the API server lists from etcd.
	for _, k := range slices.Sorted(maps.Keys(c.pods)) {
		if p := c.pods[k]; sel.Matches(podFields(p)) {
			out.Items = append(out.Items, *p.DeepCopy())
		}
	}
	return out, nil
}

// WatchPods implements kube.Client: the changes after opts.ResourceVersion
// (all of history when it is empty or "0"), then every later change.
func (c *Client) WatchPods(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	sel, err := selector(opts)
	if err != nil {
		return nil, err
	}
	var from int64
	if opts.ResourceVersion != "" {
		if from, err = strconv.ParseInt(opts.ResourceVersion, 10, 64); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: %v", opts.ResourceVersion, err))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var replay []watch.Event
	for _, ev := range c.history {
		if rv, _ := strconv.ParseInt(ev.Object.(*corev1.Pod).ResourceVersion, 10, 64); rv > from {
			replay = append(replay, ev)
		}
	}
	w, err := c.bcast.WatchWithPrefix(replay)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		p, ok := ev.Object.(*corev1.Pod)
		return ev, ok && sel.Matches(podFields(p))
	}), nil
}

// AnnotatePod implements kube.Client.
func (c *Client) AnnotatePod(_ context.Context, namespace, name string, annotations map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[key(namespace, name)]
	if !ok {
		return apierrors.NewNotFound(podsGR, key(namespace, name))
	}
	p = p.DeepCopy()
	p.Annotations = merge(p.Annotations, annotations)
	p.ResourceVersion = c.nextRV()
	c.pods[key(namespace, name)] = p
	c.record(watch.Modified, p)
	return nil
}

func merge(into, from map[string]string) map[string]string {
	if into == nil {
		into = map[string]string{}
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

// GetNode implements kube.Client.
func (c *Client) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return nil, apierrors.NewNotFound(nodesGR, name)
	}
	return n.DeepCopy(), nil
}

// AnnotateNode implements kube.Client.
func (c *Client) AnnotateNode(_ context.Context, name string, annotations map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return apierrors.NewNotFound(nodesGR, name)
	}
	n = n.DeepCopy()
	n.Annotations = merge(n.Annotations, annotations)
	n.ResourceVersion = c.nextRV()
	c.nodes[name] = n
	return nil
}

// CreateEvent implements kube.Client.
func (c *Client) CreateEvent(_ context.Context, ev *corev1.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev = ev.DeepCopy()
	if ev.Name == "" {
		ev.Name = ev.GenerateName + c.nextRV()
	}
	c.events = append(c.events, *ev)
	return nil
}
