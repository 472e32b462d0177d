package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/daemon"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// nodeName is the simulated node's name.
const nodeName = "demo-node"

// patience bounds every wait for a component to reach a state (each
// returns as soon as it does): generous, for a loaded 2-core CI machine.
const patience = 60 * time.Second

// gpuCount is how many GPUs the simulated node has.
const gpuCount = 4

// simNode is the reduced form's node: the simulated driver's environment,
// the real device plugin daemon over go-nvml's mock of the same GPUs (UUIDs
// and memory equal to the simulated driver's), an in-memory API server, and
// the kubelet side (registration, PodResources) played here.
type simNode struct {
	dir, stateDir string
	libDir        string
	// driverEnv is what a process needs to find the simulated driver.
	driverEnv []string
	client    *kubefake.Client
	podRes    *podResources
	plugin    *daemon.Daemon
	stop      func()
	// used are the device IDs handed out, per resource (kubelet's books).
	used map[string]map[string]bool
}

// startNode runs the device plugin on a simulated 4-GPU H200 node in dir.
func startNode(ctx context.Context, dir, libDir string) (*simNode, error) {
	n := &simNode{dir: dir, stateDir: filepath.Join(dir, "state"), libDir: libDir, used: map[string]map[string]bool{}}
	specs := make([]string, gpuCount)
	for i := range specs {
		specs[i] = fmt.Sprintf("%s:%d:%d", fakegpu.DefaultName, fakegpu.DefaultMemMiB, fakegpu.DefaultSMCount)
	}
	n.driverEnv = []string{
		"LD_LIBRARY_PATH=" + filepath.Join(libDir, "fakegpu"),
		"FAKEGPU_STATE=" + filepath.Join(dir, "fakegpu.state"),
		"FAKEGPU_DEVICES=" + strings.Join(specs, ";"),
		"PATH=" + os.Getenv("PATH"),
	}
	lib, err := gputest.NewForNode(gputest.DGXH200, nodeName)
	if err != nil {
		return nil, err
	}
	lib.Devices = lib.Devices[:gpuCount]
	for i := range gpuCount {
		lib.Device(i).UUID = fakegpu.UUID("", i)
		lib.Device(i).MemoryInfo = nvml.Memory{Total: fakegpu.DefaultMemMiB << 20}
	}
	cfg := configv1.Default()
	cfg.NodeName = nodeName
	cfg.KubeletSocketDir = filepath.Join(dir, "kubelet")
	cfg.StateDir = n.stateDir
	cfg.HookLibrary = filepath.Join(libDir, "libtessera-hook.so")
	cfg.MetricsAddress = ""
	cfg.ReconcileInterval = configv1.Duration{Duration: 200 * time.Millisecond}
	cfg.RediscoverInterval = configv1.Duration{}
	cfg.ProcRoot = filepath.Join(dir, "proc")
	if err := os.MkdirAll(cfg.KubeletSocketDir, 0o755); err != nil {
		return nil, err
	}
	if err := lib.WriteMIGMinors(cfg.ProcRoot); err != nil {
		return nil, err
	}
	reg, err := startRegistration(cfg.KubeletSocketDir)
	if err != nil {
		return nil, err
	}
	n.client = kubefake.NewNode(nodeName)
	n.podRes = &podResources{}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.New(cfg, lib, n.client, n.podRes, quiet)
	if err != nil {
		reg.srv.Stop()
		return nil, fmt.Errorf("device plugin: %w", err)
	}
	d.Plugin.Retry = 50 * time.Millisecond
	// The pods are in the (in-memory) API server before kubelet admits them.
	d.Chooser.AwaitPod = 2 * time.Second
	n.plugin = d
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	n.stop = func() {
		cancel()
		<-done
		reg.srv.Stop()
	}
	want := len(d.Manager.Resources())
	if err := reg.await(want, patience); err != nil {
		n.stop()
		return nil, err
	}
	if _, err := n.inventory(patience); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// inventory waits for the plugin's tessera.io/node-gpus annotation.
func (n *simNode) inventory(wait time.Duration) (*annv1.NodeGPUs, error) {
	deadline := time.Now().Add(wait)
	for {
		node, err := n.client.GetNode(context.Background(), nodeName)
		if err == nil {
			if raw, ok := node.Annotations[annv1.NodeGPUsKey]; ok {
				return annv1.ParseNodeGPUs(raw)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the device plugin published no %s annotation in %s", annv1.NodeGPUsKey, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// admit plays kubelet for one resource of one container: the IDs still
// free, the plugin's preferred choice among them, then Allocate.
func (n *simNode) admit(ctx context.Context, res string, size int) ([]string, *pluginapi.ContainerAllocateResponse, error) {
	s := n.plugin.Plugin.Server(res)
	if s == nil {
		return nil, nil, fmt.Errorf("the device plugin serves no %s", res)
	}
	conn, err := grpc.NewClient("unix://"+s.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	c := pluginapi.NewDevicePluginClient(conn)
	avail, err := n.available(ctx, c, res)
	if err != nil {
		return nil, nil, err
	}
	pr, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: avail, AllocationSize: int32(size)}}})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: GetPreferredAllocation: %w", res, err)
	}
	ids := pr.ContainerResponses[0].DeviceIDs
	if len(ids) != size {
		return nil, nil, fmt.Errorf("%s: the plugin preferred %d IDs, kubelet needs %d", res, len(ids), size)
	}
	ar, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: Allocate: %w", res, err)
	}
	if n.used[res] == nil {
		n.used[res] = map[string]bool{}
	}
	for _, id := range ids {
		n.used[res][id] = true
	}
	return ids, ar.ContainerResponses[0], nil
}

// available reads the plugin's devices (ListAndWatch's first message) and
// keeps the healthy ones not yet handed out.
func (n *simNode) available(ctx context.Context, c pluginapi.DevicePluginClient, res string) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := c.ListAndWatch(lctx, &pluginapi.Empty{})
	if err != nil {
		return nil, fmt.Errorf("%s: ListAndWatch: %w", res, err)
	}
	m, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("%s: ListAndWatch: %w", res, err)
	}
	var out []string
	for _, d := range m.Devices {
		if d.Health == pluginapi.Healthy && !n.used[res][d.ID] {
			out = append(out, d.ID)
		}
	}
	sort.Strings(out)
	return out, nil
}

// release gives a deleted container's IDs back to kubelet's books.
func (n *simNode) release(devices map[string][]string) {
	for res, ids := range devices {
		for _, id := range ids {
			delete(n.used[res], id)
		}
	}
}

// registration is kubelet's registration service (kubelet.sock).
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	regs chan string
}

func startRegistration(dir string) (*registration, error) {
	sock := filepath.Join(dir, "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("kubelet registration socket: %w", err)
	}
	r := &registration{srv: grpc.NewServer(), regs: make(chan string, 64)}
	pluginapi.RegisterRegistrationServer(r.srv, r)
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.regs <- req.ResourceName
	return &pluginapi.Empty{}, nil
}

func (r *registration) await(n int, wait time.Duration) error {
	got := map[string]bool{}
	deadline := time.After(wait)
	for len(got) < n {
		select {
		case res := <-r.regs:
			got[res] = true
		case <-deadline:
			return fmt.Errorf("only %d of %d resources registered with kubelet in %s", len(got), n, wait)
		}
	}
	return nil
}

// podResources is kubelet's PodResources API: the containers admitted so
// far and the device IDs each holds. The device plugin reads it in-process;
// the node monitor reads it over a unix socket, as on a node.
type podResources struct {
	mu   sync.Mutex
	pods []*podresourcesapi.PodResources
	srv  *grpc.Server
}

// List is the device plugin's Lister.
func (p *podResources) List(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &podresourcesapi.ListPodResourcesResponse{PodResources: append([]*podresourcesapi.PodResources(nil), p.pods...)}, nil
}

// serve answers the gRPC PodResourcesLister on sock.
func (p *podResources) serve(sock string) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("PodResources socket: %w", err)
	}
	p.srv = grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(p.srv, grpcLister{p: p})
	go func() { _ = p.srv.Serve(ln) }()
	return nil
}

func (p *podResources) close() {
	if p.srv != nil {
		p.srv.Stop()
	}
}

// add lists a container with its devices (kubelet lists one entry per ID).
func (p *podResources) add(namespace, pod, container string, devices map[string][]string) {
	c := &podresourcesapi.ContainerResources{Name: container}
	for res, ids := range devices {
		for _, id := range ids {
			c.Devices = append(c.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = append(p.pods, &podresourcesapi.PodResources{Namespace: namespace, Name: pod, Containers: []*podresourcesapi.ContainerResources{c}})
}

// remove drops a deleted pod.
func (p *podResources) remove(namespace, pod string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.pods {
		if r.Namespace == namespace && r.Name == pod {
			p.pods = append(p.pods[:i], p.pods[i+1:]...)
			return nil
		}
	}
	return errors.New("pod " + namespace + "/" + pod + " is not listed")
}

// grpcLister adapts podResources to the gRPC service.
type grpcLister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	p *podResources
}

func (g grpcLister) List(ctx context.Context, _ *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return g.p.List(ctx)
}
