package reconcile

import (
	"context"
	"io"
	"log/slog"
	"testing"

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

type podList map[string]*corev1.Pod

func (p podList) Pending() []*corev1.Pod                 { return nil }
func (p podList) Get(namespace, name string) *corev1.Pod { return p[namespace+"/"+name] }

type listing struct {
	resp *podresourcesapi.ListPodResourcesResponse
}

func (l *listing) List(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	return l.resp, nil
}

// TestMismatchMemoryFreedWithThePod: the reconciler remembers which
// mismatches it has counted so it counts each once; that memory must not
// outlive the pod, or it grows with every mismatched pod the node runs.
func TestMismatchMemoryFreedWithThePod(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	node := gputest.MustNew(gputest.DGXH100)
	gpus, err := gpu.Discover(node, log)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(gpus, resource.Options{SplitCount: 10, MemoryUnit: 1 << 30})
	b := &allocation.Builder{Manager: m, HookLibrary: "/lib/hook.so", StateDir: t.TempDir()}
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	client := kubefake.NewNode("n")
	src := podList{}
	lst := &listing{resp: &podresourcesapi.ListPodResourcesResponse{}}
	r := &Reconciler{PodResources: lst, Pods: src, Client: client, Manager: m, Ledger: ledger.New(), Builder: b,
		Metrics: NewMetrics(nil), Log: log}
	for i := 0; i < 20; i++ {
		name := "p" + string(rune('a'+i))
		a, _ := annotations.Marshal(&annotations.Assignment{Version: annotations.Version, Containers: []annotations.ContainerAssignment{
			{Name: "c", GPUs: []annotations.GPUShare{{UUID: gpus[3].UUID, MemoryMiB: 1024}}}}})
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Annotations: map[string]string{annotations.AssignmentKey: a}}, Spec: corev1.PodSpec{NodeName: "n"}}
		if err := client.CreatePod(p); err != nil {
			t.Fatal(err)
		}
		src["ns/"+name] = p
		// kubelet put it on GPU 0 instead.
		lst.resp = &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: name, Namespace: "ns",
			Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
				{ResourceName: resource.Memory, DeviceIds: []string{gpus[0].UUID + "::mem::0"}}}}}}}}
		if err := r.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		delete(src, "ns/"+name) // the pod ends
	}
	lst.resp = &podresourcesapi.ListPodResourcesResponse{}
	if err := r.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reported) != 0 {
		t.Fatalf("%d mismatch records kept for pods that are gone", len(r.reported))
	}
}
