// Package identitytest serves kubelet's PodResources List over a unix socket
// for tests, shaped as kubelet shapes it: one ContainerDevices entry per
// device ID (containerDevicesFromResourceDeviceInstances), in an order that
// is not sorted. Only List is implemented; the monitor uses nothing else.
package identitytest

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// Server is a PodResources List server.
type Server struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu       sync.Mutex
	listings []identity.Listing
}

// Serve listens on socket until the test ends.
func Serve(t testing.TB, socket string, listings []identity.Listing) *Server {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{listings: listings}
	gs := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(gs, s)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return s
}

// Set replaces what List answers.
func (s *Server) Set(listings []identity.Listing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listings = listings
}

// List answers one PodResources per listed container's pod, one entry per ID.
func (s *Server) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pods := map[[2]string]*podresourcesapi.PodResources{}
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for _, l := range s.listings {
		k := [2]string{l.Namespace, l.Pod}
		pr := pods[k]
		if pr == nil {
			pr = &podresourcesapi.PodResources{Namespace: l.Namespace, Name: l.Pod}
			pods[k] = pr
			resp.PodResources = append(resp.PodResources, pr)
		}
		c := &podresourcesapi.ContainerResources{Name: l.Container}
		for res, ids := range l.Devices {
			for i := len(ids) - 1; i >= 0; i-- { // kubelet's order is not sorted
				c.Devices = append(c.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: []string{ids[i]}})
			}
		}
		pr.Containers = append(pr.Containers, c)
	}
	return resp, nil
}
