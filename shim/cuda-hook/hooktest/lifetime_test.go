package hooktest

import "testing"

// TestVMMMemoryLivesUntilReleasedAndUnmapped: a physical handle released while still
// mapped keeps its memory until the last unmap, and stays charged until then. A
// second cuMemRelease, which the driver refuses, does not undo the first.
func TestVMMMemoryLivesUntilReleasedAndUnmapped(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 16 * MiB})
	p := c.ready("direct")
	p.ok("vmm h 0 8388608")
	p.ok("vareserve va 8388608")
	p.ok("map va h 8388608")
	p.ok("release h") // cuMemRelease while mapped: the usual pattern
	p.fails("release h", "CUDA_ERROR_INVALID_VALUE")
	p.ok("forget h")
	c.wantUsed(8*MiB, "released (twice) but still mapped")
	p.fails("alloc a 10485760", "CUDA_ERROR_OUT_OF_MEMORY")
	p.ok("unmap va 8388608")
	c.wantUsed(0, "released and unmapped")
	p.ok("alloc a 10485760")
	p.ok("free a")
	// Unmapped first, released after: the release gives it back.
	p.ok("vmm h2 0 8388608")
	p.ok("map va h2 8388608")
	p.ok("unmap va 8388608")
	c.wantUsed(8*MiB, "unmapped but not released")
	p.ok("free h2")
	c.wantUsed(0, "after the release")
	p.exit()
}

// TestDestroyedContextsFreeTheirMemory: the driver frees everything made in a
// context when it is destroyed (cuCtxDestroy, the last primary release, a reset);
// so does the hook's accounting.
func TestDestroyedContextsFreeTheirMemory(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	p := c.ready("direct")
	p.ok("alloc kept 4194304") // in the primary context
	p.ok("ctxnew own 0")       // becomes current
	p.ok("alloc a 8388608")
	p.ok("array arr 1024 512 32 1")
	c.wantUsed(14*MiB, "before destroying the context")
	p.ok("free own")
	c.wantUsed(4*MiB, "after cuCtxDestroy (only the primary context's 4 MiB left)")
	p.ok("forget a")
	p.ok("forget arr")
	p.ok("ctx 0")
	p.ok("alloc b 8388608")
	p.ok("ctxreset 0")
	c.wantUsed(0, "after cuDevicePrimaryCtxReset")
	p.ok("forget kept")
	p.ok("forget b")
	p.ok("ctx 0") // a reset keeps the two retains: now three
	p.ok("alloc d 8388608")
	p.ok("ctxrelease 0")
	p.ok("ctxrelease 0")
	c.wantUsed(8*MiB, "primary context still retained once")
	p.ok("ctxrelease 0")
	c.wantUsed(0, "after the last cuDevicePrimaryCtxRelease")
	p.exit()
}

// TestPrimaryContextResetDoesNotReleaseIt: cuDevicePrimaryCtxReset frees everything
// made in the primary context but keeps every retain counted (as the driver
// documents); a later retain re-activates it, and its memory lives until the
// last release. The charges follow.
func TestPrimaryContextResetDoesNotReleaseIt(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 16 * MiB}, "TESSERA_CTX_RESERVE_MIB=1")
	p := c.ready("direct") // retained once
	p.ok("alloc a 4194304")
	c.wantUsed(5*MiB, "context reserve and one allocation")
	p.ok("ctxreset 0")
	c.wantUsed(0, "after the reset")
	p.ok("forget a")
	p.ok("ctx 0") // retained twice now: re-activated
	p.ok("alloc b 8388608")
	c.wantUsed(9*MiB, "re-activated context and an allocation")
	p.ok("ctxrelease 0") // one retain left: the context and b live on
	c.wantUsed(9*MiB, "after releasing one of two retains")
	p.fails("alloc x 8388608", "CUDA_ERROR_OUT_OF_MEMORY")
	p.ok("ctxrelease 0")
	c.wantUsed(0, "after the last release")
	p.ok("forget b")
	p.exit()
}
