//go:build tessera_sim

package main

import (
	"context"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// emptyPodResources is a kubelet with no pods.
type emptyPodResources struct{}

func (emptyPodResources) List(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{}, nil
}

// simulatedEnvironment runs the real plugin code on go-nvml's mock of a DGX
// node with an in-memory API server: for benchmarks and demos without a GPU.
// The GPU UUIDs follow the node name, so a restarted plugin advertises the
// same devices and kubelet does not count them twice.
func simulatedEnvironment(model string, cfg *configv1.Config) (*environment, error) {
	node, err := gputest.NewForNode(model, cfg.NodeName)
	if err != nil {
		return nil, err
	}
	return &environment{lib: node, client: kubefake.NewNode(cfg.NodeName), podResources: emptyPodResources{}}, nil
}
