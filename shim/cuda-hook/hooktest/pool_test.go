package hooktest

import (
	"fmt"
	"testing"
)

// TestPoolsAreChargedForWhatTheyReserve: the simulated driver reserves pool memory
// in 32 MiB chunks and keeps freed memory until a synchronisation or a trim; the
// container is charged for the reservation, and a reservation that would pass the
// cap is undone and refused.
func TestPoolsAreChargedForWhatTheyReserve(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	p := c.ready("direct")
	p.ok("pool P 0")
	p.ok("poolalloc a P 8388608")
	if r := fieldU(t, p.ok("poolreserved P"), "reserved"); r != 32*MiB {
		t.Fatalf("pool reserves %d, the simulated driver should reserve a 32 MiB chunk", r)
	}
	c.wantUsed(32*MiB, "a pool reserving one 32 MiB chunk")
	p.ok("poolalloc b P 8388608") // served from the chunk: no new charge
	c.wantUsed(32*MiB, "a second allocation from the same chunk")
	p.ok("free a")
	p.ok("free b")
	c.wantUsed(32*MiB, "after frees (freed pool memory stays reserved until a sync)")
	p.ok("sync")
	c.wantUsed(0, "after the sync released the chunk")

	// A cap below one chunk: the pool would reserve past it.
	c.setCap(0, 20*MiB)
	p.fails("poolalloc c P 8388608", "CUDA_ERROR_OUT_OF_MEMORY")
	if r := fieldU(t, p.ok("poolreserved P"), "reserved"); r != 0 {
		t.Fatalf("the refused allocation left %d bytes reserved in the pool", r)
	}
	c.wantUsed(0, "after the refused allocation")
	p.fails("async d 8388608", "CUDA_ERROR_OUT_OF_MEMORY") // the default pool too
	c.setCap(0, 64*MiB)
	p.ok("async d 8388608")
	p.ok("free d")
	p.exit()
}

// TestPoolsBeyondTheTrackedOnesAreChargedPerAllocation: the hook follows the
// reservations of its first 256 pools; allocations from any further pool are
// charged what they hand out, and their frees give exactly that back.
func TestPoolsBeyondTheTrackedOnesAreChargedPerAllocation(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	p := c.ready("direct")
	for i := range 256 {
		p.ok(fmt.Sprintf("pool P%d 0", i))
	}
	p.ok("pool Q 0") // one more than the hook tracks
	p.ok("poolalloc a Q 8388608")
	c.wantUsed(8*MiB, "an allocation from an untracked pool")
	p.ok("free a")
	c.wantUsed(0, "after its free")
	p.ok("sync")
	c.wantUsed(0, "after a sync")
	p.exit()
}

// TestPoolChargeFollowsTheReservationUnderThreads: eight threads allocate from one
// pool at once, each allocation growing it, while four more read the memory view
// (which re-reads the reservation). Once they are done the container is charged
// exactly what the pool reserves: a reservation read before another thread's
// growth must never be applied after it (it was, and left gigabytes uncharged).
func TestPoolChargeFollowsTheReservationUnderThreads(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 100 << 30})
	p := c.ready("direct")
	p.ok("pool P 0")
	for round := range 400 {
		if f := fieldU(t, p.ok("poolrace P 8 32 33554432"), "failures"); f != 0 {
			t.Fatalf("round %d: %d allocations failed", round, f)
		}
		reserved := fieldU(t, p.ok("poolreserved P"), "reserved")
		if got := c.usage().UsedBytes[0]; got != reserved {
			t.Fatalf("round %d: the pool reserves %d bytes, the container is charged %d", round, reserved, got)
		}
		p.ok("poolracefree")
		p.ok("sync")
		c.wantUsed(0, "after freeing and a sync")
	}
	p.exit()
}

// TestPoolReleaseAtStreamSyncIsSeenOnEveryPath: a pool gives its free chunks back at
// a stream synchronisation, also the per-thread-default-stream one; the charge
// follows, so the memory can be allocated again at once.
func TestPoolReleaseAtStreamSyncIsSeenOnEveryPath(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	for _, mode := range []string{"direct", "dlsym", "gpa", "gpa-ptsz"} {
		p := c.ready(mode)
		p.ok("pool P 0")
		p.ok("poolalloc a P 8388608")
		p.ok("free a")
		c.wantUsed(32*MiB, mode+": freed pool memory stays reserved")
		p.ok("streamsync")
		if r := fieldU(t, p.ok("poolreserved P"), "reserved"); r != 0 {
			t.Fatalf("%s: the pool still reserves %d after a stream sync", mode, r)
		}
		c.wantUsed(0, mode+": after the stream sync released the chunk")
		p.ok("alloc b 67108864")
		p.ok("free b")
		p.exit()
	}
}
