package hooktest

import (
	"fmt"
	"strings"
	"testing"
)

// allocAPI is one way to take device memory, and what one object costs.
type allocAPI struct {
	name  string
	setup []string // commands run once after the context is current
	alloc string   // format with the object's name
	bytes uint64
	trim  string // a pool keeps freed memory reserved until trimmed
}

func allocAPIs() []allocAPI {
	const s = 8 * MiB
	// Mipmapped 100x100 8-bit, 3 levels: 10000 + 2500 + 625 bytes, rounded up to 512
	// once (rounding each level would give 13824).
	const mip = 13312
	return []allocAPI{
		{name: "cuMemAlloc_v2", alloc: "alloc %s 8388608", bytes: s},
		{name: "cuMemAllocManaged", alloc: "managed %s 8388608", bytes: s},
		{name: "cuMemAllocPitch_v2", alloc: "pitch %s 4096 2048 4", bytes: s},
		{name: "cuMemAllocAsync", alloc: "async %s 8388608", bytes: s, trim: "pooltrim D 0",
			setup: []string{"defaultpool D 0"}},
		{name: "cuMemAllocFromPoolAsync", alloc: "poolalloc %s P 8388608", bytes: s, trim: "pooltrim P 0",
			setup: []string{"pool P 0"}},
		{name: "cuMemCreate", alloc: "vmm %s 0 8388608", bytes: s},
		{name: "cuArrayCreate_v2", alloc: "array %s 1024 512 32 4", bytes: s},
		{name: "cuArray3DCreate_v2", alloc: "array3d %s 256 256 8 32 4", bytes: s},
		// CU_AD_FORMAT_UNORM_INT8X4 (0xc2): a format beyond the eight classic ones.
		{name: "cuArray3DCreate_v2 UNORM_INT8X4", alloc: "array3d %s 1024 1024 2 0xc2 4", bytes: s},
		{name: "cuMipmappedArrayCreate", alloc: "mipmap %s 100 100 0 1 1 3", bytes: mip},
	}
}

// TestEveryAllocationAPIUnderAtAndOverTheCap: four objects fit exactly (the last one
// lands on the cap), the fifth is refused with CUDA_ERROR_OUT_OF_MEMORY and takes
// nothing, a free makes room for exactly one more, and freeing everything returns
// the container's usage to zero. Through the linked symbols, dlsym, and
// cuGetProcAddress with per-thread default streams (the _ptsz variants).
func TestEveryAllocationAPIUnderAtAndOverTheCap(t *testing.T) {
	n := newNode(t, "")
	for _, mode := range []string{"direct", "dlsym", "gpa-ptsz"} {
		for _, api := range allocAPIs() {
			t.Run(mode+"/"+api.name, func(t *testing.T) { underAtOver(t, n, mode, api) })
		}
	}
}

func underAtOver(t *testing.T, n *node, mode string, api allocAPI) {
	c := n.container(t, map[int]uint64{0: 4 * api.bytes})
	p := c.ready(mode)
	for _, s := range api.setup {
		p.ok(s)
	}
	for i := range 4 {
		p.ok(fmt.Sprintf(api.alloc, fmt.Sprint("o", i)))
	}
	c.wantUsed(4*api.bytes, "at the cap")
	p.fails(fmt.Sprintf(api.alloc, "over"), "CUDA_ERROR_OUT_OF_MEMORY")
	u := c.usage()
	if u.UsedBytes[0] != 4*api.bytes || u.Refused[0] == 0 {
		t.Fatalf("after the refusal: usage %d (want %d), refused %d", u.UsedBytes[0], 4*api.bytes, u.Refused[0])
	}
	p.ok("free o0")
	p.ok(fmt.Sprintf(api.alloc, "again"))
	p.fails(fmt.Sprintf(api.alloc, "over"), "CUDA_ERROR_OUT_OF_MEMORY")
	for _, o := range []string{"o1", "o2", "o3", "again"} {
		p.ok("free " + o)
	}
	if api.trim != "" {
		p.ok(api.trim)
	}
	c.wantUsed(0, "after freeing everything")
	p.exit()
}

// TestChargesMatchTheDriver: what the hook charges for each API is what the driver
// takes from the GPU (the simulated GPU's node-wide NVML view, read by a process
// without the hook).
func TestChargesMatchTheDriver(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 10 << 30})
	p := c.ready("direct")
	probe := n.run(t, nil, "direct", false)
	probe.ok("init")
	physical := func() uint64 { return fieldU(t, probe.ok("nvml 0"), "used") }
	for _, api := range allocAPIs() {
		for _, s := range api.setup {
			p.ok(s)
		}
		gpu, charged := physical(), c.usage().UsedBytes[0]
		p.ok(fmt.Sprintf(api.alloc, "x"))
		dGPU, dCharged := physical()-gpu, c.usage().UsedBytes[0]-charged
		if dGPU != dCharged || dCharged < api.bytes {
			t.Errorf("%s: the GPU lost %d bytes, the hook charged %d", api.name, dGPU, dCharged)
		}
		p.ok("free x")
		if api.trim != "" {
			p.ok(api.trim)
		}
	}
	c.checkUsed(0, "after freeing everything")
	p.exit()
	probe.exit()
}

// TestDoubleFreesChangeNothing: freeing an object a second time fails in the driver
// and gives nothing back twice; afterwards the cap can be filled exactly.
func TestDoubleFreesChangeNothing(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	p := c.ready("direct")
	for _, api := range allocAPIs() {
		for _, s := range api.setup {
			p.ok(s)
		}
		p.ok(fmt.Sprintf(api.alloc, "o"))
		p.ok("dup o again")
		p.ok("alloc keep 1048576")
		p.ok("free o")
		held := c.usage().UsedBytes[0]
		if out := p.do("free again"); !strings.HasPrefix(out, "err ") {
			t.Fatalf("%s: a second free: %q", api.name, out)
		}
		p.ok("forget again")
		c.wantUsed(held, api.name+": after the second free")
		p.ok("free keep")
		if api.trim != "" {
			p.ok(api.trim)
		}
		c.wantUsed(0, api.name+": after freeing everything")
	}
	if got := fieldU(t, p.ok("fill z 1048576"), "n"); got != 64 {
		t.Fatalf("after the double frees the container could fill %d MiB of its 64", got)
	}
	p.exit()
}
