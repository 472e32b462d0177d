package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// TestInitContainerNotReclaimedAfterReadBack: kubelet's PodResources never
// lists regular (non-restartable) init containers, so a read-back cannot
// confirm their devices. A pod whose init container is still running stays
// Pending; the next pod with an equal request must still get its own
// assignment, not the running init container's.
func TestInitContainerNotReclaimedAfterReadBack(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "read-back"
		if restart {
			name = "plugin-restart"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, gputest.DGXH200)
			first := pod("first", t0, "", ctr{name: "fetch", mem: 4, init: true}, ctr{name: "main", mem: 4})
			first.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{
				"fetch": {2: {4096, 0}}, "main": {2: {4096, 0}}})}
			second := pod("second", t0.Add(time.Second), "", ctr{name: "c", mem: 4})
			second.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{"c": {5: {4096, 0}}})}
			e.createPod(first)
			e.createPod(second)
			e.start()

			// kubelet admits "first": the init container, then the app
			// container, which reuses the init container's IDs (Allocate
			// without GetPreferredAllocation).
			ids, _ := e.admit("tessera.io/gpu-mem", 4)
			if g := resource.GPUsOf(ids); len(g) != 1 || g[0] != e.uuid(2) {
				t.Fatalf("init container on %v, assigned GPU 2", g)
			}
			if _, err := e.client_("tessera.io/gpu-mem").Allocate(context.Background(), &pluginapi.AllocateRequest{
				ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
				t.Fatal(err)
			}
			e.podRes.set(&podresourcesapi.PodResources{Name: "first", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{
				Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "tessera.io/gpu-mem", DeviceIds: ids}}}}})
			if restart {
				e.stop()
				e.start()
			} else if err := e.d.Reconciler.Once(context.Background()); err != nil {
				t.Fatal(err)
			}

			// "first" is still Pending (its init container runs); kubelet
			// now admits "second".
			ids2, _ := e.admit("tessera.io/gpu-mem", 4)
			if g := resource.GPUsOf(ids2); len(g) != 1 || g[0] != e.uuid(5) {
				t.Fatalf("second pod on %v, assigned GPU 5: taken for the first pod's init container", g)
			}
		})
	}
}

// TestInitContainerStateKeptWhilePodRuns: PodResources does not list
// regular init containers, so their allocations are not in kubelet's
// read-back. While their pod is listed, the ledger keeps them and their
// limits and region files are not collected: kubelet runs init containers
// again, with the same mounts, whenever the pod's sandbox is recreated.
func TestInitContainerStateKeptWhilePodRuns(t *testing.T) {
	e := newEnv(t, gputest.DGXH200, pod("p", t0, "", ctr{name: "init", mem: 4, init: true}, ctr{name: "main", core: 20}))
	e.start()
	initIDs, resp := e.admit("tessera.io/gpu-mem", 4)
	coreIDs, _ := e.admit("tessera.io/gpu-core", 20)
	listed := &podresourcesapi.PodResources{Name: "p", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{
		Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "tessera.io/gpu-core", DeviceIds: coreIDs}}}}}
	e.podRes.set(listed)
	e.d.Reconciler.GCGrace = time.Nanosecond
	regionPath := mountFor(resp, allocation.RegionPath).HostPath
	initRef := ledger.ContainerRef{PodUID: "uid-p", Namespace: "default", Pod: "p", Container: "init"}
	for i := 0; i < 3; i++ {
		if err := e.d.Reconciler.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := os.Stat(regionPath); err != nil {
		t.Fatalf("init container's region collected while its pod runs: %v", err)
	}
	if got := e.d.Ledger.Get(initRef)["tessera.io/gpu-mem"]; len(got) != len(initIDs) {
		t.Fatalf("init container's allocation dropped from the ledger: %v", e.d.Ledger.Snapshot())
	}
	// Once the pod is gone, both go.
	e.podRes.set()
	if err := e.client.DeletePod("default", "p"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.d.Pods.Get("default", "p") == nil })
	for i := 0; i < 3; i++ {
		if err := e.d.Reconciler.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := os.Stat(regionPath); !os.IsNotExist(err) {
		t.Fatalf("region of a finished pod kept: %v", err)
	}
	if len(e.d.Ledger.Snapshot()) != 0 {
		t.Fatalf("ledger after the pod ended: %v", e.d.Ledger.Snapshot())
	}
}

// TestReusedStateDirNotCollectedUnderAllocate: binpack hands the same IDs
// to the next container, so its state directory (named by the IDs) may be
// one no container referenced for the whole grace period. An Allocate
// that lands after a read-back's PodResources snapshot but before its
// garbage collection must not lose its files.
//
// The Allocate's fresh mtime is what keeps the directory, for one grace
// period: the grace must outlast any stall of the read-back between its
// snapshot and its collection. With 300 ms, a loaded CI machine lost the
// files now and then; 3 s is still a test of the same rule (the product's
// grace is 10 minutes).
func TestReusedStateDirNotCollectedUnderAllocate(t *testing.T) {
	const grace = 3 * time.Second
	e := newEnv(t, gputest.DGXH200)
	e.start()
	e.d.Reconciler.GCGrace = grace
	ids, resp := e.admit("tessera.io/gpu-mem", 4)
	regionPath := mountFor(resp, allocation.RegionPath).HostPath
	dir := filepath.Dir(regionPath)
	// The container ended long ago: read-backs have not seen it for longer
	// than the grace, and the directory is old.
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(grace + 100*time.Millisecond) // unreferenced for longer than the grace
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	// The next container gets the same IDs while a read-back is between
	// its snapshot and its collection.
	e.podRes.onList(func() {
		if _, err := e.client_("tessera.io/gpu-mem").Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
			t.Error(err)
		}
	})
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(regionPath); err != nil {
		t.Fatalf("files of a container just allocated were collected: %v", err)
	}
	// Without that Allocate the directory was due: unreferenced for the
	// grace and old, it goes at the next read-back.
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("an old directory no read-back listed for the grace period was kept: %v", err)
	}
}

// TestSameSecondPodsKeepTheirAssignments: two pods bound within one
// second (creation timestamps tie) with equal requests and different
// assignments; kubelet admits them in the order its watch delivers them,
// which is not their names' order.
func TestSameSecondPodsKeepTheirAssignments(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	e.start()
	for _, pc := range []struct {
		name string
		gpu  int
	}{{"web-zq4", 5}, {"web-b7x", 2}} {
		p := pod(pc.name, t0, "", ctr{name: "c", mem: 8})
		p.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{"c": {pc.gpu: {8192, 0}}})}
		e.createPod(p)
		waitFor(t, func() bool { return e.d.Pods.Get("default", pc.name) != nil })
	}
	for _, want := range []int{5, 2} {
		ids, _ := e.admit("tessera.io/gpu-mem", 8)
		if g := resource.GPUsOf(ids); len(g) != 1 || g[0] != e.uuid(want) {
			t.Fatalf("landed on %v, want GPU %d (pods admitted in arrival order)", g, want)
		}
	}
}
