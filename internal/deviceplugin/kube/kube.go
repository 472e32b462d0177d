// Package kube is the device plugin's access to the API server: exactly
// the calls it makes (watch the pods of its node, annotate pods and its
// node, record events) over a REST client whose scheme holds only core/v1.
//
// The typed clientset (k8s.io/client-go/kubernetes) registers every API
// group of Kubernetes at init and links a client for each; for a
// DaemonSet that runs on every GPU node that cost tens of MiB of resident
// memory for code the plugin never calls.
package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is what the plugin needs from the API server.
type Client interface {
	// ListPods and WatchPods list and watch pods in all namespaces,
	// restricted by opts (the plugin selects spec.nodeName).
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// AnnotatePod sets annotations on a pod, leaving its others as they are.
	AnnotatePod(ctx context.Context, namespace, name string, annotations map[string]string) error
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// AnnotateNode sets annotations on a node, leaving its others as they are.
	AnnotateNode(ctx context.Context, name string, annotations map[string]string) error
	CreateEvent(ctx context.Context, ev *corev1.Event) error
}

// scheme knows core/v1 (and the meta/v1 types every group carries) only.
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	// core/v1's AddToScheme cannot fail: it only registers Go types.
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("core/v1 scheme: %v", err))
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
}

// REST is a Client over the API server's core/v1 REST endpoints.
type REST struct {
	rc *rest.RESTClient
}

var _ Client = (*REST)(nil)

// NewFromKubeconfig connects with the kubeconfig file at path, or with the
// in-cluster configuration (service account) when path is empty.
func NewFromKubeconfig(path string) (*REST, error) {
	var rc *rest.Config
	var err error
	if path != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	return NewForConfig(rc)
}

// NewForConfig returns a core/v1 client for cfg (in-cluster or kubeconfig).
func NewForConfig(cfg *rest.Config) (*REST, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.AcceptContentTypes == "" {
		// Pods decode faster and smaller from protobuf; core/v1 has it.
		c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	if c.UserAgent == "" {
		c.UserAgent = "tessera-device-plugin"
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("core/v1 REST client: %w", err)
	}
	return &REST{rc: rc}, nil
}

// ListPods implements Client.
func (c *REST) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	var out corev1.PodList
	err := c.rc.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeout(opts)).Do(ctx).Into(&out)
	return &out, err
}

// WatchPods implements Client.
func (c *REST) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeout(opts)).Watch(ctx)
}

// AnnotatePod implements Client with a JSON merge patch.
func (c *REST) AnnotatePod(ctx context.Context, namespace, name string, annotations map[string]string) error {
	patch, err := annotationPatch(annotations)
	if err != nil {
		return err
	}
	return c.rc.Patch(types.MergePatchType).Namespace(namespace).Resource("pods").Name(name).
		Body(patch).Do(ctx).Error()
}

// GetNode implements Client.
func (c *REST) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	var out corev1.Node
	err := c.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(&out)
	return &out, err
}

// AnnotateNode implements Client with a JSON merge patch.
func (c *REST) AnnotateNode(ctx context.Context, name string, annotations map[string]string) error {
	patch, err := annotationPatch(annotations)
	if err != nil {
		return err
	}
	return c.rc.Patch(types.MergePatchType).Resource("nodes").Name(name).Body(patch).Do(ctx).Error()
}

// annotationPatch is the merge patch that sets annotations.
func annotationPatch(annotations map[string]string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
}

// RESTClient is the underlying core/v1 client, for callers that need a call
// Client does not name (the node monitor's event recorder sink).
func (c *REST) RESTClient() rest.Interface { return c.rc }

// CreateEvent implements Client.
func (c *REST) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return c.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// timeout is the request timeout the API server was asked for, as the
// generated clientset sets it.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// GetPod reads one pod (the node agent learns a container's balloon opt-in and
// priority from its pod).
func (c *REST) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var out corev1.Pod
	err := c.rc.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(&out)
	return &out, err
}

// EvictPod asks the API server to evict a pod through the Eviction API (policy/v1),
// so PodDisruptionBudgets are honoured, and leaves the grace period to the pod's own
// terminationGracePeriodSeconds. The body is written as JSON rather than as the
// policy/v1 type: this client's scheme holds core/v1 only (see the package comment).
func (c *REST) EvictPod(ctx context.Context, namespace, name string) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "policy/v1", "kind": "Eviction",
		"metadata": map[string]string{"name": name, "namespace": namespace},
	})
	if err != nil {
		return err
	}
	return c.rc.Post().Namespace(namespace).Resource("pods").Name(name).SubResource("eviction").
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).Do(ctx).Error()
}
