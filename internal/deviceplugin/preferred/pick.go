package preferred

import (
	"sort"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// pool is the free IDs of one resource, per GPU, GPUs in index order.
type pool struct {
	order []string
	free  map[string][]resource.ID
}

// only restricts the pool to gpus; the result can be taken from without
// changing p.
func (p *pool) only(gpus []string) *pool {
	keep := map[string]bool{}
	for _, g := range gpus {
		keep[g] = true
	}
	out := &pool{free: map[string][]resource.ID{}}
	for _, g := range p.order {
		if keep[g] {
			out.order = append(out.order, g)
			out.free[g] = p.free[g]
		}
	}
	return out
}

// clone is a copy that can be taken from without changing p.
func (p *pool) clone() *pool { return p.only(p.order) }

// atLeast restricts the pool to GPUs with at least n free IDs.
func (p *pool) atLeast(n int) *pool {
	var gpus []string
	for _, g := range p.order {
		if len(p.free[g]) >= n {
			gpus = append(gpus, g)
		}
	}
	return p.only(gpus)
}

// take removes and returns up to n IDs of gpu, mustInclude IDs first.
func (p *pool) take(gpu string, n int, must []resource.ID) []string {
	var out []string
	var rest []resource.ID
	first := map[string]bool{}
	for _, m := range must {
		if m.GPU == gpu {
			first[m.String()] = true
		}
	}
	for _, id := range p.free[gpu] {
		if len(out) < n && first[id.String()] {
			out = append(out, id.String())
		} else {
			rest = append(rest, id)
		}
	}
	var left []resource.ID
	for _, id := range rest {
		if len(out) < n {
			out = append(out, id.String())
		} else {
			left = append(left, id)
		}
	}
	p.free[gpu] = left
	return out
}

// ranked orders GPUs for placement: GPUs holding mustInclude IDs first,
// then by policy (binpack: least free first; spread: most free first),
// then by index.
func (p *pool) ranked(policy string, must []resource.ID) []string {
	pinned := map[string]bool{}
	for _, m := range must {
		pinned[m.GPU] = true
	}
	out := append([]string(nil), p.order...)
	sort.SliceStable(out, func(a, b int) bool {
		ga, gb := out[a], out[b]
		if pinned[ga] != pinned[gb] {
			return pinned[ga]
		}
		fa, fb := len(p.free[ga]), len(p.free[gb])
		if policy == configv1.PlacementSpread {
			return fa > fb
		}
		return fa < fb
	})
	return out
}

// pickLocal places a request with no assignment.
func pickLocal(kind resource.Kind, p *pool, must []resource.ID, size int, policy string, topo gpuallocator.DeviceList) []string {
	switch kind {
	case resource.KindMIG:
		return pickSpill(p, p.order, must, size)
	case resource.KindSlot:
		if size > 1 {
			return pickSlots(p, must, size, policy, topo)
		}
	}
	ranked := p.ranked(policy, must)
	// gpu-mem and gpu-core without gpu mean one GPU: the first ranked GPU
	// that fits the whole request.
	for _, g := range ranked {
		if len(p.free[g]) >= size && coversMust(g, must) {
			return p.take(g, size, must)
		}
	}
	// Nothing fits on one GPU: spill in rank order. The caller drops the
	// answer when the container may not use that many GPUs.
	return pickSpill(p, ranked, must, size)
}

func coversMust(gpu string, must []resource.ID) bool {
	for _, m := range must {
		if m.GPU != gpu {
			return false
		}
	}
	return true
}

func pickSpill(p *pool, order []string, must []resource.ID, size int) []string {
	var out []string
	for _, g := range order {
		if len(out) == size {
			break
		}
		out = append(out, p.take(g, size-len(out), must)...)
	}
	return out
}

// pickSlots places a multi-GPU `gpu` request: one slot on each of size
// distinct GPUs, chosen by go-gpuallocator's best-effort policy when the
// topology is known.
func pickSlots(p *pool, must []resource.ID, size int, policy string, topo gpuallocator.DeviceList) []string {
	gpus := chooseGPUs(p, gpuSet(must), size, policy, topo)
	if len(gpus) < size {
		return nil
	}
	var out []string
	for _, g := range gpus {
		out = append(out, p.take(g, 1, must)...)
	}
	return out
}

// chooseGPUs picks size GPUs that have free IDs, including required.
func chooseGPUs(p *pool, required []string, size int, policy string, topo gpuallocator.DeviceList) []string {
	pinned := map[string]bool{}
	for _, g := range required {
		pinned[g] = true
	}
	if len(topo) > 0 {
		var avail, req []*gpuallocator.Device
		for _, d := range topo {
			if len(p.free[d.UUID]) == 0 {
				continue
			}
			avail = append(avail, d)
			if pinned[d.UUID] {
				req = append(req, d)
			}
		}
		if chosen := gpuallocator.NewBestEffortPolicy().Allocate(avail, req, size); len(chosen) == size {
			out := make([]string, 0, size)
			for _, d := range chosen {
				out = append(out, d.UUID)
			}
			return out
		}
	}
	// Without topology: required GPUs first, then by policy.
	ranked := p.ranked(policy, nil)
	sort.SliceStable(ranked, func(a, b int) bool { return pinned[ranked[a]] && !pinned[ranked[b]] })
	if len(ranked) > size {
		ranked = ranked[:size]
	}
	return ranked
}

// gpuSet returns the distinct GPUs of ids.
func gpuSet(ids []resource.ID) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id.GPU] {
			seen[id.GPU] = true
			out = append(out, id.GPU)
		}
	}
	return out
}

// takeEven takes size IDs spread evenly over gpus (the first GPUs get the
// remainder); nil unless every GPU has its share.
func takeEven(p *pool, gpus []string, size int, must []resource.ID) []string {
	if len(gpus) == 0 {
		return nil
	}
	var out []string
	for i, g := range gpus {
		n := size / len(gpus)
		if i < size%len(gpus) {
			n++
		}
		got := p.take(g, n, must)
		if len(got) < n {
			return nil
		}
		out = append(out, got...)
	}
	return out
}
