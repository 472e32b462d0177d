package explain

import (
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

func node(t *testing.T, cpu int64, gpus int, memMiB int32, usedMilli, usedMem int32) Node {
	t.Helper()
	n, err := partition.NewNode(partition.NodeSpec{Name: "n", Model: "A100", CPU: cpu, MemMiB: 1 << 20, GPUs: gpus, GPUMemMiB: memMiB})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.GPUs {
		n.GPUs[i].FreeMilli -= usedMilli
		n.GPUs[i].FreeMemMiB -= usedMem
	}
	return Node{State: &n}
}

// The wording follows kube-scheduler's FitError: total, then the
// "<count> <reason>" strings sorted as strings.
func TestMessageCountsReasonsLikeKubeScheduler(t *testing.T) {
	var nodes []Node
	for i := 0; i < 12; i++ { // compute free, memory short
		nodes = append(nodes, node(t, 64000, 2, 40960, 0, 30000))
	}
	for i := 0; i < 8; i++ { // little CPU, GPUs fine
		nodes = append(nodes, node(t, 500, 2, 40960, 0, 0))
	}
	nodes = append(nodes, Node{Unusable: true}, Node{Cordoned: true, State: nodes[0].State},
		Node{Refused: "node(s) didn't match Pod's node affinity/selector", State: nodes[0].State})
	r := &placement.Request{CPUMilli: 1000, NumGPU: 1, GPUMilli: 300, GPUMemMiB: 20480}
	got := Message(nodes, r)
	want := "0/23 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had an unusable tessera.io/node-gpus inventory, 1 node(s) had conflicting GPU placements (tessera places nothing there until they are consistent), 12 Insufficient tessera.io/gpu-mem, 8 Insufficient cpu."
	if got != want {
		t.Fatalf("message\n got %s\nwant %s", got, want)
	}
}

func TestMessageNamesTheShortResource(t *testing.T) {
	full := node(t, 64000, 4, 40960, 1000, 0)
	small := node(t, 64000, 4, 16384, 0, 0)
	cases := []struct {
		n    Node
		r    placement.Request
		want string
	}{
		{full, placement.Request{NumGPU: 2, GPUMilli: 1000}, "0/1 nodes are available: 1 Insufficient tessera.io/gpu."},
		{full, placement.Request{NumGPU: 1, GPUMilli: 500}, "0/1 nodes are available: 1 Insufficient tessera.io/gpu-core."},
		{small, placement.Request{NumGPU: 1, GPUMilli: 100, GPUMemMiB: 20000}, "0/1 nodes are available: 1 node(s) had no GPU with as much memory as requested."},
		{small, placement.Request{NumGPU: 8, GPUMilli: 1000}, "0/1 nodes are available: 1 node(s) had fewer GPUs than requested."},
		{small, placement.Request{NumGPU: 1, GPUMilli: 100, Models: []string{"H100"}}, "0/1 nodes are available: 1 node(s) didn't match the pod's GPU models."},
	}
	for _, c := range cases {
		if got := Message([]Node{c.n}, &c.r); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.r, got, c.want)
		}
	}
}

// Inter-pod refusals come after the resource fit, as kube-scheduler runs
// its filters: a full node says Insufficient, a node with room names the
// pods around it, a node refused by its node constraints says that.
func TestPodsRefusedAfterCapacity(t *testing.T) {
	anti := "node(s) didn't match pod anti-affinity rules"
	full := node(t, 64000, 1, 40960, 1000, 0)
	full.PodsRefused = anti
	room := node(t, 64000, 1, 40960, 0, 0)
	room.PodsRefused = anti
	selector := node(t, 64000, 1, 40960, 0, 0)
	selector.Refused, selector.PodsRefused = "node(s) didn't match Pod's node affinity/selector", anti
	r := &placement.Request{CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000}
	got := Message([]Node{full, room, room, selector}, r)
	want := "0/4 nodes are available: 1 Insufficient tessera.io/gpu, 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) didn't match pod anti-affinity rules."
	if got != want {
		t.Fatalf("message\n got %s\nwant %s", got, want)
	}
}

// Volume reasons count on a node with room only, every one of them, and
// before the inter-pod reason (kube-scheduler's filter order: resource
// fit, volume filters, inter-pod filters).
func TestVolumeReasonsAfterCapacityBeforePods(t *testing.T) {
	room := node(t, 64000, 1, 40960, 0, 0)
	full := node(t, 64000, 1, 40960, 1000, 0)
	nodes := []Node{
		{State: room.State, VolumesRefused: []string{"node(s) didn't match PersistentVolume's node affinity", "node(s) didn't find available persistent volumes to bind"}, PodsRefused: "node(s) didn't match pod anti-affinity rules"},
		{State: full.State, VolumesRefused: []string{"node(s) didn't match PersistentVolume's node affinity"}},
		{State: room.State, PodsRefused: "node(s) didn't match pod anti-affinity rules"},
	}
	got := Message(nodes, &placement.Request{NumGPU: 1, GPUMilli: 1000})
	want := "0/3 nodes are available: 1 Insufficient tessera.io/gpu, 1 node(s) didn't find available persistent volumes to bind, 1 node(s) didn't match PersistentVolume's node affinity, 1 node(s) didn't match pod anti-affinity rules."
	if got != want {
		t.Fatalf("message\n got %s\nwant %s", got, want)
	}
}
