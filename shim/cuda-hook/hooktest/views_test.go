package hooktest

import (
	"testing"
)

// TestMemoryViewsShowTheCap: cuMemGetInfo, cuDeviceTotalMem and NVML (both
// versions) report the cap as total and the cap minus the whole container's usage
// as free; a device the limits file does not list is passed through untouched.
func TestMemoryViewsShowTheCap(t *testing.T) {
	n := newNode(t, "NVIDIA H200:143771:132;NVIDIA H200:143771:132")
	c := n.container(t, map[int]uint64{0: 1024 * MiB})
	other := c.ready("direct") // a second process of the container holds 100 MiB
	other.ok("alloc x 104857600")

	for _, mode := range []string{"direct", "dlsym"} {
		p := c.ready(mode)
		p.ok("alloc a 209715200")
		info := p.ok("info")
		if fieldU(t, info, "total") != 1024*MiB || fieldU(t, info, "free") != 1024*MiB-300*MiB {
			t.Errorf("%s: cuMemGetInfo %s, want total=%d free=%d", mode, info, 1024*MiB, 724*MiB)
		}
		if tot := fieldU(t, p.ok("total 0"), "total"); tot != 1024*MiB {
			t.Errorf("%s: cuDeviceTotalMem %d", mode, tot)
		}
		nv := p.ok("nvml 0")
		for _, k := range []string{"total", "total2"} {
			if fieldU(t, nv, k) != 1024*MiB {
				t.Errorf("%s: nvml %s: %s", mode, k, nv)
			}
		}
		for _, k := range []string{"free", "free2"} {
			if fieldU(t, nv, k) != 724*MiB {
				t.Errorf("%s: nvml %s: %s", mode, k, nv)
			}
		}
		// Device 1 is not in the limits file: the container was given no memory
		// there. Its total is the physical truth, nothing is free, and
		// allocations are refused (never passed through uncapped).
		phys := uint64(143771) * MiB
		if tot := fieldU(t, p.ok("total 1"), "total"); tot != phys {
			t.Errorf("%s: unlisted device total %d, want %d", mode, tot, phys)
		}
		if nv1 := p.ok("nvml 1"); fieldU(t, nv1, "total") != phys || fieldU(t, nv1, "free") != 0 {
			t.Errorf("%s: unlisted device nvml %s", mode, nv1)
		}
		p.ok("ctx 1")
		if info1 := p.ok("info"); fieldU(t, info1, "total") != phys || fieldU(t, info1, "free") != 0 {
			t.Errorf("%s: unlisted device info %s", mode, info1)
		}
		p.fails("alloc big 1048576", "CUDA_ERROR_OUT_OF_MEMORY")
		p.exit()
	}
	other.exit()
}

// TestLimitChangedWhileRunning: the node side lowers and raises the cap in place;
// the running process obeys the new value at its next allocation.
func TestLimitChangedWhileRunning(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 100 * MiB})
	p := c.ready("direct")
	p.ok("alloc a 62914560") // 60 MiB
	c.setCap(0, 50*MiB)
	p.fails("alloc b 1048576", "CUDA_ERROR_OUT_OF_MEMORY")
	if info := p.ok("info"); fieldU(t, info, "total") != 50*MiB || fieldU(t, info, "free") != 0 {
		t.Fatalf("view after lowering: %s", info)
	}
	p.ok("free a")
	p.ok("alloc b 52428800") // exactly the new cap
	p.fails("alloc c 1", "CUDA_ERROR_OUT_OF_MEMORY")
	c.setCap(0, 200*MiB)
	p.ok("alloc c 157286400") // 150 MiB more: 200 in all
	if info := p.ok("info"); fieldU(t, info, "total") != 200*MiB || fieldU(t, info, "free") != 0 {
		t.Fatalf("view after raising: %s", info)
	}
	c.setCap(0, 0) // 0 = no cap on this device
	p.ok("alloc d 1073741824")
	p.exit()
}

// TestContextReservation: each context is charged TESSERA_CTX_RESERVE_MIB.
func TestContextReservation(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 250 * MiB}, "TESSERA_CTX_RESERVE_MIB=100")
	p := c.ready("direct")
	c.wantUsed(100*MiB, "after the primary context")
	p.fails("alloc a 167772160", "CUDA_ERROR_OUT_OF_MEMORY") // 160 MiB
	p.ok("alloc a 157286400")                                // 150 MiB: at the cap
	p.fails("ctxnew second 0", "CUDA_ERROR_OUT_OF_MEMORY")
	p.ok("free a")
	p.ok("ctxnew second 0")
	c.wantUsed(200*MiB, "with two contexts")
	p.ok("free second")
	p.ok("ctxrelease 0")
	c.wantUsed(0, "after releasing both contexts")
	p.exit()
}
