package main

import (
	"fmt"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/monitor/events"
)

// eventRecorder returns client-go's event recorder writing to the API server
// of kubeconfig (empty: in-cluster), through the same core/v1-only client
// the device plugin uses.
func eventRecorder(kubeconfig, node string) (*events.Recorder, error) {
	client, err := kube.NewFromKubeconfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes API: %w", err)
	}
	return events.New(events.RESTSink(client.RESTClient()), node), nil
}
