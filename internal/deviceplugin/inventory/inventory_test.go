package inventory

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube/kubefake"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// recreatedNode is an API server whose Node object was deleted and
// registered again by kubelet: it comes back without annotations.
type recreatedNode struct {
	*kubefake.Client
	mu      sync.Mutex
	wiped   bool
	patches int
}

func (c *recreatedNode) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := c.Client.GetNode(ctx, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.wiped {
		n.Annotations = nil
	}
	return n, err
}

func (c *recreatedNode) AnnotateNode(ctx context.Context, name string, a map[string]string) error {
	c.mu.Lock()
	c.wiped = false
	c.patches++
	c.mu.Unlock()
	return c.Client.AnnotateNode(ctx, name, a)
}

// TestRepublishedAfterNodeRecreated: the periodic publish compares with
// the Node as it is, so an inventory lost with a re-created Node object
// comes back without waiting for a GPU change.
func TestRepublishedAfterNodeRecreated(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gpus, err := gpu.Discover(gputest.MustNew(gputest.DGXH100), log)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(gpus, resource.Options{SplitCount: 10, MemoryUnit: 1 << 30})
	client := &recreatedNode{Client: kubefake.NewNode("n")}
	p := &Publisher{Client: client, Node: "n", Manager: m, Log: log}
	for i, want := range []bool{true, false} {
		if patched, err := p.Publish(context.Background()); err != nil || patched != want {
			t.Fatalf("publish %d: patched %v, %v; want %v", i, patched, err, want)
		}
	}
	client.mu.Lock()
	client.wiped = true
	client.mu.Unlock()
	if patched, err := p.Publish(context.Background()); err != nil || !patched {
		t.Fatalf("inventory not restored on a re-created Node: patched %v, %v", patched, err)
	}
	n, _ := client.GetNode(context.Background(), "n")
	if _, err := annotations.ParseNodeGPUs(n.Annotations[annotations.NodeGPUsKey]); err != nil {
		t.Fatal(err)
	}
	if client.patches != 2 {
		t.Fatalf("%d patches, want 2 (only on change)", client.patches)
	}
}
