package kwoknodes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

func TestNodeCarriesThePluginsInventoryAndCapacity(t *testing.T) {
	n, err := NodeSpec{Name: "gpu-0", Model: H100SXM, GPUs: 8}.Node(configv1.Default())
	if err != nil {
		t.Fatal(err)
	}
	inv, err := annotations.ParseNodeGPUs(n.Annotations[annotations.NodeGPUsKey])
	if err != nil {
		t.Fatalf("inventory annotation: %v", err)
	}
	if len(inv.GPUs) != 8 {
		t.Fatalf("%d GPUs in the inventory, want 8", len(inv.GPUs))
	}
	for i, g := range inv.GPUs {
		if g.Index != i || g.Model != H100SXM.Name || g.MemoryMiB != H100SXM.MemoryMiB || !g.Healthy || len(g.NVLinkPeers) != 7 {
			t.Errorf("GPU %d: %+v", i, g)
		}
		if want := i / 4; g.NUMANode != want {
			t.Errorf("GPU %d on NUMA node %d, want %d", i, g.NUMANode, want)
		}
	}
	// Shipped sizing: 10 slots, 1 GiB memory units, 100 core percent per GPU.
	want := map[corev1.ResourceName]int64{
		"tessera.io/gpu":      8 * 10,
		"tessera.io/gpu-mem":  8 * (81559 / 1024),
		"tessera.io/gpu-core": 8 * 100,
	}
	for r, v := range want {
		c, a := n.Status.Capacity[r], n.Status.Allocatable[r]
		if c.Value() != v || a.Value() != v {
			t.Errorf("%s: capacity %s, allocatable %s, want %d", r, c.String(), a.String(), v)
		}
	}
	if n.Annotations[ManagedAnnotation] != ManagedValue {
		t.Errorf("node not marked for kwok: %v", n.Annotations)
	}
}

func TestGPUUUIDsFollowTheNodeName(t *testing.T) {
	a := NodeSpec{Name: "a", Model: L4, GPUs: 4}.Devices()
	a2 := NodeSpec{Name: "a", Model: L4, GPUs: 4}.Devices()
	b := NodeSpec{Name: "b", Model: L4, GPUs: 4}.Devices()
	seen := map[string]bool{}
	for i := range a {
		if a[i].UUID != a2[i].UUID {
			t.Errorf("GPU %d of node a: %s then %s", i, a[i].UUID, a2[i].UUID)
		}
		for _, u := range []string{a[i].UUID, b[i].UUID} {
			if seen[u] {
				t.Errorf("UUID %s twice", u)
			}
			seen[u] = true
		}
	}
}

func TestMixedNodesMixModels(t *testing.T) {
	specs := MixedNodes("gpu", 20)
	models := map[string]bool{}
	for _, s := range specs {
		models[s.Model.Name] = true
		if _, err := s.Node(configv1.Default()); err != nil {
			t.Fatal(err)
		}
	}
	if len(specs) != 20 || len(models) < 4 {
		t.Fatalf("%d nodes of %d models", len(specs), len(models))
	}
	if specs[0].Name != "gpu-0000" || specs[19].Name != "gpu-0019" {
		t.Fatalf("names %s … %s", specs[0].Name, specs[19].Name)
	}
}
