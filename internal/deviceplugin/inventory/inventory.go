// Package inventory publishes the node's GPUs as the versioned JSON node
// annotation tessera.io/node-gpus, patching the Node only when the content
// changed (health flips, MIG reconfiguration, a new plugin version).
package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// Publisher writes the node annotation.
type Publisher struct {
	Client  kube.Client
	Node    string
	Manager *resource.Manager
	Log     *slog.Logger

	mu sync.Mutex // serialises Publish
}

// Build returns the inventory as the annotation value.
func Build(m *resource.Manager) (string, error) {
	inv := annotations.NodeGPUs{Version: annotations.Version, GPUs: []annotations.NodeGPU{}}
	for _, g := range m.GPUs() {
		ng := annotations.NodeGPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryBytes >> 20,
			SMCount: g.SMCount, NUMANode: g.NUMANode, NVLinkPeers: g.NVLinkPeers, MIGEnabled: g.MIGEnabled, Healthy: m.Healthy(g.UUID)}
		for _, mi := range g.MIG {
			ng.MIG = append(ng.MIG, annotations.MIGInstance{UUID: mi.UUID, Profile: mi.Profile, MemoryMiB: mi.MemoryMiB})
		}
		inv.GPUs = append(inv.GPUs, ng)
	}
	return annotations.Marshal(&inv)
}

// Publish patches the node if the inventory differs from what it carries.
// It reports whether it patched. It always compares with the Node as it
// is now, not with what was last written: a Node object deleted and
// registered again by kubelet comes back without the annotation.
func (p *Publisher) Publish(ctx context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	val, err := Build(p.Manager)
	if err != nil {
		return false, err
	}
	node, err := p.Client.GetNode(ctx, p.Node)
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", p.Node, err)
	}
	if node.Annotations[annotations.NodeGPUsKey] == val {
		return false, nil
	}
	if err := p.Client.AnnotateNode(ctx, p.Node, map[string]string{annotations.NodeGPUsKey: val}); err != nil {
		return false, fmt.Errorf("annotate node %s: %w", p.Node, err)
	}
	p.Log.Info("published node GPU inventory", "gpus", len(p.Manager.GPUs()))
	return true, nil
}

// Run publishes now, on every health change, and every period.
func (p *Publisher) Run(ctx context.Context, period time.Duration) {
	changed, cancel := p.Manager.Watch("inventory")
	defer cancel()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if _, err := p.Publish(ctx); err != nil {
			p.Log.Warn("node inventory not published; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}
