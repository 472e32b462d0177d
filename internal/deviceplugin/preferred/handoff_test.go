package preferred

import (
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// lateSource is an informer that sees the pod only after kubelet has
// already started admitting it (kubelet and the plugin watch the API
// server separately; either may be first).
type lateSource struct {
	pod   *corev1.Pod
	after time.Time
	calls atomic.Int32
}

func (s *lateSource) Pending() []*corev1.Pod {
	s.calls.Add(1)
	if time.Now().Before(s.after) {
		return nil
	}
	return []*corev1.Pod{s.pod}
}

func (s *lateSource) Get(namespace, name string) *corev1.Pod { return nil }

// podAssigned8GiB is a pending pod whose container "c" requests 8 gpu-mem
// units and is assigned 8 GiB on gpu.
func podAssigned8GiB(t *testing.T, gpu string) *corev1.Pod {
	t.Helper()
	a, err := annotations.Marshal(&annotations.Assignment{Version: annotations.Version, Containers: []annotations.ContainerAssignment{
		{Name: "c", GPUs: []annotations.GPUShare{{UUID: gpu, MemoryMiB: 8 << 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Annotations: map[string]string{annotations.AssignmentKey: a}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{resource.Memory: *apiresource.NewQuantity(8, apiresource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

// TestPodSeenLateStillHonoursAssignment: kubelet asks for a preferred
// allocation a little before the plugin's informer has the pod. The
// plugin waits for it instead of placing the container by local policy
// and ignoring the scheduler's assignment.
func TestPodSeenLateStillHonoursAssignment(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	p := podAssigned8GiB(t, f.gpus[5].UUID)
	src := &lateSource{pod: p, after: time.Now().Add(150 * time.Millisecond)}
	f.c.Pods = src
	f.c.AwaitPod = 30 * time.Second // returns once the pod is seen; a loaded machine may take long to poll
	ids := f.c.Preferred(resource.Memory, f.available(resource.Memory, nil), nil, 8)
	if g := resource.GPUsOf(ids); len(g) != 1 || g[0] != f.gpus[5].UUID {
		t.Fatalf("placed on %v before the pod was seen; assigned GPU 5", g)
	}
	if ref, ok := f.c.Ledger.TakeProposal(resource.Memory, 8); !ok || ref.Pod != "p" {
		t.Fatalf("proposal %v %v", ref, ok)
	}
	// A request no pod makes waits only AwaitPod (the upper bound leaves a
	// loaded machine seconds of slack, and is far below the 30 s above).
	f.c.AwaitPod = 100 * time.Millisecond
	start := time.Now()
	f.c.Preferred(resource.Memory, f.available(resource.Memory, nil), nil, 3)
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Fatalf("waited %s for a pod that never comes, want about 100ms", d)
	}
}

// TestReusedIDsCountedOnce: kubelet hands a regular init container's
// devices on to an app container, so two ledger entries can hold the same
// IDs. Judging where a container's other resources still fit must count
// each ID once, or a GPU with room looks full.
func TestReusedIDsCountedOnce(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	g0 := f.gpus[0].UUID
	var held []string
	for n := 0; n < 40; n++ { // 40 of GPU 0's 80 units
		held = append(held, resource.ID{GPU: g0, Kind: resource.KindMem, N: n}.String())
	}
	for _, c := range []string{"init", "main"} {
		f.c.Ledger.Record(ledger.ContainerRef{PodUID: "u0", Namespace: "ns", Pod: "old", Container: c}, resource.Memory, held)
	}
	lim := corev1.ResourceList{
		resource.Memory: *apiresource.NewQuantity(30, apiresource.DecimalSI),
		resource.Core:   *apiresource.NewQuantity(10, apiresource.DecimalSI)}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: lim}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	f.c.Pods = &lateSource{pod: p}
	// Binpack sends compute to GPU 0, the fullest; its memory still fits there.
	ids := f.c.Preferred(resource.Core, f.available(resource.Core, map[int]int{0: 50}), nil, 10)
	if g := resource.GPUsOf(ids); len(g) != 1 || g[0] != g0 {
		t.Fatalf("compute on %v; GPU 0 has room for the container's 30 memory units", g)
	}
}

// TestMustIncludeKeptWithAssignment: kubelet passes as mustInclude the IDs
// it reuses from an init container; the API requires them in the answer,
// even when the container's assignment names another GPU.
func TestMustIncludeKeptWithAssignment(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	p := podAssigned8GiB(t, f.gpus[5].UUID)
	f.c.Pods = &lateSource{pod: p}
	must := []string{f.gpus[2].UUID + "::mem::0", f.gpus[2].UUID + "::mem::1"}
	ids := f.c.Preferred(resource.Memory, f.available(resource.Memory, nil), must, 8)
	if len(ids) != 8 || !contains(ids, must[0]) || !contains(ids, must[1]) {
		t.Fatalf("preferred %v lacks mustInclude %v", ids, must)
	}
	if n := len(resource.GPUsOf(ids)); n != 2 {
		t.Fatalf("the rest should follow the assignment (GPU 5): %v", ids)
	}
}
