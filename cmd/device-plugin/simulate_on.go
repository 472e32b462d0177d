//go:build tessera_sim

package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// emptyPodResources is a kubelet with no pods.
type emptyPodResources struct{}

func (emptyPodResources) List(context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{}, nil
}

// simulatedEnvironment runs the real plugin code on go-nvml's mock of a DGX
// node with an in-memory API server: for benchmarks and demos without a GPU.
func simulatedEnvironment(model string, cfg *configv1.Config) (*environment, error) {
	node, err := gputest.New(model)
	if err != nil {
		return nil, err
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName}})
	return &environment{lib: node, client: client, podResources: emptyPodResources{}}, nil
}
