package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/identity/identitytest"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// balloonAPI is the API server as the balloon controller uses it: it serves
// the pods' opt-in, borrower record and priority, and records node patches
// and evictions.
type balloonAPI struct {
	pods map[string]*corev1.Pod // namespace/name

	mu        sync.Mutex
	nodePatch []string // bodies of PATCH /api/v1/nodes/<node>
	evicted   []string // namespace/name
}

func (s *balloonAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/"), "/")
	switch {
	case len(parts) == 4 && parts[0] == "namespaces" && parts[2] == "pods" && r.Method == http.MethodGet:
		p, ok := s.pods[parts[1]+"/"+parts[3]]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		_ = json.NewEncoder(w).Encode(p)
	case len(parts) == 5 && parts[2] == "pods" && parts[4] == "eviction" && r.Method == http.MethodPost:
		s.mu.Lock()
		s.evicted = append(s.evicted, parts[1]+"/"+parts[3])
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success","code":201}`)
	case len(parts) == 2 && parts[0] == "nodes" && r.Method == http.MethodPatch:
		s.mu.Lock()
		s.nodePatch = append(s.nodePatch, string(body))
		s.mu.Unlock()
		_, _ = io.WriteString(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"`+parts[1]+`"}}`)
	case len(parts) == 3 && parts[2] == "events":
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	default:
		w.WriteHeader(http.StatusTeapot)
	}
}

func (s *balloonAPI) seen() (patches, evicted []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nodePatch...), append([]string(nil), s.evicted...)
}

func apiPod(ns, name string, priority int32, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: "node-1", Priority: &priority}}
}

// memContainer writes a memory allocation of capMiB on uuid as the device
// plugin does, with usedMiB charged to this process (alive: never reaped).
func memContainer(t *testing.T, state, uuid string, first int, capMiB, usedMiB uint64) (ids []string, limits, reg string) {
	t.Helper()
	for i := range 4 {
		ids = append(ids, resource.ID{GPU: uuid, Kind: resource.KindMem, N: first + i}.String())
	}
	dir := filepath.Join(statedir.Containers(state), allocation.Key(resource.KindMem, ids))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	limits, reg = filepath.Join(dir, statedir.LimitsFile), filepath.Join(dir, statedir.RegionFile)
	if err := region.WriteLimits(limits, []region.DeviceLimit{{UUID: uuid, MemLimitBytes: capMiB << 20}}); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(reg); err != nil {
		t.Fatal(err)
	}
	self, err := hostproc.Read("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := regiontest.Write(reg, regiontest.Contents{Slots: []regiontest.Slot{{PID: self.NSPID, StartTime: self.StartTime, UsedBytes: map[int]uint64{0: usedMiB << 20}}}}); err != nil {
		t.Fatal(err)
	}
	return ids, limits, reg
}

// TestBinaryRunsBalloons runs the command as deployed with balloon.enabled in
// its --config and an API server reached through --kubeconfig: a settled
// opted-in owner on a 1024 MiB GPU is lowered by what a borrower's cap puts
// the GPU over (its limits file: cap, ceiling, floor), the node annotation
// says what is lent, and when the owner waits for its memory the borrower
// (using all it has) is evicted through the Eviction API.
func TestBinaryRunsBalloons(t *testing.T) {
	libs, err := fakegpu.LibDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("FAKEGPU_STATE", filepath.Join(dir, "fakegpu.state"))
	t.Setenv("FAKEGPU_DEVICES", "Test GPU:1024:10")
	t.Setenv("FAKEGPU_CONFIG", "")
	uuid := fakegpu.UUID("", 0)
	state := filepath.Join(dir, "state")
	ownerIDs, ownerLimits, ownerRegion := memContainer(t, state, uuid, 0, 800, 100)
	borrowerIDs, _, _ := memContainer(t, state, uuid, 100, 400, 398)

	borrowed, err := annv1.Marshal(&annv1.Borrowed{Version: annv1.Version, GPUs: []annv1.BorrowedGPU{{UUID: uuid, MemoryMiB: 176, From: []string{"team/owner/main"}}}})
	if err != nil {
		t.Fatal(err)
	}
	api := &balloonAPI{pods: map[string]*corev1.Pod{
		"team/owner":    apiPod("team", "owner", 100, map[string]string{annv1.BalloonKey: "true"}),
		"team/borrower": apiPod("team", "borrower", 10, map[string]string{annv1.BorrowedKey: borrowed}),
	}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "vgpu-monitor.yaml")
	if err := os.WriteFile(config, []byte(`version: v1
kubernetes: {kubeconfig: "`+kubeconfig+`"}
balloon: {enabled: true, interval: 20ms, window: 1m, settle: 300ms, marginPercent: 10, minFloorMiB: 64, waitMs: 3000}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "kubelet.sock")
	identitytest.Serve(t, socket, []identity.Listing{
		{Owner: identity.Owner{Namespace: "team", Pod: "owner", Container: "main"}, Devices: map[string][]string{resource.Memory: ownerIDs}},
		{Owner: identity.Owner{Namespace: "team", Pod: "borrower", Container: "main"}, Devices: map[string][]string{resource.Memory: borrowerIDs}},
	})
	startOnFreePort(t, func(addr string) []string {
		return []string{"--config", config, "--node-name", "node-1", "--state-dir", state, "--pod-resources-socket", socket,
			"--listen-address", addr, "--nvml-library", filepath.Join(libs, "libnvidia-ml.so.1")}
	})

	// 800 + 400 MiB on 1024: the owner (peak 100 MiB, floor 180) is lowered by 176.
	ownerCap := func() (uint64, region.Balloon) {
		l, err := region.OpenLimits(ownerLimits)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		b, _ := l.Balloon(uuid)
		return l.Devices()[0].MemLimitBytes, b
	}
	within(t, 60*time.Second, "the owner inflated", func() bool { c, _ := ownerCap(); return c != 800<<20 })
	if c, b := ownerCap(); c != 624<<20 || b != (region.Balloon{CeilingBytes: 800 << 20, WaitMS: 3000, FloorBytes: 180 << 20}) {
		t.Fatalf("owner cap %d MiB, balloon %+v; want 624 MiB under an 800 MiB ceiling, floor 180", c>>20, b)
	}
	within(t, 30*time.Second, "the node annotation saying 176 MiB are lent", func() bool {
		patches, _ := api.seen()
		for _, p := range patches {
			if strings.Contains(p, annv1.NodeBalloonsKey) && strings.Contains(p, `\"lentMiB\":176`) {
				return true
			}
		}
		return false
	})

	// The owner's allocation waits for its ceiling; the borrower uses all but a
	// sliver of its cap, so it is evicted rather than shrunk. The waiter polls
	// (its stamp is kept fresh) until then.
	within(t, 60*time.Second, "the borrower evicted for the waiting owner", func() bool {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		if err := regiontest.WriteBalloonWait(ownerRegion, 0, 700<<20, 1, uint64(ts.Nano())); err != nil {
			t.Fatal(err)
		}
		_, evicted := api.seen()
		return len(evicted) > 0
	})
	if _, evicted := api.seen(); fmt.Sprint(evicted) != "[team/borrower]" {
		t.Fatalf("evicted %v, want the borrower only", evicted)
	}
}

// within polls cond every 50 ms for up to d.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
