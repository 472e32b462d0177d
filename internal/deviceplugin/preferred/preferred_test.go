package preferred

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"testing"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

type fixture struct {
	node *gputest.Node
	gpus []gpu.GPU
	c    *Chooser
}

func newFixture(t *testing.T, policy string, withTopology bool) *fixture {
	t.Helper()
	node := gputest.MustNew(gputest.DGXH100)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gpus, err := gpu.Discover(node, log)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(gpus, resource.Options{SplitCount: 4, MemoryUnit: 1 << 30})
	c := &Chooser{Manager: m, Ledger: ledger.New(), Policy: policy, Log: log}
	if withTopology {
		if c.Topology, err = gpuallocator.NewDevices(gpuallocator.WithNvmlLib(node)); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{node: node, gpus: gpus, c: c}
}

// available lists all IDs of res except takenPerGPU[i] units of GPU i.
func (f *fixture) available(res string, takenPerGPU map[int]int) []string {
	taken := map[string]int{}
	for i, n := range takenPerGPU {
		taken[f.gpus[i].UUID] = n
	}
	var out []string
	for _, d := range f.c.Manager.IDs(res) {
		if d.ID.N >= taken[d.ID.GPU] {
			out = append(out, d.Key)
		}
	}
	return out
}

func TestLocalBinpackAndSpread(t *testing.T) {
	for policy, wantGPU := range map[string]int{configv1.PlacementBinpack: 2, configv1.PlacementSpread: 0} {
		t.Run(policy, func(t *testing.T) {
			f := newFixture(t, policy, false)
			// GPU 2 is fullest (70 of 80 units used), GPU 3 too full for 16 units.
			avail := f.available(resource.Memory, map[int]int{1: 10, 2: 60, 3: 70, 4: 20, 5: 20, 6: 20, 7: 20})
			ids := f.c.Preferred(resource.Memory, avail, nil, 16)
			if g := resource.GPUsOf(ids); len(ids) != 16 || len(g) != 1 || g[0] != f.gpus[wantGPU].UUID {
				t.Fatalf("%s placed 16 units on %v, want GPU %d", policy, g, wantGPU)
			}
		})
	}
}

// tenFreePerGPU leaves 10 free gpu-mem units on each GPU.
func (f *fixture) tenFreePerGPU() []string {
	taken := map[int]int{}
	for i := 0; i < 8; i++ {
		taken[i] = 70
	}
	return f.available(resource.Memory, taken)
}

// TestNoSpreadForASingleGPUContainer: when no GPU has room for a gpu-mem
// request, the answer is not a spread over GPUs (which kubelet would
// allocate and a single-GPU program would then see) but nothing, whether
// the container is known (no tessera.io/gpu) or not.
func TestNoSpreadForASingleGPUContainer(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	if ids := f.c.Preferred(resource.Memory, f.tenFreePerGPU(), nil, 15); len(ids) != 0 {
		t.Fatalf("unknown container: proposed %d IDs on %d GPUs", len(ids), len(resource.GPUsOf(ids)))
	}
	f.c.Pods = staticSource{pendingPod("p", "c", map[string]int64{resource.Memory: 15})}
	if ids := f.c.Preferred(resource.Memory, f.tenFreePerGPU(), nil, 15); len(ids) != 0 {
		t.Fatalf("single-GPU container: proposed %d IDs on %d GPUs", len(ids), len(resource.GPUsOf(ids)))
	}
	// What fits on one GPU is still placed.
	if ids := f.c.Preferred(resource.Memory, f.tenFreePerGPU(), nil, 10); len(ids) != 10 || len(resource.GPUsOf(ids)) != 1 {
		t.Fatalf("10 units on %d GPUs: %v", len(resource.GPUsOf(ids)), ids)
	}
}

// TestSpreadWithinRequestedGPUs: a container with tessera.io/gpu: 2 may get
// its memory from two GPUs, not three.
func TestSpreadWithinRequestedGPUs(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	f.c.Pods = staticSource{pendingPod("p", "c", map[string]int64{resource.GPU: 2, resource.Memory: 15})}
	if ids := f.c.Preferred(resource.Memory, f.tenFreePerGPU(), nil, 15); len(ids) != 15 || len(resource.GPUsOf(ids)) != 2 {
		t.Fatalf("gpu: 2 container: %d IDs on %d GPUs", len(ids), len(resource.GPUsOf(ids)))
	}
	f.c.Pods = staticSource{pendingPod("p", "c", map[string]int64{resource.GPU: 2, resource.Memory: 25})}
	if ids := f.c.Preferred(resource.Memory, f.tenFreePerGPU(), nil, 25); len(ids) != 0 {
		t.Fatalf("gpu: 2 container: proposed %d IDs on %d GPUs", len(ids), len(resource.GPUsOf(ids)))
	}
}

// TestSpillWhenAllowed: with allowGPUSpill the request is spread over as
// few GPUs as the binpack order gives.
func TestSpillWhenAllowed(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	f.c.AllowGPUSpill = true
	ids := f.c.Preferred(resource.Memory, f.tenFreePerGPU(), nil, 15)
	if len(ids) != 15 || len(resource.GPUsOf(ids)) != 2 {
		t.Fatalf("spill gave %d IDs on %d GPUs", len(ids), len(resource.GPUsOf(ids)))
	}
}

// staticSource is an informer holding fixed pending pods.
type staticSource []*corev1.Pod

func (s staticSource) Pending() []*corev1.Pod { return s }

func (s staticSource) Get(namespace, name string) *corev1.Pod {
	for _, p := range s {
		if p.Namespace == namespace && p.Name == name {
			return p
		}
	}
	return nil
}

func pendingPod(name, container string, limits map[string]int64) *corev1.Pod {
	l := corev1.ResourceList{}
	for r, n := range limits {
		l[corev1.ResourceName(r)] = *apiresource.NewQuantity(n, apiresource.DecimalSI)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: container, Resources: corev1.ResourceRequirements{Limits: l}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

func TestMustIncludeKeepsItsGPU(t *testing.T) {
	f := newFixture(t, configv1.PlacementSpread, false)
	must := []string{f.gpus[6].UUID + "::core::3"}
	ids := f.c.Preferred(resource.Core, f.available(resource.Core, nil), must, 30)
	if g := resource.GPUsOf(ids); len(g) != 1 || g[0] != f.gpus[6].UUID || !contains(ids, must[0]) {
		t.Fatalf("mustInclude ignored: %v", ids)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestMultiGPUSlotsUseTopology(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, true)
	// Break NVLinks: only GPUs 4-7 stay linked to each other.
	for i := 0; i < 8; i++ {
		i := i
		f.node.Device(i).GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			peer := link
			if peer >= i {
				peer++
			}
			if i >= 4 && peer >= 4 && peer < 8 {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
	}
	topo, err := gpuallocator.NewDevices(gpuallocator.WithNvmlLib(f.node))
	if err != nil {
		t.Fatal(err)
	}
	f.c.Topology = topo
	ids := f.c.Preferred(resource.GPU, f.available(resource.GPU, nil), nil, 4)
	got := resource.GPUsOf(ids)
	var want []string
	for i := 4; i < 8; i++ {
		want = append(want, f.gpus[i].UUID)
	}
	sort.Strings(want)
	if len(ids) != 4 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("4-GPU request on %v, want the NVLinked GPUs 4-7", got)
	}
}

func TestSingleSlotBinpacks(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	ids := f.c.Preferred(resource.GPU, f.available(resource.GPU, map[int]int{5: 3}), nil, 1)
	if g := resource.GPUsOf(ids); len(g) != 1 || g[0] != f.gpus[5].UUID {
		t.Fatalf("slot on %v, want the busiest GPU 5", g)
	}
}

func TestNoPodsNoProposal(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	f.c.Preferred(resource.Memory, f.available(resource.Memory, nil), nil, 2)
	if _, ok := f.c.Ledger.TakeProposal(resource.Memory, 2); ok {
		t.Fatal("proposal recorded without a candidate pod")
	}
	if ids := f.c.Preferred("tessera.io/unknown", []string{"x"}, nil, 1); ids != nil {
		t.Fatalf("unknown resource answered %v", ids)
	}
	if ids := f.c.Preferred(resource.Memory, []string{"garbage", "GPU-x::mem::1"}, nil, 1); len(ids) != 0 {
		t.Fatalf("foreign IDs answered %v", ids)
	}
}

func BenchmarkPreferredMemory(b *testing.B) {
	f := newFixture(&testing.T{}, configv1.PlacementBinpack, false)
	avail := f.available(resource.Memory, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(f.c.Preferred(resource.Memory, avail, nil, 16)) != 16 {
			b.Fatal("short answer")
		}
	}
}

func TestFailedAssignmentLeavesPoolIntact(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	p := f.c.pool(resource.Memory, f.available(resource.Memory, map[int]int{2: 75}))
	// GPU 2 has 5 free units: an attempt for 8 takes them, then fails.
	if got := p.clone().take(f.gpus[2].UUID, 8, nil); len(got) != 5 {
		t.Fatalf("took %d", len(got))
	}
	if n := len(p.free[f.gpus[2].UUID]); n != 5 {
		t.Fatalf("the pool lost IDs to a failed attempt: %d left", n)
	}
}
