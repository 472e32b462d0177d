package kubefake

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func pod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node}}
}

func next(t *testing.T, w watch.Interface) (watch.EventType, string) {
	t.Helper()
	select {
	case ev := <-w.ResultChan():
		return ev.Type, ev.Object.(*corev1.Pod).Name
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
		return "", ""
	}
}

// A watch started from a list's version sees exactly what changed since,
// on the selected node only.
func TestWatchReplaysSinceListVersion(t *testing.T) {
	c := NewNode("n", pod("a", "n"), pod("x", "other"))
	ctx := context.Background()
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=n"}
	list, err := c.ListPods(ctx, opts)
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	// Changes between the list and the watch must not be lost.
	if err := c.CreatePod(pod("b", "n")); err != nil {
		t.Fatal(err)
	}
	if err := c.CreatePod(pod("y", "other")); err != nil {
		t.Fatal(err)
	}
	opts.ResourceVersion = list.ResourceVersion
	w, err := c.WatchPods(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if typ, name := next(t, w); typ != watch.Added || name != "b" {
		t.Fatalf("replayed %s %s, want ADDED b", typ, name)
	}
	if err := c.AnnotatePod(ctx, "ns", "b", map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if typ, name := next(t, w); typ != watch.Modified || name != "b" {
		t.Fatalf("got %s %s, want MODIFIED b", typ, name)
	}
	if err := c.DeletePod("ns", "a"); err != nil {
		t.Fatal(err)
	}
	if typ, name := next(t, w); typ != watch.Deleted || name != "a" {
		t.Fatalf("got %s %s, want DELETED a", typ, name)
	}
	if p, _ := c.GetPod("ns", "b"); p.Annotations["k"] != "v" {
		t.Fatalf("annotations = %v", p.Annotations)
	}
}

func TestErrors(t *testing.T) {
	c := NewNode("n", pod("a", "n"))
	ctx := context.Background()
	if err := c.CreatePod(pod("a", "n")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("duplicate create: %v", err)
	}
	if err := c.AnnotatePod(ctx, "ns", "nope", nil); !apierrors.IsNotFound(err) {
		t.Fatalf("annotate missing pod: %v", err)
	}
	if err := c.AnnotateNode(ctx, "nope", nil); !apierrors.IsNotFound(err) {
		t.Fatalf("annotate missing node: %v", err)
	}
	if _, err := c.ListPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("bad selector: %v", err)
	}
	if _, err := c.WatchPods(ctx, metav1.ListOptions{ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("bad resource version: %v", err)
	}
}
