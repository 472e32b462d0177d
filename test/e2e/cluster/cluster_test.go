package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/test/e2e/binaries"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/process"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// TestSmoke: a control plane with 20 kwok GPU nodes of mixed models and
// kube-scheduler; a pod asking for a tessera GPU is bound by kube-scheduler
// and Running through kwok; teardown leaves no process and no file.
func TestSmoke(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	specs := kwoknodes.MixedNodes("gpu", 20)
	c, err := StartContext(ctx, t, Options{Nodes: specs, KubeScheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{}
	names := map[int]string{}
	for _, p := range c.Processes() {
		pids = append(pids, p.PID)
		names[p.PID] = p.Name
	}
	if len(pids) != 5 { // etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler
		t.Fatalf("%d processes running, want 5: %v", len(pids), c.Processes())
	}
	bad, err := nonLoopbackListeners(names)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("listening outside loopback: %v", bad)
	}

	nodes, err := c.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 20 {
		t.Fatalf("%d nodes, want 20", len(nodes.Items))
	}
	models := map[string]bool{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		inv, err := annotations.ParseNodeGPUs(n.Annotations[annotations.NodeGPUsKey])
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		models[inv.GPUs[0].Model] = true
		gpus := n.Status.Allocatable[workload.GPU]
		if want := int64(len(inv.GPUs) * 10); gpus.Value() != want {
			t.Errorf("node %s: allocatable %s %s, want %d (10 slots × %d GPUs)", n.Name, workload.GPU, gpus.String(), want, len(inv.GPUs))
		}
		if !kwoknodes.Schedulable(n) {
			t.Errorf("node %s not schedulable: %+v %+v", n.Name, n.Spec.Taints, n.Status.Conditions)
		}
	}
	if len(models) < 4 {
		t.Errorf("%d GPU models across the nodes, want a mix", len(models))
	}

	binds, err := workload.WatchBinds(ctx, c.Client(), metav1.NamespaceDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer binds.Stop()
	pod := workload.WholeGPUPod(metav1.NamespaceDefault, "smoke", workload.DefaultScheduler, 2)
	if _, err := c.Client().CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	if err := binds.WaitBound(wait, 1, true); err != nil {
		t.Fatalf("pod not bound and Running: %v", err)
	}
	got, err := c.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName == "" || got.Status.Phase != corev1.PodRunning || !strings.HasPrefix(got.Spec.NodeName, "gpu-") {
		t.Fatalf("pod on %q in phase %s", got.Spec.NodeName, got.Status.Phase)
	}
	t.Logf("smoke: pod bound to %s and Running %v after start", got.Spec.NodeName, time.Since(began).Round(time.Millisecond))

	dir := c.Dir
	stopBegan := time.Now()
	c.Stop()
	t.Logf("teardown took %v", time.Since(stopBegan).Round(time.Millisecond))
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Stop (kill 0: %v)", pid, err)
		}
	}
	if live := process.Live(); len(live) != 0 {
		t.Errorf("processes still live after Stop: %v", live)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind after Stop (stat: %v)", dir, err)
	}
	t.Logf("smoke test took %v (cluster start %v)", time.Since(began).Round(time.Millisecond), c.StartupTime.Round(time.Millisecond))
}

// TestMissingBinariesAreNamed: without the cache, Start fails before
// starting anything, naming every missing binary and how to build it.
func TestMissingBinariesAreNamed(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("TESSERA_CACHE", cache)
	before := tempDirs(t)
	_, err := controlplane.Start(context.Background(), controlplane.Options{})
	if err == nil {
		t.Fatal("control plane started without binaries")
	}
	for _, b := range []binaries.Binary{binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager} {
		want := fmt.Sprintf("%s %s is missing: no %s", b.Name, b.Version, filepath.Join(cache, "bin", b.Name+"-"+b.Version))
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if !strings.Contains(err.Error(), "hack/e2e-binaries.sh") {
		t.Errorf("error does not say how to build them:\n%v", err)
	}
	if live := process.Live(); len(live) != 0 {
		t.Errorf("processes started: %v", live)
	}
	if after := tempDirs(t); after != before {
		t.Errorf("%d temporary control plane directories before, %d after", before, after)
	}
}

// TestMissingKwokIsNamed: a cache with the control plane but no kwok fails
// in kwoknodes.Start, naming kwok, and the teardown still leaves nothing.
func TestMissingKwokIsNamed(t *testing.T) {
	real, err := binaries.Dir()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if err := os.Mkdir(filepath.Join(cache, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []binaries.Binary{binaries.Etcd, binaries.KubeAPIServer, binaries.KubeControllerManager} {
		name := b.Name + "-" + b.Version
		if err := os.Symlink(filepath.Join(real, name), filepath.Join(cache, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TESSERA_CACHE", cache)
	c, err := StartContext(context.Background(), t, Options{})
	if err == nil || !strings.Contains(err.Error(), "kwok v0.8.0 is missing") {
		t.Fatalf("start without kwok: %v", err)
	}
	if c != nil {
		t.Fatal("cluster returned with an error")
	}
	// The control plane had started: the failed start must have stopped
	// it before returning, not at the end of the test.
	if live := process.Live(); len(live) != 0 {
		t.Errorf("processes left after the failed start: %v", live)
	}
}

// tempDirs counts the temporary control plane directories this test binary
// made (their owner.pid is its pid). The other e2e packages, run in parallel,
// make and remove theirs meanwhile: a count of all of them changed under the
// test.
func tempDirs(t *testing.T) int {
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "tessera-e2e-*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range m {
		if owner, err := os.ReadFile(filepath.Join(d, "owner.pid")); err == nil && string(owner) == strconv.Itoa(os.Getpid()) {
			n++
		}
	}
	return n
}

// TestBindingCarriesTheAssignment binds a pod as tessera-scheduler does,
// through the Binding subresource with the assignment annotation on the
// Binding, and checks what the scheduler relies on: the API server sets
// nodeName and the annotation in one update, and kwok runs the pod.
func TestBindingCarriesTheAssignment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := kwoknodes.NodeSpec{Name: "gpu-bind", Model: kwoknodes.H100SXM, GPUs: 2}
	c := Start(t, Options{Nodes: []kwoknodes.NodeSpec{spec}})
	pod := workload.FractionalPod(metav1.NamespaceDefault, "bound-by-hand", workload.TesseraScheduler, 8, 25)
	if _, err := c.Client().CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := &annotations.Assignment{Version: annotations.Version, Containers: []annotations.ContainerAssignment{{
		Name: "main", GPUs: []annotations.GPUShare{{UUID: spec.Devices()[1].UUID, MemoryMiB: 8 << 10, CorePercent: 25}},
	}}}
	value, err := annotations.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Annotations: map[string]string{annotations.AssignmentKey: value}},
		Target:     corev1.ObjectReference{Kind: "Node", Name: spec.Name},
	}
	if err := c.Client().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	for {
		if got, err = c.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == corev1.PodRunning {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got.Spec.NodeName != spec.Name {
		t.Fatalf("pod on %q, want %s", got.Spec.NodeName, spec.Name)
	}
	back, err := annotations.ParseAssignment(got.Annotations[annotations.AssignmentKey])
	if err != nil {
		t.Fatalf("assignment on the bound pod: %v", err)
	}
	if back.Containers[0].GPUs[0] != a.Containers[0].GPUs[0] {
		t.Fatalf("assignment %+v, want %+v", back.Containers[0].GPUs[0], a.Containers[0].GPUs[0])
	}
}
