package kubelet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	_ "unsafe" // go:linkname

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cadvisorapi "github.com/google/cadvisor/info/v1"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/daemon"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/internal/podresources"
)

// newManagerImpl is kubelet's device manager constructor that takes the
// socket path; the exported one hard-codes /var/lib/kubelet/device-plugins,
// which a test must not touch.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*devicemanager.ManagerImpl, error)

const node = "node-k"

// cluster is a running plugin and kubelet's real device manager.
type cluster struct {
	t      *testing.T
	dir    string
	gpus   *gputest.Node
	client *kubefake.Client
	d      *daemon.Daemon
	// reconcileEvery and gcGrace shorten the plugin's read-back period
	// and state collection grace (default: an hour, 10 minutes).
	reconcileEvery, gcGrace time.Duration
	// deviceList is the plugin's deviceListStrategy (default envvar).
	deviceList string

	mu         sync.Mutex
	pods       []*corev1.Pod
	mgr        *devicemanager.ManagerImpl
	restarting bool // kubelet lists no pods and its sources are not ready
}

// activePods are the pods kubelet runs: none while a restarted kubelet
// has not read them back yet.
func (c *cluster) activePods() []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restarting {
		return nil
	}
	return append([]*corev1.Pod(nil), c.pods...)
}

// manager is the running device manager (replaced by a kubelet restart).
func (c *cluster) manager() *devicemanager.ManagerImpl {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mgr
}

func newCluster(t *testing.T) *cluster {
	dir, err := os.MkdirTemp("", "tkl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &cluster{t: t, dir: dir, gpus: gputest.MustNew(gputest.DGXH200)}
	c.client = kubefake.NewNode(node)
	c.servePodResources()
	return c
}

func (c *cluster) socketDir() string { return filepath.Join(c.dir, "device-plugins") }

// startKubelet starts kubelet's device manager (again, after a "restart").
func (c *cluster) startKubelet() {
	t := c.t
	logger := klog.Background()
	mgr, err := newManagerImpl(logger, filepath.Join(c.socketDir(), "kubelet.sock"), nil, topologymanager.NewFakeManager(logger))
	if err != nil {
		t.Fatal(err)
	}
	// Until a restarted kubelet has its pods back, its sources are not
	// ready and the device manager frees nothing.
	ready := config.NewSourcesReady(func(sets.Set[string]) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.restarting
	})
	if err := mgr.Start(logger, c.activePods, ready, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.mgr = mgr
	c.mu.Unlock()
	t.Cleanup(func() { _ = mgr.Stop(logger) })
}

func (c *cluster) startPlugin() {
	t := c.t
	cfg := configv1.Default()
	cfg.NodeName = node
	cfg.KubeletSocketDir = c.socketDir()
	cfg.StateDir = filepath.Join(c.dir, "state")
	cfg.HookLibrary = "/usr/local/tessera/lib/libtessera-hook.so"
	cfg.MetricsAddress = ""
	cfg.ReconcileInterval = configv1.Duration{Duration: time.Hour}
	if c.reconcileEvery > 0 {
		cfg.ReconcileInterval = configv1.Duration{Duration: c.reconcileEvery}
	}
	cfg.PodResourcesSocket = c.podResourcesSocket()
	cfg.RediscoverInterval = configv1.Duration{} // tests call Rediscover
	if c.deviceList != "" {
		cfg.DeviceListStrategy = c.deviceList
	}
	cfg.ProcRoot = filepath.Join(c.dir, "proc")
	if err := c.gpus.WriteMIGMinors(cfg.ProcRoot); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pr, err := podresources.Dial(cfg.PodResourcesSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	d, err := daemon.New(cfg, c.gpus, c.client, pr, log)
	if err != nil {
		t.Fatal(err)
	}
	if c.gcGrace > 0 {
		d.Reconciler.GCGrace = c.gcGrace
	}
	d.Plugin.Retry = 50 * time.Millisecond
	c.d = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("plugin: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// awaitCapacity waits until kubelet's device manager reports want for
// every resource, as capacity and as allocatable.
func (c *cluster) awaitCapacity(want map[string]int64) { c.awaitAllocatable(want, want) }

// awaitAllocatable waits for the given capacity and allocatable.
func (c *cluster) awaitAllocatable(want, wantAllocatable map[string]int64) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		capacity, allocatable, _ := c.mgr.GetCapacity(klog.Background())
		ok := true
		for res, n := range want {
			q := capacity[corev1.ResourceName(res)]
			a := allocatable[corev1.ResourceName(res)]
			ok = ok && q.Value() == n && a.Value() == wantAllocatable[res]
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("kubelet capacity = %v, allocatable = %v; want %v, %v", capacity, allocatable, want, wantAllocatable)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) addPod(p *corev1.Pod) {
	c.t.Helper()
	if err := c.client.CreatePod(p); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.pods = append(c.pods, p)
	c.mu.Unlock()
	// The plugin's informer must have seen the pod before kubelet admits it.
	deadline := time.Now().Add(30 * time.Second)
	for c.d.Chooser.Pods.Get(p.Namespace, p.Name) == nil {
		if time.Now().After(deadline) {
			c.t.Fatal("plugin never saw the pod")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// admit runs kubelet's per-container device allocation, init containers first.
func (c *cluster) admit(p *corev1.Pod) map[string]map[string]string {
	c.t.Helper()
	envs := map[string]map[string]string{}
	for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if err := c.mgr.Allocate(context.Background(), p, &ctr, lifecycle.AddOperation); err != nil {
			c.t.Fatalf("kubelet Allocate %s: %v", ctr.Name, err)
		}
		opts, err := c.mgr.GetDeviceRunContainerOptions(context.Background(), p, &ctr)
		if err != nil {
			c.t.Fatal(err)
		}
		env := map[string]string{}
		for _, e := range opts.Envs {
			env[e.Name] = e.Value
		}
		for _, m := range opts.Mounts {
			env["mount:"+m.ContainerPath] = m.HostPath
		}
		for _, d := range opts.Devices {
			env["dev:"+d.PathInContainer] = d.PathOnHost
		}
		envs[ctr.Name] = env
	}
	return envs
}

func (c *cluster) uuid(i int) string { return c.gpus.Device(i).UUID }

// devicesOf returns the GPUs of a resource kubelet gave a container.
func (c *cluster) devicesOf(p *corev1.Pod, ctr, res string) []string {
	var ids []string
	for id := range c.mgr.GetDevices(string(p.UID), ctr)[res] {
		ids = append(ids, id)
	}
	return resource.GPUsOf(ids)
}

func makePod(name string, created time.Time, cs map[string][2]int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	names := make([]string, 0, len(cs))
	for n := range cs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		lim := corev1.ResourceList{
			"tessera.io/gpu-mem":  *apiresource.NewQuantity(cs[n][0], apiresource.DecimalSI),
			"tessera.io/gpu-core": *apiresource.NewQuantity(cs[n][1], apiresource.DecimalSI),
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n, Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}})
	}
	return p
}

func (c *cluster) assignment(byContainer map[string]int, cs map[string][2]int64) string {
	a := annotations.Assignment{Version: annotations.Version}
	for name, gpu := range byContainer {
		a.Containers = append(a.Containers, annotations.ContainerAssignment{Name: name, GPUs: []annotations.GPUShare{
			{UUID: c.uuid(gpu), MemoryMiB: uint64(cs[name][0]) * 1024, CorePercent: uint32(cs[name][1])}}})
	}
	s, err := annotations.Marshal(&a)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

var fullNode = map[string]int64{"tessera.io/gpu": 80, "tessera.io/gpu-mem": 8 * 141, "tessera.io/gpu-core": 800}

func TestKubeletDeviceManager(t *testing.T) {
	c := newCluster(t)
	if err := os.MkdirAll(c.socketDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	c.startPlugin()
	c.startKubelet()

	t.Run("registration and ListAndWatch", func(t *testing.T) {
		c.awaitCapacity(fullNode)
	})

	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	shape := map[string][2]int64{"learner": {24, 40}, "actor": {8, 20}}
	two := makePod("two", t0, shape)
	two.Annotations = map[string]string{annotations.AssignmentKey: c.assignment(map[string]int{"learner": 4, "actor": 6}, shape)}

	t.Run("preferred allocation honoured for a two-container pod", func(t *testing.T) {
		c.addPod(two)
		envs := c.admit(two)
		for ctr, gpu := range map[string]int{"learner": 4, "actor": 6} {
			want := []string{c.uuid(gpu)}
			for _, res := range []string{"tessera.io/gpu-mem", "tessera.io/gpu-core"} {
				if got := c.devicesOf(two, ctr, res); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s %s on %v, assigned %v", ctr, res, got, want)
				}
			}
			e := envs[ctr]
			if e["NVIDIA_VISIBLE_DEVICES"] != c.uuid(gpu) || e["TESSERA_REGION"] != "/run/tessera/region" ||
				e["TESSERA_LIMITS"] != "/run/tessera/limits" || e["TESSERA_CORE_LIMITS"] != "/run/tessera/core-limits" {
				t.Errorf("%s env = %v", ctr, e)
			}
			if e["mount:/etc/ld.so.preload"] == "" || e["mount:/run/tessera/region"] == "" || e[fmt.Sprintf("dev:/dev/nvidia%d", gpu)] == "" || e["dev:/dev/nvidiactl"] == "" {
				t.Errorf("%s mounts/devices = %v", ctr, e)
			}
		}
	})

	t.Run("kubelet restart", func(t *testing.T) {
		_ = c.mgr.Stop(klog.Background())
		// kubelet wipes the plugin sockets when it starts again.
		entries, _ := os.ReadDir(c.socketDir())
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".sock") {
				os.Remove(filepath.Join(c.socketDir(), e.Name()))
			}
		}
		start := time.Now()
		c.startKubelet()
		c.awaitCapacity(fullNode)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("re-registration took %s", d)
		}
		// The checkpoint kept the two-container pod's devices.
		if got := c.devicesOf(two, "learner", "tessera.io/gpu-mem"); len(got) != 1 || got[0] != c.uuid(4) {
			t.Fatalf("after restart learner holds %v", got)
		}
		next := makePod("after", t0.Add(time.Minute), map[string][2]int64{"solo": {2, 10}})
		next.Annotations = map[string]string{annotations.AssignmentKey: c.assignment(map[string]int{"solo": 1}, map[string][2]int64{"solo": {2, 10}})}
		c.addPod(next)
		c.admit(next)
		if got := c.devicesOf(next, "solo", "tessera.io/gpu-mem"); len(got) != 1 || got[0] != c.uuid(1) {
			t.Fatalf("pod admitted after restart on %v, assigned GPU 1", got)
		}
	})

	t.Run("no assignment: memory and compute stay together", func(t *testing.T) {
		// kubelet allocates a container's resources in map order, so run a few pods.
		for i := 0; i < 6; i++ {
			p := makePod(fmt.Sprintf("local-%d", i), t0.Add(time.Hour+time.Duration(i)*time.Second), map[string][2]int64{"c": {6, 30}})
			c.addPod(p)
			c.admit(p)
			mem, core := c.devicesOf(p, "c", "tessera.io/gpu-mem"), c.devicesOf(p, "c", "tessera.io/gpu-core")
			if len(mem) != 1 || fmt.Sprint(mem) != fmt.Sprint(core) {
				t.Fatalf("pod %s: memory on %v, compute on %v", p.Name, mem, core)
			}
		}
	})

	t.Run("init container first, its devices reused by the app container", func(t *testing.T) {
		shape := map[string][2]int64{"prep": {4, 10}, "main": {4, 10}}
		p := makePod("withinit", t0.Add(2*time.Hour), shape)
		// "prep" becomes an init container; the scheduler assigns both
		// containers GPU 2, knowing kubelet hands init devices on.
		p.Spec.InitContainers = []corev1.Container{p.Spec.Containers[1]}
		p.Spec.Containers = p.Spec.Containers[:1]
		p.Annotations = map[string]string{annotations.AssignmentKey: c.assignment(map[string]int{"prep": 2, "main": 2}, shape)}
		c.addPod(p)
		envs := c.admit(p)
		for _, ctr := range []string{"prep", "main"} {
			for _, res := range []string{"tessera.io/gpu-mem", "tessera.io/gpu-core"} {
				if got := c.devicesOf(p, ctr, res); len(got) != 1 || got[0] != c.uuid(2) {
					t.Fatalf("%s %s on %v, assigned GPU 2", ctr, res, got)
				}
			}
			if envs[ctr]["NVIDIA_VISIBLE_DEVICES"] != c.uuid(2) {
				t.Fatalf("%s env = %v", ctr, envs[ctr])
			}
		}
	})

	t.Run("after a read-back, a running init container is not taken for the next pod", func(t *testing.T) {
		// "withinit" is still Pending (its init container runs);
		// PodResources does not list "prep".
		if err := c.d.Reconciler.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		shape := map[string][2]int64{"prep": {4, 10}}
		p := makePod("next", t0.Add(3*time.Hour), shape)
		p.Annotations = map[string]string{annotations.AssignmentKey: c.assignment(map[string]int{"prep": 5}, shape)}
		c.addPod(p)
		c.admit(p)
		for _, res := range []string{"tessera.io/gpu-mem", "tessera.io/gpu-core"} {
			if got := c.devicesOf(p, "prep", res); len(got) != 1 || got[0] != c.uuid(5) {
				t.Fatalf("%s on %v, assigned GPU 5", res, got)
			}
		}
	})

	t.Run("unhealthy GPU leaves allocatable", func(t *testing.T) {
		c.gpus.InjectXid(7, 79)
		c.awaitAllocatable(fullNode, map[string]int64{"tessera.io/gpu": 70, "tessera.io/gpu-mem": 7 * 141, "tessera.io/gpu-core": 700})
	})

	t.Run("allocated annotation from PodResources", func(t *testing.T) {
		if err := c.d.Reconciler.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		p, _ := c.client.GetPod("default", "two")
		al, err := annotations.ParseAllocated(p.Annotations[annotations.AllocatedKey])
		if err != nil {
			t.Fatal(err)
		}
		if len(al.Containers) != 2 || al.Containers[1].Name != "learner" || al.Containers[1].GPUs[0].MemoryMiB != 24*1024 || al.Containers[1].GPUs[0].CorePercent != 40 {
			t.Fatalf("allocated = %+v", al)
		}
	})
}

// TestKubeletMIGReconfiguration: kubelet's device manager runs a pod on one
// of GPU 6's two 3g MIG devices; the operator replaces them with three 1g
// devices. Rediscovery, without a plugin restart, makes kubelet count both
// old devices as capacity but not allocatable, registers the new profile,
// keeps the running pod's device until the pod is gone, then drops it.
func TestKubeletMIGReconfiguration(t *testing.T) {
	c := newCluster(t)
	if _, err := c.gpus.EnableMIG(6, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	c.startKubelet()
	c.startPlugin()
	oldRes := resource.MIGResource(c.d.Manager.GPU(c.uuid(6)).MIG[0].Profile)
	c.awaitCapacity(map[string]int64{oldRes: 2, "tessera.io/gpu-mem": 7 * 141})

	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mig", Namespace: "default", UID: "uid-mig", CreationTimestamp: metav1.NewTime(time.Now())},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(oldRes): *apiresource.NewQuantity(1, apiresource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	c.addPod(p)
	env := c.admit(p)["c"]
	caps := 0
	for k, host := range env {
		if strings.HasPrefix(k, "dev:/dev/nvidia-caps/nvidia-cap") && host == strings.TrimPrefix(k, "dev:") {
			caps++
		}
	}
	if caps != 2 || env["dev:/dev/nvidia6"] == "" || env["dev:/dev/nvidiactl"] == "" {
		t.Fatalf("MIG container devices as kubelet passes them to the runtime: %v", env)
	}
	if err := c.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}

	if _, err := c.gpus.EnableMIG(6, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	if changed, err := c.d.Rediscover(); err != nil || !changed {
		t.Fatalf("Rediscover = %v, %v", changed, err)
	}
	newRes := resource.MIGResource(c.d.Manager.GPU(c.uuid(6)).MIG[0].Profile)
	c.awaitAllocatable(map[string]int64{oldRes: 2, newRes: 3}, map[string]int64{oldRes: 0, newRes: 3})

	if _, err := c.d.Rediscover(); err != nil {
		t.Fatal(err)
	}
	c.awaitAllocatable(map[string]int64{oldRes: 1, newRes: 3}, map[string]int64{oldRes: 0, newRes: 3})
	if len(c.mgr.GetDevices(string(p.UID), "c")[oldRes]) != 1 {
		t.Fatal("kubelet lost the running pod's device")
	}

	c.mu.Lock()
	c.pods = nil // the pod ended, and is deleted
	c.mu.Unlock()
	if err := c.client.DeletePod(p.Namespace, p.Name); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); c.d.Pods.Get(p.Namespace, p.Name) != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the plugin never saw the pod deleted")
		}
	}
	if err := c.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.d.Rediscover(); err != nil {
		t.Fatal(err)
	}
	c.awaitAllocatable(map[string]int64{oldRes: 0, newRes: 3}, map[string]int64{oldRes: 0, newRes: 3})
}
