package hooktest

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/region"
)

// TestForkChildClaimsItsOwnSlot: a fork()ed child charges its own slot against the
// shared cap (the parent's usage counts against it), and after it dies its usage is
// reclaimed while the parent's stays exact.
func TestForkChildClaimsItsOwnSlot(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 100 * MiB})
	p := c.ready("direct")
	p.ok("alloc a 62914560") // 60 MiB
	if out := p.ok("fork 62914560"); field(t, out, "child") != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("child over the shared cap: %s", out)
	}
	p.ok("forkend")
	out := p.ok("fork 31457280") // 30 MiB fits
	if field(t, out, "child") != "CUDA_SUCCESS" {
		t.Fatalf("child under the cap: %s", out)
	}
	child, _ := strconv.ParseUint(field(t, out, "pid"), 10, 32)
	u := c.usage()
	if slotBytes(u, p.pid(), 0) != 60*MiB || slotBytes(u, uint32(child), 0) != 30*MiB {
		t.Fatalf("slots while the child runs: %+v", u.Procs)
	}
	p.fails("alloc b 20971520", "CUDA_ERROR_OUT_OF_MEMORY") // 60+30+20 > 100
	p.ok("forkend")
	p.ok("alloc b 41943040") // the child is gone: 60+40 = 100 exactly
	if u := c.usage(); u.UsedBytes[0] != 100*MiB || slotBytes(u, p.pid(), 0) != 100*MiB {
		t.Fatalf("after the child exited: %+v", u)
	}
	p.exit()
}

// TestGoMirrorReadsTheCRegion: internal/region reads what the C side wrote: the
// owner's pid and start time, per-device bytes, the peak and refusal counters.
func TestGoMirrorReadsTheCRegion(t *testing.T) {
	n := newNode(t, "NVIDIA H200:143771:132;NVIDIA H200:143771:132")
	c := n.container(t, map[int]uint64{0: 64 * MiB, 1: 32 * MiB})
	p := c.ready("direct")
	p.ok("alloc a 10485760")
	p.ok("alloc b 5242880")
	p.ok("ctx 1")
	p.ok("alloc c 33554432")
	p.fails("alloc d 1", "CUDA_ERROR_OUT_OF_MEMORY")
	u := c.usage()
	if len(u.Procs) != 1 {
		t.Fatalf("procs %+v", u.Procs)
	}
	pr := u.Procs[0]
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(int(p.pid())) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	if pr.PID != p.pid() || pr.StartTime != start {
		t.Fatalf("slot owner pid %d start %d, want %d %d", pr.PID, pr.StartTime, p.pid(), start)
	}
	if pr.UsedBytes[0] != 15*MiB || pr.UsedBytes[1] != 32*MiB || u.UsedBytes[1] != 32*MiB {
		t.Fatalf("bytes %v", pr.UsedBytes[:2])
	}
	if u.PeakBytes[0] != 15*MiB || u.PeakBytes[1] != 32*MiB || u.Refused[1] != 1 || u.Refused[0] != 0 {
		t.Fatalf("peak %v refused %v", u.PeakBytes[:2], u.Refused[:2])
	}
	// The node reaper leaves a live process alone.
	r, err := region.OpenRegion(c.region)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if procs, _ := r.Reap(region.ProcessAlive); procs != 0 {
		t.Fatalf("reaped %d live processes", procs)
	}
	p.exit()
	if u := c.usage(); len(u.Procs) != 0 || u.UsedBytes[0] != 0 {
		t.Fatalf("a clean exit left %+v", u)
	}
}

// TestExecTakesOverItsSlot: exec() keeps the pid and start time; the driver freed
// the old image's memory, and the new image takes the slot over, zeroed, at its
// first charge.
func TestExecTakesOverItsSlot(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 64 * MiB})
	p := c.ready("direct")
	p.ok("alloc a 41943040") // 40 MiB
	p.ok("exec")
	p.ok("init")
	p.ok("ctx 0")
	p.ok("alloc b 52428800") // 50 MiB: fits only if the old image's 40 MiB are gone
	u := c.usage()
	if len(u.Procs) != 1 || u.Procs[0].PID != p.pid() || u.UsedBytes[0] != 50*MiB {
		t.Fatalf("after exec: %+v", u)
	}
	p.exit()
}

// TestChildWithoutForkHandlersLeavesTheParentsSlot: a child made by the raw clone
// system call skips pthread_atfork and inherits the parent's idea of its slot; its
// exit() must not hand the parent's slot back (that would drop the parent's usage).
func TestChildWithoutForkHandlersLeavesTheParentsSlot(t *testing.T) {
	n := newNode(t, "")
	c := n.container(t, map[int]uint64{0: 16 * MiB})
	p := c.ready("direct")
	p.ok("alloc a 8388608")
	p.ok("cloneexit")
	c.wantUsed(8*MiB, "after a raw-clone child exited")
	p.fails("alloc b 16777216", "CUDA_ERROR_OUT_OF_MEMORY")
	p.ok("free a")
	c.wantUsed(0, "after the free")
	p.exit()
}
