package events

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// apiServer accepts Event writes and keeps them by method.
type apiServer struct {
	mu   sync.Mutex
	seen []string // method path
	body []map[string]any
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	s.mu.Lock()
	s.seen = append(s.seen, r.Method+" "+r.URL.Path)
	s.body = append(s.body, body)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		body["metadata"].(map[string]any)["resourceVersion"] = "1"
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(body)
		return
	}
	// A patch answers the patched Event, as the API server does.
	_, _ = io.WriteString(w, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"team"},"count":2}`)
}

// TestRecorderOverTheRESTSink: the recorder posts through the core/v1-only
// REST client the monitor runs with: the first Event is created on the pod,
// a repeat is folded into it by a patch of its count.
func TestRecorderOverTheRESTSink(t *testing.T) {
	s := &apiServer{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c, err := kube.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := New(RESTSink(c.RESTClient()), "node-1")
	defer r.Shutdown()
	owner := identity.Owner{Namespace: "team", Pod: "trainer", Container: "main"}
	r.Warn(t.Context(), owner, "TesseraGPUProcessKilled", "process 42 killed")
	wait := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.mu.Lock()
			got := len(s.seen)
			s.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d API calls after 10 s, want %d", got, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(1)
	r.Warn(t.Context(), owner, "TesseraGPUProcessKilled", "process 42 killed")
	wait(2)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[0] != "POST /api/v1/namespaces/team/events" || s.seen[1] != "PATCH /api/v1/namespaces/team/events/"+s.body[0]["metadata"].(map[string]any)["name"].(string) {
		t.Fatalf("calls %v", s.seen)
	}
	ev := s.body[0]
	obj := ev["involvedObject"].(map[string]any)
	if ev["reason"] != "TesseraGPUProcessKilled" || ev["type"] != corev1.EventTypeWarning || obj["kind"] != "Pod" ||
		obj["name"] != "trainer" || obj["fieldPath"] != "spec.containers{main}" ||
		ev["source"].(map[string]any)["component"] != Component || ev["source"].(map[string]any)["host"] != "node-1" {
		t.Errorf("created Event %v", ev)
	}
	if s.body[1]["count"] != float64(2) {
		t.Errorf("repeat patch %v, want count 2", s.body[1])
	}
}
