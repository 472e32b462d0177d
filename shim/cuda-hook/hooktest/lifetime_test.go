package hooktest

import "testing"

// TestVMMMemoryLivesUntilReleasedAndUnmapped: a physical handle released while still
// mapped keeps its memory until the last unmap, and stays charged until then.
func TestVMMMemoryLivesUntilReleasedAndUnmapped(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 16 * MiB})
	p := c.ready("direct")
	p.ok("vmm h 0 8388608")
	p.ok("vareserve va 8388608")
	p.ok("map va h 8388608")
	p.ok("free h") // cuMemRelease while mapped: the usual pattern
	if got := c.usage().UsedBytes[0]; got != 8*MiB {
		t.Fatalf("released but mapped: charged %d, want %d", got, 8*MiB)
	}
	p.fails("alloc a 10485760", "CUDA_ERROR_OUT_OF_MEMORY")
	p.ok("unmap va 8388608")
	if got := c.usage().UsedBytes[0]; got != 0 {
		t.Fatalf("released and unmapped: charged %d", got)
	}
	p.ok("alloc a 10485760")
	p.ok("free a")
	// Unmapped first, released after: the release gives it back.
	p.ok("vmm h2 0 8388608")
	p.ok("map va h2 8388608")
	p.ok("unmap va 8388608")
	if got := c.usage().UsedBytes[0]; got != 8*MiB {
		t.Fatalf("unmapped but not released: charged %d", got)
	}
	p.ok("free h2")
	if got := c.usage().UsedBytes[0]; got != 0 {
		t.Fatalf("after release: charged %d", got)
	}
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
	if got := c.usage().UsedBytes[0]; got != 14*MiB {
		t.Fatalf("before destroying: charged %d", got)
	}
	p.ok("free own")
	if got := c.usage().UsedBytes[0]; got != 4*MiB {
		t.Fatalf("after cuCtxDestroy: charged %d, want only the primary context's 4 MiB", got)
	}
	p.ok("forget a")
	p.ok("forget arr")
	p.ok("ctx 0")
	p.ok("alloc b 8388608")
	p.ok("ctxreset 0")
	if got := c.usage().UsedBytes[0]; got != 0 {
		t.Fatalf("after cuDevicePrimaryCtxReset: charged %d", got)
	}
	p.ok("forget kept")
	p.ok("forget b")
	p.ok("ctx 0") // a reset drops every retain: retain twice again
	p.ok("ctx 0")
	p.ok("alloc d 8388608")
	p.ok("ctxrelease 0")
	if got := c.usage().UsedBytes[0]; got != 8*MiB {
		t.Fatalf("primary context still retained once: charged %d", got)
	}
	p.ok("ctxrelease 0")
	if got := c.usage().UsedBytes[0]; got != 0 {
		t.Fatalf("after the last cuDevicePrimaryCtxRelease: charged %d", got)
	}
	p.exit()
}
