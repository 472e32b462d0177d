package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// request is what the API server saw.
type request struct {
	method, path, query, contentType, accept string
	body                                     map[string]any
}

// apiServer answers core/v1 calls with canned JSON and records requests.
type apiServer struct {
	mu   sync.Mutex
	seen []request
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	req := request{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, contentType: r.Header.Get("Content-Type"),
		accept: r.Header.Get("Accept")}
	_ = json.Unmarshal(b, &req.body)
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	pod := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"7"},"spec":{"nodeName":"n"}}`
	switch {
	case r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("watch") == "true":
		_, _ = io.WriteString(w, `{"type":"ADDED","object":`+pod+"}\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/pods":
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[`+pod+`]}`)
	case r.URL.Path == "/api/v1/nodes/n" && r.Method == http.MethodGet:
		_, _ = io.WriteString(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n","annotations":{"a":"b"}}}`)
	case r.URL.Path == "/api/v1/nodes/gone":
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"nodes \"gone\" not found"}`)
	case r.URL.Path == "/api/v1/namespaces/ns/pods/p" && r.Method == http.MethodGet:
		_, _ = io.WriteString(w, pod)
	case r.URL.Path == "/api/v1/namespaces/ns/pods/p", r.URL.Path == "/api/v1/nodes/n":
		_, _ = w.Write(b) // echo is enough: the client discards the result
	case r.URL.Path == "/api/v1/namespaces/ns/pods/p/eviction":
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success","code":201}`)
	case r.URL.Path == "/api/v1/namespaces/ns/pods/pdb/eviction":
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"Cannot evict pod as it would violate the pod's disruption budget."}`)
	case r.URL.Path == "/api/v1/namespaces/ns/events":
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	default:
		w.WriteHeader(http.StatusTeapot)
	}
}

func (s *apiServer) last() request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[len(s.seen)-1]
}

func newClient(t *testing.T) (*REST, *apiServer) {
	t.Helper()
	s := &apiServer{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestListAndWatchPods(t *testing.T) {
	c, s := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=n"}
	list, err := c.ListPods(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "p" || list.ResourceVersion != "7" {
		t.Fatalf("list = %+v", list)
	}
	if r := s.last(); r.method != http.MethodGet || r.query != "fieldSelector=spec.nodeName%3Dn" ||
		r.accept != "application/vnd.kubernetes.protobuf,application/json" {
		t.Fatalf("list request = %+v", r)
	}
	opts.ResourceVersion = "7"
	w, err := c.WatchPods(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		p, ok := ev.Object.(*corev1.Pod)
		if ev.Type != watch.Added || !ok || p.Spec.NodeName != "n" {
			t.Fatalf("watch event = %v %#v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	if r := s.last(); r.query != "fieldSelector=spec.nodeName%3Dn&resourceVersion=7&watch=true" {
		t.Fatalf("watch request = %+v", r)
	}
}

func TestAnnotate(t *testing.T) {
	c, s := newClient(t)
	ctx := context.Background()
	want := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"tessera.io/x": "1"}}}
	for name, call := range map[string]func() error{
		"/api/v1/namespaces/ns/pods/p": func() error { return c.AnnotatePod(ctx, "ns", "p", map[string]string{"tessera.io/x": "1"}) },
		"/api/v1/nodes/n":              func() error { return c.AnnotateNode(ctx, "n", map[string]string{"tessera.io/x": "1"}) },
	} {
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := s.last()
		if r.method != http.MethodPatch || r.path != name || r.contentType != "application/merge-patch+json" {
			t.Fatalf("%s: request = %+v", name, r)
		}
		if got, _ := json.Marshal(r.body); string(got) != mustJSON(want) {
			t.Fatalf("%s: patch = %s", name, got)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestGetNode(t *testing.T) {
	c, _ := newClient(t)
	n, err := c.GetNode(context.Background(), "n")
	if err != nil || n.Name != "n" || n.Annotations["a"] != "b" {
		t.Fatalf("node = %+v, %v", n, err)
	}
	if _, err := c.GetNode(context.Background(), "gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing node: err = %v, want NotFound", err)
	}
}

func TestCreateEvent(t *testing.T) {
	c, s := newClient(t)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "p.", Namespace: "ns"}, Reason: "R", Type: corev1.EventTypeWarning}
	if err := c.CreateEvent(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	r := s.last()
	if r.method != http.MethodPost || r.path != "/api/v1/namespaces/ns/events" || r.body["kind"] != "Event" ||
		r.body["apiVersion"] != "v1" || r.body["reason"] != "R" {
		t.Fatalf("event request = %+v", r)
	}
}

func TestEvictPodPostsAnEvictionWithThePodsGrace(t *testing.T) {
	c, s := newClient(t)
	if err := c.EvictPod(context.Background(), "ns", "p"); err != nil {
		t.Fatal(err)
	}
	r := s.last()
	meta, _ := r.body["metadata"].(map[string]any)
	if r.method != http.MethodPost || r.path != "/api/v1/namespaces/ns/pods/p/eviction" || r.body["kind"] != "Eviction" ||
		r.body["apiVersion"] != "policy/v1" || meta["name"] != "p" || meta["namespace"] != "ns" {
		t.Fatalf("eviction request = %+v", r)
	}
	if _, ok := r.body["deleteOptions"]; ok {
		t.Errorf("the eviction overrides the pod's grace period: %+v", r.body)
	}
	if err := c.EvictPod(context.Background(), "ns", "pdb"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("an eviction a disruption budget refuses: err = %v, want TooManyRequests", err)
	}
}

func TestGetPod(t *testing.T) {
	c, _ := newClient(t)
	p, err := c.GetPod(context.Background(), "ns", "p")
	if err != nil || p.Name != "p" || p.Spec.NodeName != "n" {
		t.Fatalf("GetPod = %+v, %v", p, err)
	}
}
