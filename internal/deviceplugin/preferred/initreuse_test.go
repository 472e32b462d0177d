package preferred

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// TestInitContainerPlacedWhereItsAppContainerFits: kubelet hands a regular
// init container's IDs on to the pod's app container (mustInclude), so an
// init container binpacked onto a GPU with room for itself but not for the
// app container leaves the app container a spread over two GPUs, which a
// single-GPU container is refused (allowGPUSpill off) although another GPU
// had room for both: the pod fails admission on a node that fits it.
func TestInitContainerPlacedWhereItsAppContainerFits(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	pod := pendingPod("p", "app", map[string]int64{resource.Memory: 8})
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{resource.Memory: *apiresource.NewQuantity(4, apiresource.DecimalSI)}}}}
	f.c.Pods = staticSource{pod}
	// GPU 0 has 6 units free (the fullest that fits 4), the others all 80.
	avail := f.available(resource.Memory, map[int]int{0: 74})

	// Kubelet allocates the init container, then the app container with the
	// init container's IDs as mustInclude and the rest from what is left.
	initIDs := f.c.Preferred(resource.Memory, avail, nil, 4)
	if len(initIDs) != 4 {
		t.Fatalf("init container: proposed %v", initIDs)
	}
	ref, _ := f.c.Ledger.TakeProposal(resource.Memory, 4)
	f.c.Ledger.Record(ref, resource.Memory, initIDs)
	var rest []string
	for _, id := range avail {
		if !contains(initIDs, id) {
			rest = append(rest, id)
		}
	}
	appIDs := f.c.Preferred(resource.Memory, append(rest, initIDs...), initIDs, 8)
	if len(appIDs) != 8 || len(resource.GPUsOf(appIDs)) != 1 {
		t.Fatalf("app container (8 units, reusing the init container's 4 on %v): proposed %d IDs on GPUs %v; "+
			"another GPU had room for both", resource.GPUsOf(initIDs), len(appIDs), resource.GPUsOf(appIDs))
	}
}

// TestSidecarPlacedByItsOwnSize: a sidecar (an init container that keeps
// running) hands nothing on, so it is binpacked by its own request.
func TestSidecarPlacedByItsOwnSize(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	pod := pendingPod("p", "app", map[string]int64{resource.Memory: 8})
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{resource.Memory: *apiresource.NewQuantity(4, apiresource.DecimalSI)}}}}
	f.c.Pods = staticSource{pod}
	ids := f.c.Preferred(resource.Memory, f.available(resource.Memory, map[int]int{0: 74}), nil, 4)
	if g := resource.GPUsOf(ids); len(ids) != 4 || len(g) != 1 || g[0] != f.gpus[0].UUID {
		t.Fatalf("sidecar: proposed %d IDs on %v, want 4 on the fullest GPU that fits, %s", len(ids), g, f.gpus[0].UUID)
	}
}

// TestInitContainerCoreFirstLeavesRoomForAppMemory: kubelet allocates a
// container's resources in map order, so the init container's gpu-core may
// be placed first; its GPU (which its gpu-mem then follows) must have room
// for the app container's gpu-mem too.
func TestInitContainerCoreFirstLeavesRoomForAppMemory(t *testing.T) {
	f := newFixture(t, configv1.PlacementBinpack, false)
	pod := pendingPod("p", "app", map[string]int64{resource.Memory: 8, resource.Core: 30})
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
		resource.Memory: *apiresource.NewQuantity(4, apiresource.DecimalSI),
		resource.Core:   *apiresource.NewQuantity(30, apiresource.DecimalSI)}}}}
	f.c.Pods = staticSource{pod}
	// Binpack prefers GPU 0: its compute is the fullest, and its 6 free
	// memory units (74 held by another pod) hold the init container's 4 but
	// not the app container's 8.
	var held []string
	for _, d := range f.c.Manager.IDs(resource.Memory) {
		if d.ID.GPU == f.gpus[0].UUID && d.ID.N < 74 {
			held = append(held, d.Key)
		}
	}
	f.c.Ledger.Record(ledger.ContainerRef{PodUID: "u0", Namespace: "ns", Pod: "other", Container: "c"}, resource.Memory, held)
	coreIDs := f.c.Preferred(resource.Core, f.available(resource.Core, map[int]int{0: 50}), nil, 30)
	if g := resource.GPUsOf(coreIDs); len(g) != 1 || g[0] == f.gpus[0].UUID {
		t.Fatalf("init container's gpu-core went to %v; GPU 0 (%s) has no room for the app container's 8 memory units",
			g, f.gpus[0].UUID)
	}
}
