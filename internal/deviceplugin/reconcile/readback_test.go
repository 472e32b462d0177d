package reconcile

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// readBack is a reconciler over a simulated DGX H200 whose collection
// removes a directory as soon as one read-back has not seen it.
type readBack struct {
	t      *testing.T
	r      *Reconciler
	gpus   []gpu.GPU
	pods   podList
	client *kubefake.Client
	lst    *listing
}

func newReadBack(t *testing.T) *readBack {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gpus, err := gpu.Discover(gputest.MustNew(gputest.DGXH200), log)
	if err != nil {
		t.Fatal(err)
	}
	m, err := resource.NewManager(gpus, resource.Options{SplitCount: 10, MemoryUnit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	b := &allocation.Builder{Manager: m, HookLibrary: "/lib/hook.so", StateDir: t.TempDir()}
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	rb := &readBack{t: t, gpus: gpus, pods: podList{}, client: kubefake.NewNode("n"), lst: &listing{resp: &podresourcesapi.ListPodResourcesResponse{}}}
	rb.r = &Reconciler{PodResources: rb.lst, Pods: rb.pods, Client: rb.client, Manager: m, Ledger: ledger.New(), Builder: b,
		Metrics: NewMetrics(nil), Log: log, GCGrace: time.Nanosecond}
	return rb
}

func (rb *readBack) addPod(name string, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: phase}}
	if err := rb.client.CreatePod(p); err != nil {
		rb.t.Fatal(err)
	}
	rb.pods["ns/"+name] = p
	return p
}

// allocate is kubelet's Allocate of one container's resource.
func (rb *readBack) allocate(res string, ids []string) string {
	rb.t.Helper()
	r, err := rb.r.Builder.Container(res, ids)
	if err != nil {
		rb.t.Fatal(err)
	}
	for _, m := range r.Mounts {
		if m.ContainerPath == allocation.LimitsPath || m.ContainerPath == allocation.CoreLimitsPath {
			return m.HostPath
		}
	}
	rb.t.Fatalf("no limits mount in %+v", r.Mounts)
	return ""
}

func (rb *readBack) once() {
	rb.t.Helper()
	time.Sleep(2 * time.Millisecond) // past the grace
	if err := rb.r.Once(context.Background()); err != nil {
		rb.t.Fatal(err)
	}
}

func (rb *readBack) stateDirs() []string {
	rb.t.Helper()
	entries, err := os.ReadDir(filepath.Join(rb.r.Builder.StateDir, "containers"))
	if err != nil {
		rb.t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func ids(uuid, kind string, from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf("%s::%s::%d", uuid, kind, i))
	}
	return out
}

// asKubelet lists a container's devices the way kubelet does: one entry
// per ID and NUMA node, in map (here: random) order.
func asKubelet(rng *rand.Rand, byRes map[string][]string) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for res, list := range byRes {
		for _, id := range list {
			for n := 0; n < 1+rng.IntN(2); n++ {
				out = append(out, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{id},
					Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: int64(n)}}}})
			}
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestReadBackOfSingleIDEntries: kubelet lists gpu-mem 8 and gpu-core 30
// of one container as 38+ single-ID entries. The read-back must record the
// whole sets, restore no directory of its own, publish the whole amounts,
// and keep the container's two directories, read-back after read-back.
func TestReadBackOfSingleIDEntries(t *testing.T) {
	rb := newReadBack(t)
	g := rb.gpus[2].UUID
	rb.addPod("p", corev1.PodRunning)
	alloc := map[string][]string{resource.Memory: ids(g, "mem", 0, 8), resource.Core: ids(g, "core", 0, 30)}
	memLimits, coreLimits := rb.allocate(resource.Memory, alloc[resource.Memory]), rb.allocate(resource.Core, alloc[resource.Core])
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 4; i++ {
		rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "p", Namespace: "ns",
			Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: asKubelet(rng, alloc)}}}}}
		rb.once()
		if d := rb.stateDirs(); len(d) != 2 {
			t.Fatalf("read-back %d: %d state directories, want 2 (one per resource): %v", i, len(d), d)
		}
		for _, f := range []string{memLimits, coreLimits} {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("read-back %d: a listed container's file was collected: %v", i, err)
			}
		}
		got := rb.r.Ledger.Get(ledger.ContainerRef{PodUID: "uid-p", Namespace: "ns", Pod: "p", Container: "c"})
		for res, want := range alloc {
			sort.Strings(want)
			if fmt.Sprint(got[res]) != fmt.Sprint(want) {
				t.Fatalf("read-back %d: ledger holds %d %s IDs, want %d", i, len(got[res]), res, len(want))
			}
		}
	}
	p, _ := rb.client.GetPod("ns", "p")
	al, err := annotations.ParseAllocated(p.Annotations[annotations.AllocatedKey])
	if err != nil {
		t.Fatal(err)
	}
	if len(al.Containers) != 1 || len(al.Containers[0].GPUs) != 1 || al.Containers[0].GPUs[0].MemoryMiB != 8*1024 || al.Containers[0].GPUs[0].CorePercent != 30 {
		t.Fatalf("published allocation = %+v", al)
	}
}

// TestEmptyReadBackDuringKubeletRestart: a restarting kubelet lists no
// pods, then only some. While the API server still has the others
// running, the ledger keeps them and their files stay; once a pod has
// finished, its allocation and files go.
func TestEmptyReadBackDuringKubeletRestart(t *testing.T) {
	rb := newReadBack(t)
	g0, g1 := rb.gpus[0].UUID, rb.gpus[1].UUID
	rb.addPod("a", corev1.PodRunning)
	rb.addPod("b", corev1.PodRunning)
	aIDs, bIDs := ids(g0, "mem", 0, 4), ids(g1, "core", 0, 20)
	aFile, bFile := rb.allocate(resource.Memory, aIDs), rb.allocate(resource.Core, bIDs)
	listA := &podresourcesapi.PodResources{Name: "a", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c",
		Devices: []*podresourcesapi.ContainerDevices{{ResourceName: resource.Memory, DeviceIds: aIDs}}}}}
	listB := &podresourcesapi.PodResources{Name: "b", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "c",
		Devices: []*podresourcesapi.ContainerDevices{{ResourceName: resource.Core, DeviceIds: bIDs}}}}}
	rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{listA, listB}}
	rb.once()
	before := rb.r.Ledger.Snapshot()

	for _, listing := range [][]*podresourcesapi.PodResources{nil, {listB}, nil} {
		rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: listing}
		for i := 0; i < 3; i++ {
			rb.once()
		}
		if got := rb.r.Ledger.Snapshot(); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("listing %d pods: ledger %v, was %v", len(listing), got, before)
		}
		for _, f := range []string{aFile, bFile} {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("listing %d pods: a running container's file was collected: %v", len(listing), err)
			}
		}
	}

	// Pod a finished; kubelet, back, lists only b.
	rb.pods["ns/a"].Status.Phase = corev1.PodSucceeded
	rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{listB}}
	rb.once()
	rb.once()
	if _, err := os.Stat(aFile); !os.IsNotExist(err) {
		t.Fatalf("a finished pod's file kept: %v", err)
	}
	if _, err := os.Stat(bFile); err != nil {
		t.Fatalf("running pod's file collected: %v", err)
	}
	if got := rb.r.Ledger.Snapshot(); len(got) != 1 {
		t.Fatalf("ledger after pod a finished: %v", got)
	}
}

// TestListedContainerIsTheTruth: a container kubelet lists is not carried
// over from the ledger even while its pod runs; the ledger's guess (here
// an Allocate attributed to the wrong container) is replaced.
func TestListedContainerIsTheTruth(t *testing.T) {
	rb := newReadBack(t)
	g := rb.gpus[4].UUID
	rb.addPod("p", corev1.PodRunning)
	memIDs := ids(g, "mem", 0, 2)
	wrong := ledger.ContainerRef{PodUID: "uid-p", Namespace: "ns", Pod: "p", Container: "a"}
	rb.r.Ledger.Record(wrong, resource.Memory, memIDs)
	rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "p", Namespace: "ns",
		Containers: []*podresourcesapi.ContainerResources{{Name: "a"}, {Name: "b", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: resource.Memory, DeviceIds: memIDs[:1]}, {ResourceName: resource.Memory, DeviceIds: memIDs[1:]}}}}}}}
	rb.once()
	if got := rb.r.Ledger.Get(wrong); len(got) != 0 {
		t.Fatalf("listed container a without devices keeps %v", got)
	}
	right := wrong
	right.Container = "b"
	if got := rb.r.Ledger.Get(right)[resource.Memory]; len(got) != 2 {
		t.Fatalf("container b holds %v", got)
	}
}

// TestFinishedListedPodReleasesInitContainer: with the
// KubeletPodResourcesListUseActivePods gate off (it can still be turned off
// in 1.37), and briefly with it on while a terminal pod is still being
// terminated, kubelet lists a finished pod: its containers appear without
// devices, and its regular init containers not at all. A finished pod's
// containers never run again, so the init container's allocation and files
// must go; otherwise they stay for as long as the pod object exists (a Job's
// pod may stay for days) and the ledger counts its IDs as held.
func TestFinishedListedPodReleasesInitContainer(t *testing.T) {
	rb := newReadBack(t)
	g := rb.gpus[1].UUID
	rb.addPod("job", corev1.PodRunning)
	initIDs := ids(g, "mem", 0, 4)
	initFile := rb.allocate(resource.Memory, initIDs)
	initRef := ledger.ContainerRef{PodUID: "uid-job", Namespace: "ns", Pod: "job", Container: "init"}
	rb.r.Ledger.Record(initRef, resource.Memory, initIDs) // Allocate, attributed
	appIDs := ids(g, "mem", 0, 2)                         // kubelet hands on part of the init IDs
	rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "job", Namespace: "ns",
		Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: resource.Memory, DeviceIds: appIDs}}}}}}}
	rb.once()
	rb.once()
	if _, err := os.Stat(initFile); err != nil {
		t.Fatalf("running pod's init container file collected: %v", err)
	}

	rb.pods["ns/job"].Status.Phase = corev1.PodSucceeded
	rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "job", Namespace: "ns",
		Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}}}}
	for i := 0; i < 3; i++ {
		rb.once()
	}
	if got := rb.r.Ledger.Get(initRef); len(got) != 0 {
		t.Fatalf("finished pod's init container still holds %v", got)
	}
	if _, err := os.Stat(initFile); !os.IsNotExist(err) {
		t.Fatalf("finished pod's init container file kept: %v", err)
	}
}

// TestWrongGuessNotCarriedOver: an Allocate attributed to the wrong pod (a
// guess: here pod q, which kubelet has not admitted yet) is corrected by the
// read-back that lists the IDs under pod p. The carry-over of unlisted
// containers must not keep the guess: q would hold p's IDs in the ledger
// until kubelet lists q, and meanwhile q's own Allocate is not attributed
// to it (the chooser skips a container the ledger says is served).
func TestWrongGuessNotCarriedOver(t *testing.T) {
	rb := newReadBack(t)
	g := rb.gpus[3].UUID
	rb.addPod("p", corev1.PodRunning)
	rb.addPod("q", corev1.PodPending)
	memIDs := ids(g, "mem", 0, 4)
	rb.allocate(resource.Memory, memIDs)
	guess := ledger.ContainerRef{PodUID: "uid-q", Namespace: "ns", Pod: "q", Container: "c"}
	rb.r.Ledger.Record(guess, resource.Memory, memIDs)
	rb.lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "p", Namespace: "ns",
		Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: resource.Memory, DeviceIds: memIDs}}}}}}}
	rb.once()
	if rb.r.Ledger.Has(guess, resource.Memory) {
		t.Fatalf("pod q keeps the IDs kubelet lists for pod p: %v", rb.r.Ledger.Get(guess))
	}
	if got := rb.r.Ledger.Get(ledger.ContainerRef{PodUID: "uid-p", Namespace: "ns", Pod: "p", Container: "c"}); len(got[resource.Memory]) != 4 {
		t.Fatalf("pod p holds %v", got)
	}
}

// TestMismatchCountedOnceAcrossKubeletRestart: a mismatch is counted (and
// reported as an event) once per container and resource. A restarting
// kubelet that lists no pods for a while does not end the pod; it must not
// make the read-back count and report the same mismatch again.
func TestMismatchCountedOnceAcrossKubeletRestart(t *testing.T) {
	rb := newReadBack(t)
	p := rb.addPod("p", corev1.PodRunning)
	a, _ := annotations.Marshal(&annotations.Assignment{Version: annotations.Version, Containers: []annotations.ContainerAssignment{
		{Name: "c", GPUs: []annotations.GPUShare{{UUID: rb.gpus[3].UUID, MemoryMiB: 1024}}}}})
	p.Annotations = map[string]string{annotations.AssignmentKey: a}
	memIDs := ids(rb.gpus[0].UUID, "mem", 0, 1) // kubelet put it on GPU 0
	rb.allocate(resource.Memory, memIDs)
	listed := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "p", Namespace: "ns",
		Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: resource.Memory, DeviceIds: memIDs}}}}}}}
	events := 0
	rb.r.Warn = func(*corev1.Pod, string, string) { events++ }
	for _, resp := range []*podresourcesapi.ListPodResourcesResponse{listed, {}, {}, listed, listed} {
		rb.lst.resp = resp
		rb.once()
	}
	if events != 1 {
		t.Fatalf("one mismatch reported %d times across a kubelet restart", events)
	}
}
