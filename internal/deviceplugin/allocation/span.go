package allocation

import (
	"fmt"
	"strings"

	apiresource "k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// CheckSpan refuses gpu-mem and gpu-core IDs that lie on more GPUs than the
// container asked for: requestedGPUs returns its tessera.io/gpu request, 0
// when it has none or the container is not known, which means one GPU; it
// is called only for IDs on several GPUs (finding the container may wait
// for the pod informer). Kubelet
// hands out any free IDs when the preferred allocation is short, so without
// this a request larger than every GPU (or than every GPU's free part)
// reaches a single-GPU program as units of two GPUs. With AllowGPUSpill the
// spread is accepted. The error names the request and the largest GPU;
// kubelet shows it as the pod's admission error.
func (b *Builder) CheckSpan(res string, ids []string, requestedGPUs func() int) error {
	kind, ok := resource.KindOf(res)
	if !ok || b.AllowGPUSpill || (kind != resource.KindMem && kind != resource.KindCore) {
		return nil
	}
	shares, err := b.Manager.Shares(res, ids)
	if err != nil {
		return fmt.Errorf("%s: %w", res, err)
	}
	if len(shares) <= 1 {
		return nil
	}
	requested := requestedGPUs()
	if len(shares) <= max(1, requested) {
		return nil
	}
	return fmt.Errorf("%s: %s requested for %s would be spread over %d GPUs (%s); the largest GPU on this node, %s; "+
		"request %s: %d for a container that uses several GPUs, or set allowGPUSpill: true in the device plugin config",
		res, b.units(kind, len(ids)), forGPUs(requested), len(shares), b.perGPU(kind, shares),
		b.largestGPU(res, kind), resource.GPU, len(shares))
}

func forGPUs(requested int) string {
	if requested <= 1 {
		return "one GPU"
	}
	return fmt.Sprintf("%d GPUs (%s: %d)", requested, resource.GPU, requested)
}

// units writes n IDs of kind with what they amount to.
func (b *Builder) units(kind resource.Kind, n int) string {
	switch kind {
	case resource.KindMem:
		bytes := apiresource.NewQuantity(int64(n)*int64(b.Manager.Options().MemoryUnit), apiresource.BinarySI)
		return fmt.Sprintf("%d units (%s)", n, bytes)
	case resource.KindCore:
		return fmt.Sprintf("%d units (%d%% of one GPU's compute)", n, n)
	}
	return fmt.Sprintf("%d units", n)
}

func (b *Builder) perGPU(kind resource.Kind, shares []resource.Share) string {
	parts := make([]string, 0, len(shares))
	for _, s := range shares {
		n := s.CorePct
		if kind == resource.KindMem {
			n = int(s.MemBytes / b.Manager.Options().MemoryUnit)
		}
		parts = append(parts, fmt.Sprintf("%s: %d", s.GPU, n))
	}
	return strings.Join(parts, ", ")
}

// largestGPU describes the GPU advertising the most IDs of res (the lowest
// index among equals).
func (b *Builder) largestGPU(res string, kind resource.Kind) string {
	best, most := "", -1
	for _, g := range b.Manager.GPUs() {
		if n := b.Manager.Capacity(res, g.UUID); n > most {
			best, most = g.UUID, n
		}
	}
	return fmt.Sprintf("%s, holds %s", best, b.units(kind, most))
}
