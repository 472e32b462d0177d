package main

import (
	"context"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/podresources"
)

// podResourcesSource reads kubelet's PodResources API and folds its answer
// with podresources.Aggregate, the node binaries' one interpretation of it
// (kubelet lists one ContainerDevices entry per device ID).
func podResourcesSource(socket string) (identity.Source, func() error, error) {
	client, err := podresources.Dial(socket)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) ([]identity.Listing, error) {
		resp, err := client.List(ctx)
		if err != nil {
			return nil, err
		}
		var out []identity.Listing
		for _, pod := range podresources.Aggregate(resp) {
			for _, c := range pod.Containers {
				out = append(out, identity.Listing{
					Owner:   identity.Owner{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name},
					Devices: c.Devices,
				})
			}
		}
		return out, nil
	}, client.Close, nil
}
