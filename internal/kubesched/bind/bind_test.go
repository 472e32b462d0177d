package bind

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func run(t *testing.T, client *fake.Clientset, j *Job) Outcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(ctx, client, 1, 3)
	p.Submit(ctx, j)
	select {
	case <-p.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("no outcome")
	}
	out := p.Take()
	if len(out) != 1 {
		t.Fatalf("%d outcomes", len(out))
	}
	return out[0]
}

func podOn(node string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1", Annotations: ann}, Spec: corev1.PodSpec{NodeName: node}}
}

// Transient errors are retried; a conflict whose pod is already bound as
// asked is our earlier try that went through; bound elsewhere is reported;
// a pod that is gone (or another pod under the name) is Gone.
func TestBindOutcomes(t *testing.T) {
	ann := map[string]string{"tessera.io/assignment": "x"}
	job := func() *Job {
		return &Job{Kind: Bind, Namespace: "ns", Name: "p", UID: "u1", Node: "n1", Annotations: ann}
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("already assigned"))

	c := fake.NewClientset(podOn("", nil))
	tries := 0
	c.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries++
		if tries < 3 {
			return true, nil, apierrors.NewTooManyRequests("slow down", 0)
		}
		return true, nil, nil
	})
	if o := run(t, c, job()); o.Err != nil || tries != 3 {
		t.Fatalf("after two 429s: %+v, %d tries", o, tries)
	}

	c = fake.NewClientset(podOn("n1", ann))
	c.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, conflict })
	if o := run(t, c, job()); o.Err != nil || o.AlreadyOn != "n1" {
		t.Fatalf("our own bind that went through: %+v", o)
	}

	c = fake.NewClientset(podOn("n2", nil))
	c.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, conflict })
	if o := run(t, c, job()); o.Err == nil || o.AlreadyOn != "n2" {
		t.Fatalf("bound elsewhere: %+v", o)
	}

	c = fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u2"}})
	c.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, conflict })
	if o := run(t, c, job()); !o.Gone {
		t.Fatalf("another pod under the name: %+v", o)
	}
}

// Evictions run in order and stop at the first refusal, naming it.
func TestEvictStopsAtTheFirstRefusal(t *testing.T) {
	c := fake.NewClientset()
	var seen []string
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		seen = append(seen, name)
		switch name {
		case "gone":
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
		case "guarded":
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, nil
	})
	o := run(t, c, &Job{Kind: Evict, For: "ns/urgent", Victims: []Victim{{"ns", "ok", "1"}, {"ns", "gone", "2"}, {"ns", "guarded", "3"}, {"ns", "never", "4"}}})
	if o.Blocked == nil || o.Blocked.Name != "guarded" || len(o.Evicted) != 2 || !apierrors.IsTooManyRequests(errors.Unwrap(o.Err)) {
		t.Fatalf("outcome %+v", o)
	}
	if len(seen) != 3 {
		t.Fatalf("tried %v; the victim after the refusal must not be", seen)
	}
}

// A bind's PreBind runs off the workers (a waiting one holds none of them
// up) and sends no Binding: its success comes back as PreBound, its
// failure as PreBindFailed.
func TestPreBind(t *testing.T) {
	c := fake.NewClientset(podOn("", nil))
	binds := 0
	c.PrependReactor("create", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetSubresource() == "binding" {
			binds++
			return true, nil, nil
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(ctx, c, 1, 1) // one worker
	release := make(chan struct{})
	waiting := &Job{Kind: Bind, Namespace: "ns", Name: "waits", Node: "n1", PreBind: func(ctx context.Context) error {
		<-release
		return nil
	}}
	failing := &Job{Kind: Bind, Namespace: "ns", Name: "p", Node: "n1", PreBind: func(context.Context) error { return errors.New("volumes not bound") }}
	plain := &Job{Kind: Bind, Namespace: "ns", Name: "p", Node: "n1"}
	p.Submit(ctx, waiting)
	p.Submit(ctx, failing)
	p.Submit(ctx, plain)
	var got []Outcome
	deadline := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case <-p.Ready():
			got = append(got, p.Take()...)
		case <-deadline:
			t.Fatalf("outcomes %+v: the waiting pre-bind held the worker", got)
		}
	}
	for _, o := range got {
		switch {
		case o.Job.Name == "p" && o.PreBindFailed:
			if o.Err == nil || o.Err.Error() != "volumes not bound" {
				t.Errorf("pre-bind failure %v", o.Err)
			}
		case o.Job.Name == "p" && o.Err == nil:
		default:
			t.Errorf("unexpected outcome %+v", o)
		}
	}
	if binds != 1 {
		t.Fatalf("%d Bindings sent before the waiting pre-bind ended, want 1 (the plain job's)", binds)
	}
	close(release)
	select {
	case <-p.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("no outcome after the pre-bind ended")
	}
	// The step's success comes back; the Binding is the caller's to send
	// (its placement may have been undone meanwhile).
	if o := p.Take(); len(o) != 1 || o[0].Job != waiting || !o[0].PreBound || o[0].Err != nil || binds != 1 {
		t.Fatalf("after the pre-bind: %+v, %d binds", o, binds)
	}
}
