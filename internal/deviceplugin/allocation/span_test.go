package allocation

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// requesting is a container's tessera.io/gpu request as CheckSpan asks for it.
func requesting(n int) func() int { return func() int { return n } }

func unitIDs(gpu, kind string, from, n int) []string {
	out := make([]string, 0, n)
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf("%s::%s::%d", gpu, kind, i))
	}
	return out
}

// TestSpreadOfASingleGPURequestIsRefused: gpu-mem IDs on two GPUs for a
// container without tessera.io/gpu are refused, and the error names the
// request, how it would be split, and the largest GPU.
func TestSpreadOfASingleGPURequestIsRefused(t *testing.T) {
	b, gpus := builder(t)
	largest := b.Manager.Capacity(resource.Memory, gpus[0].UUID)
	ids := append(unitIDs(gpus[0].UUID, "mem", 0, largest), unitIDs(gpus[1].UUID, "mem", 0, 10)...)
	err := b.CheckSpan(resource.Memory, ids, requesting(0))
	if err == nil {
		t.Fatal("a spread single-GPU request was accepted")
	}
	for _, want := range []string{resource.Memory, fmt.Sprintf("%d units", len(ids)), "for one GPU", "2 GPUs",
		fmt.Sprintf("largest GPU on this node, %s, holds %d units", gpus[0].UUID, largest), "allowGPUSpill", resource.GPU + ": 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	// Compute is one GPU's too.
	core := append(unitIDs(gpus[2].UUID, "core", 0, 60), unitIDs(gpus[3].UUID, "core", 0, 50)...)
	if err := b.CheckSpan(resource.Core, core, requesting(0)); err == nil || !strings.Contains(err.Error(), "110 units") {
		t.Fatalf("spread gpu-core: %v", err)
	}
	// A request with tessera.io/gpu: 2 may span two GPUs but not three.
	if err := b.CheckSpan(resource.Memory, ids, requesting(2)); err != nil {
		t.Fatalf("gpu: 2 container refused: %v", err)
	}
	three := append(ids, gpus[4].UUID+"::mem::0")
	if err := b.CheckSpan(resource.Memory, three, requesting(2)); err == nil || !strings.Contains(err.Error(), "for 2 GPUs") {
		t.Fatalf("three GPUs for gpu: 2: %v", err)
	}
}

func TestSpanAcceptedWhereItIsNoSpread(t *testing.T) {
	b, gpus := builder(t)
	if err := b.CheckSpan(resource.Memory, unitIDs(gpus[0].UUID, "mem", 0, 8), requesting(0)); err != nil {
		t.Fatalf("one GPU refused: %v", err)
	}
	slots := []string{gpus[0].UUID + "::gpu::0", gpus[1].UUID + "::gpu::0"}
	if err := b.CheckSpan(resource.GPU, slots, requesting(0)); err != nil {
		t.Fatalf("slots refused: %v", err)
	}
	b.AllowGPUSpill = true
	ids := append(unitIDs(gpus[0].UUID, "mem", 0, 8), unitIDs(gpus[1].UUID, "mem", 0, 8)...)
	if err := b.CheckSpan(resource.Memory, ids, requesting(0)); err != nil {
		t.Fatalf("allowGPUSpill: %v", err)
	}
}
