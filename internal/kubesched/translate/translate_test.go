package translate

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

const inv2 = `{"version":"v1","gpus":[{"uuid":"GPU-b","index":1,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":false},{"uuid":"GPU-a","index":0,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":true}]}`

func gpuNode(name, inventory string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annv1.NodeGPUsKey: inventory}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}}}
}

func TestNodeInventoryOrdersGPUsByIndex(t *testing.T) {
	inv, err := NodeInventory(gpuNode("n1", inv2))
	if err != nil {
		t.Fatal(err)
	}
	if inv.UUIDs[0] != "GPU-a" || inv.UUIDs[1] != "GPU-b" || inv.Spec.GPUs != 2 || inv.Spec.GPUMemMiB != 40960 || inv.Spec.CPU != 16000 || inv.Spec.MemMiB != 65536 {
		t.Fatalf("inventory %+v", inv)
	}
	if len(inv.Unhealthy) != 1 || inv.Unhealthy[0] != 1 {
		t.Fatalf("unhealthy %v, want [1] (GPU-b)", inv.Unhealthy)
	}
}

func TestNodeInventoryRejectsWhatItCannotModel(t *testing.T) {
	cases := map[string]string{
		`{"version":"v1","gpus":[{"uuid":"GPU-a","index":0,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":true},{"uuid":"GPU-b","index":1,"model":"T4","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":true}]}`: "model",
		`{"version":"v1","gpus":[{"uuid":"GPU-a","index":0,"model":"A100","memoryMiB":0,"numaNode":0,"migEnabled":false,"healthy":true}]}`:                                                                                                              "memoryMiB",
		`{"version":"v1","gpus":[{"uuid":"GPU-a","index":0,"model":"A100","memoryMiB":5,"numaNode":0,"migEnabled":false,"healthy":true},{"uuid":"GPU-b","index":0,"model":"A100","memoryMiB":5,"numaNode":0,"migEnabled":false,"healthy":true}]}`:       "index repeated",
		`{"version":"v1","gpus":[` + "{": "malformed JSON",
	}
	for raw, want := range cases {
		_, err := NodeInventory(gpuNode("bad", raw))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "node bad") {
			t.Errorf("%s: error %v, want one naming the node and %q", raw, err, want)
		}
	}
}

func pod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{Containers: containers}}
}

func ctr(name string, res map[corev1.ResourceName]string) corev1.Container {
	rl := corev1.ResourceList{}
	for k, v := range res {
		rl[k] = resource.MustParse(v)
	}
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl}}
}

func TestPodRequestShapes(t *testing.T) {
	cases := []struct {
		res                 map[corev1.ResourceName]string
		gpus                int
		milli, memMiB       int32
		corePercent, shapeM uint64
	}{
		{map[corev1.ResourceName]string{ResourceGPU: "1"}, 1, 1000, 0, 0, 0},
		{map[corev1.ResourceName]string{ResourceGPU: "4"}, 4, 1000, 0, 0, 0},
		{map[corev1.ResourceName]string{ResourceMemory: "10", ResourceCore: "30"}, 1, 300, 10240, 30, 10240},
		{map[corev1.ResourceName]string{ResourceMemory: "8"}, 1, 1, 8192, 0, 8192},
		{map[corev1.ResourceName]string{ResourceGPU: "2", ResourceCore: "200", ResourceMemory: "80"}, 2, 1000, 40960, 100, 40960},
	}
	for _, c := range cases {
		req, sh, err := PodRequest(pod(ctr("side", map[corev1.ResourceName]string{corev1.ResourceCPU: "500m"}), ctr("main", c.res)), 1024)
		if err != nil {
			t.Fatalf("%v: %v", c.res, err)
		}
		if req.NumGPU != c.gpus || req.GPUMilli != c.milli || req.GPUMemMiB != c.memMiB || len(sh.Containers) != 1 || uint64(sh.Containers[0].CorePercent) != c.corePercent || sh.Containers[0].MemoryMiB != c.shapeM || sh.Containers[0].Name != "main" || req.CPUMilli != 500 {
			t.Errorf("%v: request %+v shape %+v", c.res, req, sh)
		}
	}
}

func TestPodRequestRefusesWithTheReason(t *testing.T) {
	cases := []struct {
		p    *corev1.Pod
		want string
	}{
		{pod(ctr("a", map[corev1.ResourceName]string{ResourceCore: "60"}), ctr("b", map[corev1.ResourceName]string{ResourceCore: "50"})), "containers a, b share one GPU and ask for 110%"},
		{pod(ctr("a", map[corev1.ResourceName]string{"tessera.io/mig-1g.5gb": "1"}), ctr("b", map[corev1.ResourceName]string{ResourceGPU: "1"})), "MIG devices go to one container per pod"},
		{pod(ctr("a", map[corev1.ResourceName]string{ResourceGPU: "2", ResourceCore: "51"})), "even share"},
		{pod(ctr("a", map[corev1.ResourceName]string{ResourceGPU: "2", ResourceCore: "100"})), "whole GPUs"},
		{pod(ctr("a", map[corev1.ResourceName]string{ResourceCore: "500m"})), "tessera.io/gpu-core: 500m"},
	}
	for _, c := range cases {
		if _, _, err := PodRequest(c.p, 1024); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ns/p") {
			t.Errorf("error %v, want one naming the pod and %q", err, c.want)
		}
	}
}

func TestEnginePodClassQueueAndBadPriority(t *testing.T) {
	cfg := schedv1.Default()
	p := pod(ctr("a", map[corev1.ResourceName]string{ResourceGPU: "1"}))
	p.Annotations = map[string]string{schedv1.PriorityAnnotation: "P0", QueueAnnotation: "team-a"}
	ep, _, err := EnginePod(p, cfg, 1024)
	if err != nil || ep.Class != priority.P0 || ep.Team != "team-a" || ep.Preemptible {
		t.Fatalf("pod %+v, %v", ep, err)
	}
	p.Annotations[schedv1.PriorityAnnotation] = "urgentish"
	if _, _, err := EnginePod(p, cfg, 1024); err == nil || !strings.Contains(err.Error(), "urgentish") {
		t.Fatalf("unknown priority: %v", err)
	}
}

func FuzzNodeInventory(f *testing.F) {
	f.Add(inv2)
	f.Add(`{"version":"v1","gpus":[]}`)
	f.Add(`{"version":"v1","gpus":[{"uuid":"GPU-a","index":0,"model":"A100","memoryMiB":40960,"numaNode":1,"nvlinkPeers":["GPU-a","GPU-x"],"migEnabled":false,"healthy":true}]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		inv, err := NodeInventory(gpuNode("n", raw))
		if err != nil {
			return
		}
		if len(inv.UUIDs) != inv.Spec.GPUs || inv.Spec.GPUs > 64 {
			t.Fatalf("inventory %+v: %d UUIDs for %d GPUs", inv, len(inv.UUIDs), inv.Spec.GPUs)
		}
		for _, u := range inv.Unhealthy {
			if u < 0 || u >= inv.Spec.GPUs {
				t.Fatalf("unhealthy index %d of %d", u, inv.Spec.GPUs)
			}
		}
		if inv.Spec.Islands < 0 || inv.Spec.Islands > inv.Spec.GPUs+1 || inv.Spec.NUMANodes < 0 || inv.Spec.NUMANodes > inv.Spec.GPUs {
			t.Fatalf("islands %d numa %d for %d GPUs", inv.Spec.Islands, inv.Spec.NUMANodes, inv.Spec.GPUs)
		}
	})
}

// A MIG inventory lists its devices in the engine's GPU order (by index,
// not as listed), and a mig-<profile> limit becomes the request's count.
func TestMIGInventoryAndRequest(t *testing.T) {
	raw := `{"version":"v1","gpus":[
 {"uuid":"GPU-b","index":1,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":true,"healthy":true,"mig":[{"uuid":"MIG-x","profile":"1g.5gb","memoryMiB":4864}]},
 {"uuid":"GPU-a","index":0,"model":"A100","memoryMiB":40960,"numaNode":0,"migEnabled":false,"healthy":true}]}`
	inv, err := NodeInventory(gpuNode("n1", raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Spec.MIG) != 1 || inv.Spec.MIG[0].GPU != 1 || inv.Spec.MIG[0].Parent != "GPU-b" || len(inv.Spec.MIGGPUs) != 1 || inv.Spec.MIGGPUs[0] != 1 {
		t.Fatalf("MIG GPUs %v devices %+v: want MIG-x on engine GPU 1 (GPU-b)", inv.Spec.MIGGPUs, inv.Spec.MIG)
	}
	req, sh, err := PodRequest(pod(ctr("main", map[corev1.ResourceName]string{"tessera.io/mig-1g.5gb": "2"})), 1)
	if err != nil {
		t.Fatal(err)
	}
	if req.NumMIG != 2 || req.MIGProfile != "1g.5gb" || req.NumGPU != 0 || len(sh.Containers) != 1 || sh.Containers[0].Name != "main" || sh.Containers[0].MIGs != 2 {
		t.Fatalf("request %+v shape %+v: want 2 of 1g.5gb and no GPUs", req, sh)
	}
	for _, c := range []struct{ res, qty, want string }{
		{"tessera.io/mig-1g.5gb", "0", "0 is not a whole number"},
		{"tessera.io/mig-1g/5gb", "1", "character '/'"},
	} {
		if _, _, err := PodRequest(pod(ctr("main", map[corev1.ResourceName]string{corev1.ResourceName(c.res): c.qty})), 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %s: err = %v, want %q", c.res, c.qty, err, c.want)
		}
	}
}

// Several containers each get their own slice: whole-GPU containers GPUs
// of their own, fractional ones one GPU together (shares added), both
// together a shared GPU taken whole; an init container counts as
// kube-scheduler counts it (the larger of it and the app containers) and
// runs on the first GPUs; a sidecar counts as an app container. The
// assignment names each container's GPUs with its own amounts and reads
// back to the same GPUs.
func TestMultiContainerSlices(t *testing.T) {
	m := func(kv ...string) map[corev1.ResourceName]string {
		out := map[corev1.ResourceName]string{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = kv[i+1]
		}
		return out
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("sidecar", m(string(ResourceCore), "10", string(ResourceMemory), "1"))
	sidecar.RestartPolicy = &always
	cases := []struct {
		name   string
		init   []corev1.Container
		apps   []corev1.Container
		gpus   int
		milli  int32
		memMiB int32
		// want: container -> indices of the decided GPUs it gets
		want map[string][]int
	}{
		{"two fractional share one GPU", nil,
			[]corev1.Container{ctr("a", m(string(ResourceCore), "30", string(ResourceMemory), "8")), ctr("b", m(string(ResourceCore), "20", string(ResourceMemory), "4"))},
			1, 500, 12288, map[string][]int{"a": {0}, "b": {0}}},
		{"two whole containers", nil,
			[]corev1.Container{ctr("a", m(string(ResourceGPU), "2")), ctr("b", m(string(ResourceGPU), "1"))},
			3, 1000, 0, map[string][]int{"a": {0, 1}, "b": {2}}},
		{"whole and fractional", nil,
			[]corev1.Container{ctr("a", m(string(ResourceCore), "30")), ctr("b", m(string(ResourceGPU), "2"))},
			3, 1000, 0, map[string][]int{"b": {0, 1}, "a": {2}}},
		{"init larger than the apps", []corev1.Container{ctr("warm", m(string(ResourceCore), "70", string(ResourceMemory), "2"))},
			[]corev1.Container{ctr("a", m(string(ResourceCore), "30", string(ResourceMemory), "8"))},
			1, 700, 8192, map[string][]int{"warm": {0}, "a": {0}}},
		{"init of two GPUs", []corev1.Container{ctr("warm", m(string(ResourceGPU), "2"))},
			[]corev1.Container{ctr("a", m(string(ResourceCore), "30"))},
			2, 1000, 0, map[string][]int{"warm": {0, 1}, "a": {0}}},
		{"sidecar adds up", []corev1.Container{sidecar},
			[]corev1.Container{ctr("a", m(string(ResourceCore), "30", string(ResourceMemory), "8"))},
			1, 400, 9216, map[string][]int{"sidecar": {0}, "a": {0}}},
	}
	inv, err := NodeInventory(gpuNode("n1", `{"version":"v1","gpus":[
 {"uuid":"GPU-0","index":0,"model":"A100","memoryMiB":40960,"numaNode":0,"healthy":true},
 {"uuid":"GPU-1","index":1,"model":"A100","memoryMiB":40960,"numaNode":0,"healthy":true},
 {"uuid":"GPU-2","index":2,"model":"A100","memoryMiB":40960,"numaNode":0,"healthy":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		p := pod(c.apps...)
		p.Spec.InitContainers = c.init
		req, sh, err := PodRequest(p, 1024)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if req.NumGPU != c.gpus || req.GPUMilli != c.milli || req.GPUMemMiB != c.memMiB {
			t.Errorf("%s: request %d GPUs of %d milli, %d MiB; want %d, %d, %d", c.name, req.NumGPU, req.GPUMilli, req.GPUMemMiB, c.gpus, c.milli, c.memMiB)
			continue
		}
		d := placement.Decision{Node: 0, NodeName: "n1"}
		for g := range req.NumGPU {
			d.Grant.Shares = append(d.Grant.Shares, partition.Share{GPU: g, Milli: req.GPUMilli, MemMiB: req.GPUMemMiB})
		}
		raw, err := Assignment(d, sh, inv, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		a, err := annv1.ParseAssignment(raw)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for name, idx := range c.want {
			ca := a.Container(name)
			if ca == nil || len(ca.GPUs) != len(idx) {
				t.Errorf("%s: container %s: %+v, want GPUs %v", c.name, name, ca, idx)
				continue
			}
			for k, g := range idx {
				if ca.GPUs[k].UUID != fmt.Sprintf("GPU-%d", g) {
					t.Errorf("%s: container %s GPU %d is %s, want GPU-%d", c.name, name, k, ca.GPUs[k].UUID, g)
				}
			}
		}
		if a.Container("a") != nil && c.name == "two fractional share one GPU" && (a.Container("a").GPUs[0].CorePercent != 30 || a.Container("b").GPUs[0].MemoryMiB != 4096) {
			t.Errorf("%s: amounts %+v", c.name, a.Containers)
		}
		bound := p.DeepCopy()
		bound.Annotations = map[string]string{annv1.AssignmentKey: raw}
		rec, ok := BoundDecision(bound, &req, sh, inv, nil, 0)
		if !ok || len(rec.Problems) > 0 || len(rec.Decision.Grant.Shares) != req.NumGPU {
			t.Errorf("%s: read back %+v, %v", c.name, rec, ok)
		}
	}
}
