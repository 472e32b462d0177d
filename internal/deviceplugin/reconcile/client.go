package reconcile

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Client is a Lister over kubelet's PodResources socket.
type Client struct {
	conn *grpc.ClientConn
	api  podresourcesapi.PodResourcesListerClient
}

// Dial connects lazily to the PodResources socket.
func Dial(socket string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("PodResources %s: %w", socket, err)
	}
	return &Client{conn: conn, api: podresourcesapi.NewPodResourcesListerClient(conn)}, nil
}

// List implements Lister.
func (c *Client) List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.api.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
