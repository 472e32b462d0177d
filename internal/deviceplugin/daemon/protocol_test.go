package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/internal/region"
)

var t0 = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

// assign builds an assignment annotation: container → GPU index → (MiB, %).
func (e *env) assign(cs map[string]map[int][2]int) string {
	a := annotations.Assignment{Version: annotations.Version}
	for name, gpus := range cs {
		ca := annotations.ContainerAssignment{Name: name}
		for i, mc := range gpus {
			ca.GPUs = append(ca.GPUs, annotations.GPUShare{UUID: e.node.Device(i).UUID, MemoryMiB: uint64(mc[0]), CorePercent: uint32(mc[1])})
		}
		a.Containers = append(a.Containers, ca)
	}
	s, err := annotations.Marshal(&a)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) uuid(i int) string { return e.node.Device(i).UUID }

func readLimits(t *testing.T, path string) []region.DeviceLimit {
	t.Helper()
	l, err := region.OpenLimits(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Devices()
}

func mountFor(r *pluginapi.ContainerAllocateResponse, containerPath string) *pluginapi.Mount {
	for _, m := range r.Mounts {
		if m.ContainerPath == containerPath {
			return m
		}
	}
	return nil
}

func TestRegistrationAndListAndWatch(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	e.start()
	regs := e.regs
	for _, res := range []string{"tessera.io/gpu", "tessera.io/gpu-mem", "tessera.io/gpu-core"} {
		r := regs[res]
		if r == nil || r.Version != pluginapi.Version || !r.Options.GetPreferredAllocationAvailable {
			t.Fatalf("registration of %s = %+v", res, r)
		}
	}
	for res, want := range map[string]int{"tessera.io/gpu": 80, "tessera.io/gpu-mem": 8 * 141, "tessera.io/gpu-core": 800} {
		devs := e.list(res)
		if len(devs) != want {
			t.Errorf("%s advertises %d devices, want %d", res, len(devs), want)
		}
		for _, d := range devs {
			if d.Health != pluginapi.Healthy || d.Topology == nil || len(d.Topology.Nodes) != 1 {
				t.Fatalf("device %+v", d)
			}
		}
	}
}

func TestTwoContainerPodWithAssignment(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	p := pod("train", t0, "", ctr{name: "a", mem: 20, core: 30}, ctr{name: "b", mem: 10, core: 50})
	p.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{
		"a": {3: {20 * 1024, 30}}, "b": {6: {10 * 1024, 50}}})}
	e.createPod(p)
	e.start()
	for _, c := range []struct {
		gpu       int
		mem, core int
	}{{3, 20, 30}, {6, 10, 50}} {
		memIDs, memResp := e.admit("tessera.io/gpu-mem", c.mem)
		coreIDs, coreResp := e.admit("tessera.io/gpu-core", c.core)
		want := []string{e.uuid(c.gpu)}
		if g := resource.GPUsOf(memIDs); fmt.Sprint(g) != fmt.Sprint(want) {
			t.Fatalf("gpu-mem landed on %v, assigned %v", g, want)
		}
		if g := resource.GPUsOf(coreIDs); fmt.Sprint(g) != fmt.Sprint(want) {
			t.Fatalf("gpu-core landed on %v, assigned %v", g, want)
		}
		checkMerge(t, memResp, coreResp)
		lim := readLimits(t, mountFor(memResp, allocation.LimitsPath).HostPath)
		if len(lim) != 1 || lim[0].UUID != e.uuid(c.gpu) || lim[0].MemLimitBytes != uint64(c.mem)<<30 {
			t.Fatalf("memory limits = %+v", lim)
		}
		core := readLimits(t, mountFor(coreResp, allocation.CoreLimitsPath).HostPath)
		if len(core) != 1 || core[0].CoreLimitPct != uint32(c.core) {
			t.Fatalf("core limits = %+v", core)
		}
		if _, err := region.OpenRegion(mountFor(memResp, allocation.RegionPath).HostPath); err != nil {
			t.Fatalf("usage region: %v", err)
		}
	}
}

// checkMerge asserts kubelet can merge two responses of one container:
// shared keys agree, and each resource's own keys are distinct.
func checkMerge(t *testing.T, a, b *pluginapi.ContainerAllocateResponse) {
	t.Helper()
	for k, v := range a.Envs {
		if w, ok := b.Envs[k]; ok && w != v {
			t.Fatalf("env %s conflicts: %q vs %q", k, v, w)
		}
	}
	for _, m := range a.Mounts {
		if o := mountFor(b, m.ContainerPath); o != nil && (o.HostPath != m.HostPath || o.ReadOnly != m.ReadOnly) {
			t.Fatalf("mount %s conflicts: %+v vs %+v", m.ContainerPath, m, o)
		}
	}
	if a.Envs[allocation.EnvNVIDIA] == "" || a.Envs[allocation.EnvNVIDIA] != b.Envs[allocation.EnvCUDAVisible] {
		t.Fatalf("visible devices differ: %v vs %v", a.Envs, b.Envs)
	}
	if mountFor(a, allocation.PreloadPath) == nil || mountFor(b, allocation.PreloadPath) == nil {
		t.Fatal("ld.so.preload not mounted")
	}
}

func TestEqualRequestsDifferentAssignments(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	first := pod("first", t0, "", ctr{name: "c", mem: 8})
	second := pod("second", t0.Add(time.Second), "", ctr{name: "c", mem: 8})
	first.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{"c": {5: {8192, 0}}})}
	second.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{"c": {2: {8192, 0}}})}
	// Created in reverse order: the plugin must follow creation time, not arrival.
	e.createPod(second)
	e.createPod(first)
	e.start()
	ids1, _ := e.admit("tessera.io/gpu-mem", 8)
	ids2, _ := e.admit("tessera.io/gpu-mem", 8)
	if g := resource.GPUsOf(ids1); len(g) != 1 || g[0] != e.uuid(5) {
		t.Fatalf("first pod on %v, assigned GPU 5 (%s)", g, e.uuid(5))
	}
	if g := resource.GPUsOf(ids2); len(g) != 1 || g[0] != e.uuid(2) {
		t.Fatalf("second pod on %v, assigned GPU 2 (%s)", g, e.uuid(2))
	}
}

func TestMemoryAndCoreInEitherOrder(t *testing.T) {
	for _, order := range [][]string{{"tessera.io/gpu-mem", "tessera.io/gpu-core"}, {"tessera.io/gpu-core", "tessera.io/gpu-mem"}} {
		for _, assigned := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s-first/assigned=%v", order[0], assigned), func(t *testing.T) {
				e := newEnv(t, gputest.DGXH100)
				// Pre-load GPU 0 so memory and compute rank GPUs differently.
				filler := pod("filler", t0, "", ctr{name: "f", mem: 40})
				p := pod("job", t0.Add(time.Second), "", ctr{name: "c", mem: 16, core: 25})
				if assigned {
					p.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{"c": {7: {16384, 25}}})}
				}
				e.createPod(filler)
				e.createPod(p)
				// Spread sends memory and compute to different GPUs unless the
				// plugin keeps a container's resources together.
				e.start(func(c *configv1.Config) { c.Placement = configv1.PlacementSpread })
				e.admit("tessera.io/gpu-mem", 40)
				sizes := map[string]int{"tessera.io/gpu-mem": 16, "tessera.io/gpu-core": 25}
				var got [][]string
				var resps []*pluginapi.ContainerAllocateResponse
				for _, res := range order {
					ids, r := e.admit(res, sizes[res])
					got = append(got, resource.GPUsOf(ids))
					resps = append(resps, r)
				}
				if len(got[0]) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
					t.Fatalf("memory and compute on different GPUs: %v vs %v", got[0], got[1])
				}
				if assigned && got[0][0] != e.uuid(7) {
					t.Fatalf("placed on %v, assigned GPU 7", got[0])
				}
				checkMerge(t, resps[0], resps[1])
			})
		}
	}
}

func TestUnhealthyGPU(t *testing.T) {
	e := newEnv(t, gputest.DGXA100)
	e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.client_("tessera.io/gpu-mem").ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	e.node.InjectXid(1, 13) // application error: ignored
	e.node.InjectXid(2, 79) // GPU fell off the bus
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]bool{}
	for _, d := range m.Devices {
		if d.Health == pluginapi.Unhealthy {
			bad[strings.SplitN(d.ID, "::", 2)[0]] = true
		}
	}
	if len(bad) != 1 || !bad[e.uuid(2)] {
		t.Fatalf("unhealthy GPUs = %v, want only GPU 2", bad)
	}
	ids := []string{e.uuid(2) + "::mem::0"}
	_, err = e.client_("tessera.io/gpu-mem").Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("Allocate on an unhealthy GPU: %v", err)
	}
}

func TestHealthRecovers(t *testing.T) {
	e := newEnv(t, gputest.DGXA100)
	e.start(func(c *configv1.Config) { c.Health.RecoverAfter.Duration = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.client_("tessera.io/gpu").ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	e.node.InjectXid(4, 48)
	for _, want := range []string{pluginapi.Unhealthy, pluginapi.Healthy} {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range m.Devices {
			if strings.HasPrefix(d.ID, e.uuid(4)) && d.Health != want {
				t.Fatalf("GPU 4 device %s is %s, want %s", d.ID, d.Health, want)
			}
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKubeletRestartReRegisters(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	dir := e.d.Config.KubeletSocketDir
	// kubelet restart: it stops, wipes the plugin sockets, and listens anew.
	e.kubelet.srv.Stop()
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		os.Remove(filepath.Join(dir, en.Name()))
	}
	start := time.Now()
	e.kubelet = startKubelet(t, dir)
	e.kubelet.awaitRegistrations(t, 3)
	// The plugin checks its sockets every Retry (50 ms here): 10 s leaves
	// a loaded machine's stalls, and is far below a backoff gone wrong.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("re-registration took %s", d)
	}
	if n := len(e.list("tessera.io/gpu")); n != 80 {
		t.Fatalf("after restart ListAndWatch gives %d devices", n)
	}
}

func TestBadAssignmentsFallBack(t *testing.T) {
	cases := map[string]func(e *env) string{
		"malformed": func(*env) string { return `{"version":"v1","containers":[` },
		"unknown GPU": func(*env) string {
			return `{"version":"v1","containers":[{"name":"c","gpus":[{"uuid":"GPU-nope","memoryMiB":4096}]}]}`
		},
		"size differs": func(e *env) string { return e.assign(map[string]map[int][2]int{"c": {1: {9 * 1024, 0}}}) },
		"no container": func(e *env) string { return e.assign(map[string]map[int][2]int{"other": {1: {4096, 0}}}) },
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, gputest.DGXH100)
			p := pod("bad", t0, "", ctr{name: "c", mem: 4})
			p.Annotations = map[string]string{annotations.AssignmentKey: mk(e)}
			e.createPod(p)
			e.start()
			ids, _ := e.admit("tessera.io/gpu-mem", 4)
			if len(resource.GPUsOf(ids)) != 1 {
				t.Fatalf("fallback placed on %v", resource.GPUsOf(ids))
			}
			evs := e.client.Events("default")
			if len(evs) == 0 || evs[0].Reason != "TesseraAssignmentUnusable" {
				t.Fatalf("no warning event: %+v", evs)
			}
		})
	}
}

func TestAllocateRefusesUnknownIDs(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	for _, ids := range [][]string{{"GPU-nope::mem::0"}, {"garbage"}, {e.uuid(0) + "::mem::99999"}, {e.uuid(0) + "::core::1"}, {}} {
		_, err := e.client_("tessera.io/gpu-mem").Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err == nil {
			t.Fatalf("Allocate(%v) succeeded", ids)
		}
	}
}

func TestPluginRestartRebuildsFromPodResources(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	p := pod("svc", t0, "", ctr{name: "c", mem: 4, core: 20})
	p.Status.Phase = "Running"
	e.createPod(p)
	u1 := e.node.Device(1).UUID
	// Scheduler assigned GPU 3, kubelet (e.g. without preferred allocation) gave GPU 1.
	p.Annotations = map[string]string{annotations.AssignmentKey: e.assign(map[string]map[int][2]int{"c": {3: {4096, 20}}})}
	e.updatePod(p)
	memIDs := []string{u1 + "::mem::0", u1 + "::mem::1", u1 + "::mem::2", u1 + "::mem::3"}
	var coreIDs []string
	for i := 0; i < 20; i++ {
		coreIDs = append(coreIDs, fmt.Sprintf("%s::core::%d", u1, i))
	}
	e.podRes.set(&podresourcesapi.PodResources{Name: "svc", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{
		Name: "c", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: "tessera.io/gpu-mem", DeviceIds: memIDs},
			{ResourceName: "tessera.io/gpu-core", DeviceIds: coreIDs}}}}})
	e.start()
	ref := ledger.ContainerRef{PodUID: "uid-svc", Namespace: "default", Pod: "svc", Container: "c"}
	if got := e.d.Ledger.Get(ref); len(got["tessera.io/gpu-mem"]) != 4 || len(got["tessera.io/gpu-core"]) != 20 {
		t.Fatalf("ledger after restart = %v", got)
	}
	limits := filepath.Join(e.d.Builder.ContainerDir("mem", memIDs), "limits")
	if l := readLimits(t, limits); len(l) != 1 || l[0].UUID != u1 || l[0].MemLimitBytes != 4<<30 {
		t.Fatalf("restored limits = %+v", l)
	}
	got, _ := e.client.GetPod("default", "svc")
	al, err := annotations.ParseAllocated(got.Annotations[annotations.AllocatedKey])
	if err != nil {
		t.Fatal(err)
	}
	if len(al.Containers) != 1 || al.Containers[0].GPUs[0].UUID != u1 || al.Containers[0].GPUs[0].MemoryMiB != 4096 || al.Containers[0].GPUs[0].CorePercent != 20 {
		t.Fatalf("allocated annotation = %+v", al)
	}
	mism := e.d.Reconciler.Metrics.Mismatches
	if testutil.ToFloat64(mism.WithLabelValues("tessera.io/gpu-mem")) != 1 || testutil.ToFloat64(mism.WithLabelValues("tessera.io/gpu-core")) != 1 {
		t.Fatalf("mismatch counter not incremented")
	}
	// A second read-back neither re-counts nor re-patches.
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(mism.WithLabelValues("tessera.io/gpu-mem")) != 1 {
		t.Fatal("mismatch counted twice")
	}
}

func TestNodeInventoryAnnotation(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	e.start()
	var inv *annotations.NodeGPUs
	waitFor(t, func() bool {
		n, _ := e.client.GetNode(context.Background(), nodeName)
		v, ok := n.Annotations[annotations.NodeGPUsKey]
		if !ok {
			return false
		}
		var err error
		inv, err = annotations.ParseNodeGPUs(v)
		return err == nil
	})
	if len(inv.GPUs) != 8 || inv.GPUs[0].SMCount != 132 || len(inv.GPUs[0].NVLinkPeers) != 7 || !inv.GPUs[0].Healthy {
		t.Fatalf("inventory = %+v", inv.GPUs[0])
	}
	changed, err := e.d.Inventory.Publish(context.Background())
	if err != nil || changed {
		t.Fatalf("unchanged inventory re-published: %v %v", changed, err)
	}
	e.node.InjectXid(0, 79)
	waitFor(t, func() bool {
		n, _ := e.client.GetNode(context.Background(), nodeName)
		inv, _ := annotations.ParseNodeGPUs(n.Annotations[annotations.NodeGPUsKey])
		return inv != nil && !inv.GPUs[0].Healthy
	})
}

func TestMIGDevices(t *testing.T) {
	e := newEnv(t, gputest.DGXA100)
	migs, err := e.node.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	var migRes string
	for res := range e.regs {
		if strings.HasPrefix(res, "tessera.io/mig-") {
			migRes = res
		}
	}
	if migRes == "" || len(e.regs) != 4 {
		t.Fatalf("registrations = %v", e.regs)
	}
	if n := len(e.list("tessera.io/gpu-mem")); n != 7*40 {
		t.Fatalf("gpu-mem IDs = %d: the MIG GPU must not advertise memory units", n)
	}
	ids, r := e.admit(migRes, 1)
	if !strings.Contains(ids[0], e.uuid(3)) || (r.Envs["NVIDIA_VISIBLE_DEVICES"] != migs[0] && r.Envs["NVIDIA_VISIBLE_DEVICES"] != migs[1]) ||
		len(r.Devices) != 6 || !strings.HasPrefix(r.Devices[4].ContainerPath, "/dev/nvidia-caps/nvidia-cap") {
		t.Fatalf("MIG allocation %v → %v", ids, r.Envs)
	}
	n, err := testutil.GatherAndCount(e.d.Registry, "tessera_deviceplugin_allocations_total", "tessera_deviceplugin_gpu_healthy")
	if err != nil || n != 1+8 {
		t.Fatalf("metrics: %d series, %v", n, err)
	}
	// Without the driver's capability minors kubelet gets an error naming
	// the file, not a container that cannot open its MIG device.
	minors := filepath.Join(e.d.Config.ProcRoot, "driver/nvidia-caps/mig-minors")
	if err := os.Remove(minors); err != nil {
		t.Fatal(err)
	}
	rest := e.available(migRes)
	_, err = e.client_(migRes).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: rest}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), minors) {
		t.Fatalf("Allocate without mig-minors: %v", err)
	}
}

func TestLostSocketIsRecreated(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	os.Remove(e.d.Plugin.Server("tessera.io/gpu-core").Socket())
	// Only the restarted server registers again: kubelet is still
	// connected to the others and refuses a second registration.
	if regs := e.kubelet.awaitRegistrations(t, 1); regs["tessera.io/gpu-core"] == nil {
		t.Fatalf("registrations after the socket loss: %v", regs)
	}
	if n := len(e.list("tessera.io/gpu-core")); n != 800 {
		t.Fatalf("after socket loss gpu-core lists %d devices", n)
	}
}

// TestMultiGPUContainerWithoutAssignment: a container with gpu: 2 keeps its
// memory and compute on its two GPUs, split evenly, whatever order kubelet
// allocates the three resources in.
func TestMultiGPUContainerWithoutAssignment(t *testing.T) {
	orders := [][]string{
		{"tessera.io/gpu", "tessera.io/gpu-mem", "tessera.io/gpu-core"},
		{"tessera.io/gpu", "tessera.io/gpu-core", "tessera.io/gpu-mem"},
		{"tessera.io/gpu-mem", "tessera.io/gpu", "tessera.io/gpu-core"},
		{"tessera.io/gpu-mem", "tessera.io/gpu-core", "tessera.io/gpu"},
		{"tessera.io/gpu-core", "tessera.io/gpu", "tessera.io/gpu-mem"},
		{"tessera.io/gpu-core", "tessera.io/gpu-mem", "tessera.io/gpu"},
	}
	sizes := map[string]int{"tessera.io/gpu": 2, "tessera.io/gpu-mem": 40, "tessera.io/gpu-core": 60}
	for _, order := range orders {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			e := newEnv(t, gputest.DGXH100, pod("wide", t0, "", ctr{name: "c", gpu: 2, mem: 40, core: 60}))
			e.start()
			var gpus []string
			for _, res := range order {
				ids, _ := e.admit(res, sizes[res])
				g := resource.GPUsOf(ids)
				if gpus == nil {
					gpus = g
				}
				if len(g) != 2 || fmt.Sprint(g) != fmt.Sprint(gpus) {
					t.Fatalf("%s on %v, earlier resources on %v", res, g, gpus)
				}
				shares, err := e.d.Manager.Shares(res, ids)
				if err != nil {
					t.Fatal(err)
				}
				if shares[0].MemBytes != shares[1].MemBytes || shares[0].CorePct != shares[1].CorePct || shares[0].Slots != shares[1].Slots {
					t.Fatalf("%s split unevenly: %+v", res, shares)
				}
			}
		})
	}
}

// TestFirstResourceLeavesRoomForTheOthers: binpack would put the memory on
// the fullest GPU, but that GPU has no compute left for the same container.
func TestFirstResourceLeavesRoomForTheOthers(t *testing.T) {
	e := newEnv(t, gputest.DGXH100,
		pod("cores", t0, "", ctr{name: "c", core: 100}),
		pod("mem", t0.Add(time.Second), "", ctr{name: "c", mem: 70}),
		pod("job", t0.Add(2*time.Second), "", ctr{name: "c", mem: 4, core: 10}))
	e.start()
	cores, _ := e.admit("tessera.io/gpu-core", 100)
	mem, _ := e.admit("tessera.io/gpu-mem", 70)
	if fmt.Sprint(resource.GPUsOf(cores)) != fmt.Sprint(resource.GPUsOf(mem)) {
		t.Fatalf("set-up: fillers on %v and %v", resource.GPUsOf(cores), resource.GPUsOf(mem))
	}
	jobMem, _ := e.admit("tessera.io/gpu-mem", 4)
	jobCore, _ := e.admit("tessera.io/gpu-core", 10)
	if g := resource.GPUsOf(jobMem); len(g) != 1 || g[0] == resource.GPUsOf(cores)[0] || fmt.Sprint(g) != fmt.Sprint(resource.GPUsOf(jobCore)) {
		t.Fatalf("job memory on %v, compute on %v; the full GPU is %v", g, resource.GPUsOf(jobCore), resource.GPUsOf(cores))
	}
}

// TestMIGReconfigurationWithoutRestart: an operator replaces GPU 3's two
// 3g instances with three 1g instances while one 3g device runs a
// container. Without a restart, kubelet's stream first shows both old
// devices Unhealthy (none dropped), the new profile registers as a new
// resource and can be allocated, the free old device is dropped on the
// next pass, the held one only once its container is gone, and the node
// inventory shows the new layout.
//
// The test drives the rediscovery passes itself (e.d.Rediscover, what the
// periodic loop calls): with a ticker, the pass that drops the free device
// could come before the Allocate that must find it retired (under load the
// steps in between take longer than any short period), and Allocate then
// only sees an unknown device.
func TestMIGReconfigurationWithoutRestart(t *testing.T) {
	e := newEnv(t, gputest.DGXA100, pod("train", t0, "", ctr{name: "c"}))
	old, err := e.node.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	rediscover := func(want bool) {
		t.Helper()
		changed, err := e.d.Rediscover()
		if err != nil || changed != want {
			t.Fatalf("rediscovery pass: changed %v, %v; want changed %v", changed, err, want)
		}
	}
	oldRes := resource.MIGResource(e.d.Manager.GPU(e.uuid(3)).MIG[0].Profile)
	heldID, freeID := e.uuid(3)+"::mig::"+old[0], e.uuid(3)+"::mig::"+old[1]
	e.podRes.set(&podresourcesapi.PodResources{Name: "train", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{
		Name: "c", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: oldRes, DeviceIds: []string{heldID}}}}}})
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := e.client_(oldRes).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() map[string]string {
		t.Helper()
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range m.Devices {
			out[d.ID] = d.Health
		}
		return out
	}
	if h := recv(); h[heldID] != pluginapi.Healthy || h[freeID] != pluginapi.Healthy {
		t.Fatalf("before: %v", h)
	}

	fresh, err := e.node.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if err != nil {
		t.Fatal(err)
	}
	rediscover(true)
	if h := recv(); len(h) != 2 || h[heldID] != pluginapi.Unhealthy || h[freeID] != pluginapi.Unhealthy {
		t.Fatalf("vanished devices must first be sent Unhealthy, got %v", h)
	}
	newRes := resource.MIGResource(e.d.Manager.GPU(e.uuid(3)).MIG[0].Profile)
	if newRes == oldRes {
		t.Fatalf("profile did not change: %s", newRes)
	}
	if regs := e.kubelet.awaitRegistrations(t, 1); regs[newRes] == nil {
		t.Fatalf("registrations after reconfiguration: %v", regs)
	}
	if got := e.available(newRes); len(got) != 3 || !strings.HasSuffix(got[0], fresh[0]) && !strings.HasSuffix(got[0], fresh[1]) && !strings.HasSuffix(got[0], fresh[2]) {
		t.Fatalf("new resource lists %v", got)
	}
	_, r := e.admit(newRes, 1)
	if len(r.Devices) != 6 || r.Envs["NVIDIA_VISIBLE_DEVICES"] == "" {
		t.Fatalf("allocation of a new MIG device: %+v", r)
	}
	_, err = e.client_(oldRes).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{freeID}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("Allocate of a vanished MIG device: %v", err)
	}
	rediscover(true)
	if h := recv(); len(h) != 1 || h[heldID] != pluginapi.Unhealthy {
		t.Fatalf("next pass must drop only the free device: %v", h)
	}
	waitFor(t, func() bool {
		n, _ := e.client.GetNode(context.Background(), nodeName)
		inv, _ := annotations.ParseNodeGPUs(n.Annotations[annotations.NodeGPUsKey])
		return inv != nil && len(inv.GPUs[3].MIG) == 3 && inv.GPUs[3].MIG[0].UUID == fresh[0]
	})

	// The container ends: kubelet no longer lists the pod, which has
	// succeeded.
	e.podRes.set()
	done, _ := e.client.GetPod("default", "train")
	done.Status.Phase = corev1.PodSucceeded
	e.updatePod(done)
	waitFor(t, func() bool {
		p := e.d.Pods.Get("default", "train")
		return p != nil && p.Status.Phase == corev1.PodSucceeded
	})
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	rediscover(true)
	if h := recv(); len(h) != 0 {
		t.Fatalf("after the container ended the old profile lists %v", h)
	}
}

// TestPeriodicRediscoveryAppliesMIGChanges: with a rediscovery period the
// daemon picks up a changed MIG layout by itself and registers the new
// profile (the reconfiguration test above drives its passes by hand).
func TestPeriodicRediscoveryAppliesMIGChanges(t *testing.T) {
	e := newEnv(t, gputest.DGXA100)
	if _, err := e.node.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	e.start(func(c *configv1.Config) { c.RediscoverInterval = configv1.Duration{Duration: 150 * time.Millisecond} })
	oldRes := resource.MIGResource(e.d.Manager.GPU(e.uuid(3)).MIG[0].Profile)
	fresh, err := e.node.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		g := e.d.Manager.GPU(e.uuid(3))
		return len(g.MIG) == 3 && g.MIG[0].UUID == fresh[0]
	})
	newRes := resource.MIGResource(e.d.Manager.GPU(e.uuid(3)).MIG[0].Profile)
	if newRes == oldRes {
		t.Fatalf("profile did not change: %s", newRes)
	}
	if regs := e.kubelet.awaitRegistrations(t, 1); regs[newRes] == nil {
		t.Fatalf("registrations after reconfiguration: %v", regs)
	}
}
