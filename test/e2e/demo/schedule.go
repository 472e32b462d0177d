package demo

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// PodSpecs are the scenario's two user pods, as a user writes them: one
// container each, sharing a GPU's memory and compute.
var PodSpecs = []string{`apiVersion: v1
kind: Pod
metadata:
  name: infer-a
  namespace: team-a
spec:
  schedulerName: tessera-scheduler
  containers:
  - name: server
    image: registry.example.com/infer:1.0
    resources:
      limits:
        tessera.io/gpu-mem: 8
        tessera.io/gpu-core: 30
`, `apiVersion: v1
kind: Pod
metadata:
  name: train-b
  namespace: team-b
spec:
  schedulerName: tessera-scheduler
  containers:
  - name: trainer
    image: registry.example.com/train:1.0
    resources:
      limits:
        tessera.io/gpu-mem: 16
        tessera.io/gpu-core: 70
`}

// PrioritySpecs are the scenario's second pair: a P0 server issuing short
// bursts beside a P3 batch pod that saturates the GPU they share.
var PrioritySpecs = []string{`apiVersion: v1
kind: Pod
metadata:
  name: chat-p0
  namespace: team-a
  annotations:
    tessera.io/priority: P0
spec:
  schedulerName: tessera-scheduler
  containers:
  - name: server
    image: registry.example.com/chat:3.2
    resources:
      limits:
        tessera.io/gpu-mem: 4
        tessera.io/gpu-core: 50
`, `apiVersion: v1
kind: Pod
metadata:
  name: batch-p3
  namespace: team-b
  annotations:
    tessera.io/priority: P3
spec:
  schedulerName: tessera-scheduler
  containers:
  - name: job
    image: registry.example.com/batch:1.0
    resources:
      limits:
        tessera.io/gpu-mem: 4
        tessera.io/gpu-core: 50
`}

// ParsePod reads a Pod spec (YAML), refusing unknown fields.
func ParsePod(spec string) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(spec), &p); err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	if p.Kind != "Pod" || p.Name == "" {
		return nil, fmt.Errorf("pod spec: kind %q name %q: want a named Pod", p.Kind, p.Name)
	}
	return &p, nil
}

// scheduler is tessera-scheduler's placement for one node: the engine the
// Kubernetes scheduler (cluster-scheduler run) drives, fed from the node's
// inventory annotation, writing the assignment annotation it binds with.
type scheduler struct {
	inv     *translate.Inventory
	engine  *placement.Scheduler
	memUnit uint64 // MiB per tessera.io/gpu-mem
}

func newScheduler(n *simNode) (*scheduler, error) {
	node, err := n.client.GetNode(context.Background(), nodeName)
	if err != nil {
		return nil, err
	}
	inv, err := translate.NodeInventory(node)
	if err != nil {
		return nil, err
	}
	c, err := placement.NewCluster([]partition.NodeSpec{inv.Spec})
	if err != nil {
		return nil, err
	}
	pol, err := placement.NewPolicy("tessera", c, placement.Options{})
	if err != nil {
		return nil, err
	}
	unit := n.plugin.Config.MemoryUnitBytes() >> 20
	return &scheduler{inv: inv, engine: placement.NewScheduler(c, pol, false), memUnit: unit}, nil
}

// place decides a pod's GPU, reserves it, and returns the assignment
// annotation and the GPU's inventory index.
func (s *scheduler) place(p *corev1.Pod) (string, int, error) {
	req, sh, err := translate.PodRequest(p, s.memUnit)
	if err != nil {
		return "", 0, err
	}
	d, err := s.engine.Place(&req)
	if err != nil {
		return "", 0, err
	}
	a, err := translate.Assignment(d, sh, s.inv, nil)
	if err != nil {
		return "", 0, err
	}
	parsed, err := annv1.ParseAssignment(a)
	if err != nil || len(parsed.Containers) != 1 || len(parsed.Containers[0].GPUs) != 1 {
		return "", 0, fmt.Errorf("pod %s: assignment %q: want one container on one GPU (%v)", p.Name, a, err)
	}
	return a, s.inv.GPUIndex(parsed.Containers[0].GPUs[0].UUID), nil
}
