// Package events posts the node monitor's findings as Kubernetes Events on the
// pod concerned, through client-go's event recorder: a process using GPU
// memory without a region, a container over its cap, a kill, a region file
// that is not a tessera region. The recorder's correlator folds repeats into
// one Event with a count and rate-limits a noisy pod, so a finding that lasts
// does not flood the API server. Without API access there are no Events; the
// metric and log line of each finding remain.
package events

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// Component is the Events' source component.
const Component = "tessera-vgpu-monitor"

// Recorder posts Warning Events on pods.
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// New starts a recorder writing to sink; node is the Events' source host.
func New(sink record.EventSink, node string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(sink)
	return &Recorder{broadcaster: b, recorder: b.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: Component, Host: node})}
}

// Warn records a Warning Event on the owner's pod, naming the container in
// the field path as kubelet does. It does not block: the broadcaster writes
// in the background (and drops when its queue is full).
func (r *Recorder) Warn(_ context.Context, owner identity.Owner, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: owner.Namespace, Name: owner.Pod}
	if owner.Container != "" {
		ref.FieldPath = "spec.containers{" + owner.Container + "}"
	}
	r.recorder.Event(ref, corev1.EventTypeWarning, reason, message)
}

// Shutdown stops the broadcaster (pending Events may be dropped).
func (r *Recorder) Shutdown() { r.broadcaster.Shutdown() }

// RESTSink is a record.EventSink over a core/v1 REST client (the device
// plugin's kube.REST, which registers core/v1 only; the typed clientset's
// EventSinkImpl would link every API group into the node agent).
func RESTSink(c rest.Interface) record.EventSink { return restSink{c} }

type restSink struct{ c rest.Interface }

// sinkTimeout bounds one write: the broadcaster retries failed ones and must
// not hang on a stalled API server.
const sinkTimeout = 10 * time.Second

func (s restSink) Create(ev *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sinkTimeout)
	defer cancel()
	out := &corev1.Event{}
	return out, s.c.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Into(out)
}

func (s restSink) Update(ev *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sinkTimeout)
	defer cancel()
	out := &corev1.Event{}
	return out, s.c.Put().Namespace(ev.Namespace).Resource("events").Name(ev.Name).Body(ev).Do(ctx).Into(out)
}

func (s restSink) Patch(old *corev1.Event, data []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sinkTimeout)
	defer cancel()
	out := &corev1.Event{}
	return out, s.c.Patch(types.StrategicMergePatchType).Namespace(old.Namespace).Resource("events").Name(old.Name).
		Body(data).Do(ctx).Into(out)
}
