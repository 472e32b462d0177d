package main

import (
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/podresources"
)

// podResourcesSource reads kubelet's PodResources socket.
func podResourcesSource(socket string) (identity.Source, func() error, error) {
	client, err := podresources.Dial(socket)
	if err != nil {
		return nil, nil, err
	}
	return identity.FromPodResources(client), client.Close, nil
}
