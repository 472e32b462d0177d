package kwoknodes

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/inventory"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
)

// GPUModel is a GPU as NVML names and sizes it.
type GPUModel struct {
	Name      string
	MemoryMiB uint64
	SMCount   int
}

// GPU models of the simulated nodes (NVML's names and memory sizes).
var (
	A100SXM40 = GPUModel{"NVIDIA A100-SXM4-40GB", 40960, 108}
	A100SXM80 = GPUModel{"NVIDIA A100-SXM4-80GB", 81920, 108}
	H100SXM   = GPUModel{"NVIDIA H100 80GB HBM3", 81559, 132}
	H200SXM   = GPUModel{"NVIDIA H200", 143771, 132}
	L4        = GPUModel{"NVIDIA L4", 23034, 58}
)

// NodeSpec is one simulated node.
type NodeSpec struct {
	Name   string
	Model  GPUModel
	GPUs   int
	Labels map[string]string
	// Taints and Unschedulable (a cordon) go on the node as created.
	Taints        []corev1.Taint
	Unschedulable bool
}

// Node labels set on every simulated node.
const (
	// PoolLabel selects the nodes of this package (value "kwok").
	PoolLabel = "tessera.io/e2e-pool"
	// ModelLabel is the GPU model, as GPU feature discovery publishes it.
	ModelLabel = "nvidia.com/gpu.product"
)

// simulatedUUIDs is the name space of the simulated GPUs' UUIDs, so a
// node's GPUs keep their UUIDs when it is created again.
var simulatedUUIDs = uuid.MustParse("3c5e8f0a-51a6-4f0e-9d8e-9a3f1f0ad2c7")

// Devices are the node's GPUs as the device plugin discovers them: every GPU
// NVLinked to every other (NVSwitch), the first half on NUMA node 0.
func (s NodeSpec) Devices() []gpu.GPU {
	uuids := make([]string, s.GPUs)
	for i := range uuids {
		uuids[i] = "GPU-" + uuid.NewSHA1(simulatedUUIDs, []byte(s.Name+"/"+strconv.Itoa(i))).String()
	}
	gpus := make([]gpu.GPU, s.GPUs)
	for i := range gpus {
		var peers []string
		if s.GPUs > 1 {
			peers = make([]string, 0, s.GPUs-1)
			for j, u := range uuids {
				if j != i {
					peers = append(peers, u)
				}
			}
		}
		gpus[i] = gpu.GPU{UUID: uuids[i], Index: i, Minor: i, Model: s.Model.Name,
			MemoryBytes: s.Model.MemoryMiB << 20, SMCount: s.Model.SMCount,
			NUMANode: i * 2 / max(s.GPUs, 1), NVLinkPeers: peers}
	}
	return gpus
}

// Node is the Node object the device plugin's node would have: the
// inventory annotation written by the plugin's own inventory.Build and the
// capacity of every tessera resource as its resource manager advertises
// it under plugin's sizing (configv1.Default() is the shipped one), beside
// generous CPU, memory and pod capacity.
func (s NodeSpec) Node(plugin *configv1.Config) (*corev1.Node, error) {
	if s.Name == "" || s.GPUs < 0 {
		return nil, fmt.Errorf("node spec: name %q, %d GPUs", s.Name, s.GPUs)
	}
	mgr, err := resource.NewManager(s.Devices(), resource.Options{SplitCount: plugin.SplitCount,
		MemoryUnit: plugin.MemoryUnitBytes(), ReservedMemory: plugin.ReservedMemoryBytes(),
		MIG: plugin.MIGStrategy == configv1.MIGStrategyMixed})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", s.Name, err)
	}
	inv, err := inventory.Build(mgr)
	if err != nil {
		return nil, fmt.Errorf("node %s inventory: %w", s.Name, err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    apiresource.MustParse("128"),
		corev1.ResourceMemory: apiresource.MustParse("1Ti"),
		corev1.ResourcePods:   apiresource.MustParse("256"),
	}
	for _, r := range []string{resource.GPU, resource.Memory, resource.Core} {
		capacity[corev1.ResourceName(r)] = *apiresource.NewQuantity(int64(len(mgr.IDs(r))), apiresource.DecimalSI)
	}
	labels := map[string]string{
		corev1.LabelHostname:   s.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		PoolLabel:              "kwok",
		ModelLabel:             labelValue(s.Model.Name),
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   s.Name,
			Labels: labels,
			Annotations: map[string]string{
				ManagedAnnotation:       ManagedValue,
				annotations.NodeGPUsKey: inv,
			},
		},
		Spec:   corev1.NodeSpec{Taints: s.Taints, Unschedulable: s.Unschedulable},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}, nil
}

// labelValue makes a model name a valid label value ("NVIDIA H200" →
// "NVIDIA-H200"), as GPU feature discovery does.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	return string(b)
}

// mixedShapes are the node shapes MixedNodes cycles through.
var mixedShapes = []struct {
	model GPUModel
	gpus  int
}{
	{H100SXM, 8}, {A100SXM80, 8}, {L4, 4}, {H200SXM, 8}, {A100SXM40, 8}, {A100SXM80, 4},
}

// MixedNodes are n nodes named <prefix>-0000… cycling through 8×H100,
// 8×A100-80GB, 4×L4, 8×H200, 8×A100-40GB and 4×A100-80GB.
func MixedNodes(prefix string, n int) []NodeSpec {
	specs := make([]NodeSpec, n)
	for i := range specs {
		sh := mixedShapes[i%len(mixedShapes)]
		specs[i] = NodeSpec{Name: fmt.Sprintf("%s-%04d", prefix, i), Model: sh.model, GPUs: sh.gpus}
	}
	return specs
}

// UniformNodes are n nodes named <prefix>-0000… with gpus GPUs of model.
func UniformNodes(prefix string, n int, model GPUModel, gpus int) []NodeSpec {
	specs := make([]NodeSpec, n)
	for i := range specs {
		specs[i] = NodeSpec{Name: fmt.Sprintf("%s-%04d", prefix, i), Model: model, GPUs: gpus}
	}
	return specs
}

// Create creates the nodes with parallel requests under the device
// plugin's shipped sizing (configv1.Default()).
func Create(ctx context.Context, client kubernetes.Interface, specs []NodeSpec) error {
	return CreateWith(ctx, client, configv1.Default(), specs)
}

// CreateWith is Create under the plugin sizing of plugin.
func CreateWith(ctx context.Context, client kubernetes.Interface, plugin *configv1.Config, specs []NodeSpec) error {
	const workers = 16
	work := make(chan NodeSpec)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for s := range work {
				n, err := s.Node(plugin)
				if err == nil {
					_, err = client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
				}
				if err != nil {
					errs <- fmt.Errorf("create node %s: %w", s.Name, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for _, s := range specs {
		select {
		case work <- s:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errs:
		return err
	default:
		return nil
	}
}

// WaitReady waits until every node in specs is Ready and has lost the
// node.kubernetes.io/not-ready taint the API server puts on new nodes
// (the controller manager lifts it once kwok reports Ready): only then
// does a scheduler place pods there.
func WaitReady(ctx context.Context, client kubernetes.Interface, specs []NodeSpec) error {
	want := make(map[string]bool, len(specs))
	for _, s := range specs {
		want[s.Name] = true
	}
	tick := time.NewTicker(time.Second) // a list of 1,000 nodes is heavy: not faster
	defer tick.Stop()
	for {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: PoolLabel + "=kwok", ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		ready := 0
		for i := range list.Items {
			if want[list.Items[i].Name] && Schedulable(&list.Items[i]) {
				ready++
			}
		}
		if ready == len(want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes ready: %w", ready, len(want), ctx.Err())
		case <-tick.C:
		}
	}
}

// Schedulable reports whether n is Ready without the not-ready and
// unreachable taints.
func Schedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
