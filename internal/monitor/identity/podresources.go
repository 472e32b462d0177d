package identity

import (
	"context"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/internal/podresources"
)

// Lister is the part of kubelet's PodResources API read here.
type Lister interface {
	List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error)
}

// FromPodResources is a Source over kubelet's PodResources List, folded with
// podresources.Aggregate, the node binaries' one interpretation of it
// (kubelet lists one ContainerDevices entry per device ID).
func FromPodResources(l Lister) Source {
	return func(ctx context.Context) ([]Listing, error) {
		resp, err := l.List(ctx)
		if err != nil {
			return nil, err
		}
		var out []Listing
		for _, pod := range podresources.Aggregate(resp) {
			for _, c := range pod.Containers {
				out = append(out, Listing{Owner: Owner{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name}, Devices: c.Devices})
			}
		}
		return out, nil
	}
}
