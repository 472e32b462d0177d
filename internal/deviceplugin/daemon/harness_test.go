package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

const nodeName = "node-a"

// fakeKubelet is kubelet's registration service on <dir>/kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	sock := filepath.Join(dir, "kubelet.sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), regs: make(chan *pluginapi.RegisterRequest, 64)}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(ln) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

// awaitRegistrations collects one registration per resource.
func (k *fakeKubelet) awaitRegistrations(t *testing.T, n int) map[string]*pluginapi.RegisterRequest {
	t.Helper()
	got := map[string]*pluginapi.RegisterRequest{}
	deadline := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case r := <-k.regs:
			got[r.ResourceName] = r
		case <-deadline:
			t.Fatalf("only %d of %d resources registered: %v", len(got), n, got)
		}
	}
	return got
}

// fakePodResources is kubelet's PodResources API.
type fakePodResources struct {
	mu    sync.Mutex
	resp  *podresourcesapi.ListPodResourcesResponse
	after func() // runs once, after the next List took its snapshot
}

func (f *fakePodResources) List(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	f.mu.Lock()
	resp, after := f.resp, f.after
	f.after = nil
	f.mu.Unlock()
	if after != nil {
		after()
	}
	if resp == nil {
		return &podresourcesapi.ListPodResourcesResponse{}, nil
	}
	return resp, nil
}

// onList makes the next List run fn after taking its snapshot.
func (f *fakePodResources) onList(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after = fn
}

func (f *fakePodResources) set(pods ...*podresourcesapi.PodResources) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: pods}
}

// env is a running plugin on a simulated DGX with a fake kubelet and API server.
type env struct {
	t       *testing.T
	dir     string
	node    *gputest.Node
	client  *kubefake.Client
	podRes  *fakePodResources
	kubelet *fakeKubelet
	d       *Daemon
	cancel  context.CancelFunc
	done    chan struct{}
	used    map[string]map[string]bool // resource → IDs handed out by the test kubelet
	regs    map[string]*pluginapi.RegisterRequest
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testConfig(dir string) *configv1.Config {
	cfg := configv1.Default()
	cfg.NodeName = nodeName
	cfg.KubeletSocketDir = filepath.Join(dir, "kubelet")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.HookLibrary = filepath.Join(dir, "lib", "libtessera-hook.so")
	cfg.MetricsAddress = ""
	cfg.ReconcileInterval = configv1.Duration{Duration: time.Hour}
	cfg.RediscoverInterval = configv1.Duration{}
	cfg.ProcRoot = filepath.Join(dir, "proc")
	return cfg
}

func newEnv(t *testing.T, model string, objs ...*corev1.Pod) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "tdp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{t: t, dir: dir, node: gputest.MustNew(model), podRes: &fakePodResources{}, used: map[string]map[string]bool{}}
	e.client = kubefake.NewNode(nodeName)
	for _, p := range objs {
		if err := e.client.CreatePod(p); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// createPod adds a pod to the API server.
func (e *env) createPod(p *corev1.Pod) {
	e.t.Helper()
	if err := e.client.CreatePod(p); err != nil {
		e.t.Fatal(err)
	}
}

// updatePod replaces a pod in the API server.
func (e *env) updatePod(p *corev1.Pod) {
	e.t.Helper()
	if err := e.client.UpdatePod(p); err != nil {
		e.t.Fatal(err)
	}
}

// start wires and runs the daemon, and waits until every resource registered.
func (e *env) start(mutate ...func(*configv1.Config)) {
	t := e.t
	t.Helper()
	cfg := testConfig(e.dir)
	for _, m := range mutate {
		m(cfg)
	}
	if err := os.MkdirAll(cfg.KubeletSocketDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.node.WriteMIGMinors(cfg.ProcRoot); err != nil {
		t.Fatal(err)
	}
	if e.kubelet == nil {
		e.kubelet = startKubelet(t, cfg.KubeletSocketDir)
	}
	d, err := New(cfg, e.node, e.client, e.podRes, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	d.Plugin.Retry = 50 * time.Millisecond
	d.Health.WaitMs = 20
	// Most tests admit without a pending pod; the informer here is local.
	d.Chooser.AwaitPod = 20 * time.Millisecond
	e.d = d
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	t.Cleanup(e.stop)
	e.regs = e.kubelet.awaitRegistrations(t, len(d.Manager.Resources()))
}

func (e *env) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
}

// client dials the plugin server of a resource the way kubelet does.
func (e *env) client_(res string) pluginapi.DevicePluginClient {
	e.t.Helper()
	s := e.d.Plugin.Server(res)
	if s == nil {
		e.t.Fatalf("no server for %s", res)
	}
	conn, err := grpc.NewClient("unix://"+s.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// list reads the first ListAndWatch message.
func (e *env) list(res string) []*pluginapi.Device {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := e.client_(res).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Devices
}

// available is what kubelet would offer: healthy IDs not yet handed out.
func (e *env) available(res string) []string {
	var out []string
	for _, d := range e.list(res) {
		if d.Health == pluginapi.Healthy && !e.used[res][d.ID] {
			out = append(out, d.ID)
		}
	}
	sort.Strings(out)
	return out
}

// admit plays kubelet for one resource of one container: preferred, then
// Allocate with the preferred IDs.
func (e *env) admit(res string, size int) ([]string, *pluginapi.ContainerAllocateResponse) {
	e.t.Helper()
	ctx := context.Background()
	c := e.client_(res)
	pr, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: e.available(res), AllocationSize: int32(size)}}})
	if err != nil {
		e.t.Fatal(err)
	}
	ids := pr.ContainerResponses[0].DeviceIDs
	if len(ids) != size {
		e.t.Fatalf("%s: preferred %d IDs, want %d: %v", res, len(ids), size, ids)
	}
	ar, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		e.t.Fatalf("%s: Allocate: %v", res, err)
	}
	if e.used[res] == nil {
		e.used[res] = map[string]bool{}
	}
	for _, id := range ids {
		e.used[res][id] = true
	}
	return ids, ar.ContainerResponses[0]
}

type ctr struct {
	name           string
	gpu, mem, core int64
	init           bool
}

func pod(name string, created time.Time, assignment string, cs ...ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if assignment != "" {
		p.Annotations = map[string]string{"tessera.io/assignment": assignment}
	}
	for _, c := range cs {
		lim := corev1.ResourceList{}
		for res, n := range map[string]int64{"tessera.io/gpu": c.gpu, "tessera.io/gpu-mem": c.mem, "tessera.io/gpu-core": c.core} {
			if n > 0 {
				lim[corev1.ResourceName(res)] = *apiresource.NewQuantity(n, apiresource.DecimalSI)
			}
		}
		k := corev1.Container{Name: c.name, Resources: corev1.ResourceRequirements{Limits: lim}}
		if c.init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, k)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, k)
		}
	}
	return p
}
