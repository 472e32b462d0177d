package podresources

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// listTimeout bounds one List call; kubelet answers from memory.
const listTimeout = 10 * time.Second

// Lister is the part of kubelet's PodResources API the node binaries use.
// Its answer is raw (one entry per device ID and NUMA node); read it
// through Aggregate.
type Lister interface {
	List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error)
}

// Client is a Lister over kubelet's PodResources socket.
type Client struct {
	conn *grpc.ClientConn
	api  podresourcesapi.PodResourcesListerClient
}

// Dial connects lazily to the PodResources socket: kubelet may not be
// serving yet, and each List reconnects if it went away.
func Dial(socket string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("PodResources socket %s: %w", socket, err)
	}
	return &Client{conn: conn, api: podresourcesapi.NewPodResourcesListerClient(conn)}, nil
}

// List implements Lister.
func (c *Client) List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	return c.api.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
