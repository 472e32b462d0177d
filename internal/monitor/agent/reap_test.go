package agent

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
)

// start runs the agent's loops and server on loopback until the test ends.
func start(t *testing.T, ag *Agent) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx, ln) }()
	t.Cleanup(func() { // registered after openGPUs: runs before NVML shuts down
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestKilledProcessReapedAndDeletedContainerVanishes: a SIGKILLed process's
// bytes come back to its container; once the container is gone from
// PodResources and its last process dies, its series vanish and its slots are
// reaped.
func TestKilledProcessReapedAndDeletedContainerVanishes(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns", "train", "worker", map[int]uint64{0: 256 * MiB}, nil, true)
	other := n.allocate("ns", "serve", "api", map[int]uint64{0: 128 * MiB}, nil, true)
	keep := n.run(a.env, true)
	keep.ok("init")
	keep.ok("ctx 0")
	keep.ok("alloc x 67108864")
	victim := n.run(a.env, true)
	victim.ok("init")
	victim.ok("ctx 0")
	victim.ok("alloc y 33554432")
	po := n.run(other.env, true)
	po.ok("init")
	po.ok("ctx 0")
	po.ok("alloc z 1048576")

	g := n.openGPUs()
	ag := n.agentFor(quietLog(), g)
	url := start(t, ag)
	used := func() (float64, bool) {
		return value(scrape(t, url), "tessera_container_gpu_memory_used_bytes", lbl(a.owner, n.uuids[0]))
	}
	if v, _ := used(); v != 96*MiB {
		t.Fatalf("used %v before the kill, want 96 MiB", v)
	}
	victim.kill()
	eventually(t, 30*time.Second, "the killed process's 32 MiB reaped", func() bool {
		v, ok := used()
		return ok && v == 64*MiB
	})
	// The reaper clears the slot first and counts it after, so a scrape in
	// between sees the bytes back and the counters not yet moved.
	want := map[string]float64{"tessera_monitor_reaped_slots_total": 1, "tessera_monitor_reaped_bytes_total": 32 * MiB}
	eventually(t, 30*time.Second, "the reap counted once", func() bool {
		fams := scrape(t, url)
		for name, w := range want {
			if v, ok := value(fams, name, nil); !ok || v != w {
				return false
			}
		}
		return true
	})
	fams := scrape(t, url)
	for name, w := range want {
		if v, ok := value(fams, name, nil); !ok || v != w {
			t.Errorf("%s = %v (%v), want %v", name, v, ok, w)
		}
	}
	if v, _ := value(fams, "tessera_container_reaped_processes_total", lbl(a.owner, "")); v != 1 {
		t.Errorf("container's reaped processes %v, want 1", v)
	}

	// The pod is deleted: kubelet stops listing it, its last process dies.
	n.unlist(a)
	keep.kill()
	eventually(t, 30*time.Second, "the deleted container's series gone", func() bool {
		return series(scrape(t, url), a.owner) == 0
	})
	eventually(t, 30*time.Second, "the deleted container's last slot reaped", func() bool {
		r, err := region.OpenRegion(a.region)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return len(r.Usage().Procs) == 0 && r.Usage().UsedBytes[0] == 0
	})
	if got := series(scrape(t, url), other.owner); got == 0 {
		t.Error("the other container's series vanished too")
	}
	if v, _ := value(scrape(t, url), "tessera_container_gpu_memory_used_bytes", lbl(other.owner, n.uuids[0])); v != 1*MiB {
		t.Errorf("other container: used %v, want 1 MiB (a live process reaped?)", v)
	}
}

// deadProcess returns the pid and start time of a process that has exited.
func deadProcess(t *testing.T) (uint32, uint64) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	p, err := hostproc.Read("/proc", pid)
	start := p.StartTime
	if err != nil {
		start = 12345
	}
	cmd.Wait()
	return pid, start
}

// TestRestartLosesNothingAndReapsNothingTwice: a monitor killed in the middle
// of a reap leaves a slot marked TESSERA_REAPER_NODE; the next monitor
// finishes it exactly once, counts survive in the region, and a live
// process's slot is never touched.
func TestRestartLosesNothingAndReapsNothingTwice(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns", "p", "c", map[int]uint64{0: 256 * MiB}, nil, true)
	self, err := hostproc.Read("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	deadPID, deadStart := deadProcess(t)
	err = regiontest.Write(a.region, regiontest.Contents{Slots: []regiontest.Slot{
		{PID: self.NSPID, StartTime: self.StartTime, UsedBytes: map[int]uint64{0: 10 * MiB}},
		{PID: deadPID, StartTime: deadStart, UsedBytes: map[int]uint64{0: 20 * MiB}},
		{PID: 999999, StartTime: 1, UsedBytes: map[int]uint64{0: 30 * MiB}}, // the interrupted reap
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := regiontest.MarkReaping(a.region, 2); err != nil {
		t.Fatal(err)
	}
	first := n.agentFor(quietLog(), nil)
	if ok, err := first.Lease.TryAcquire(); !ok || err != nil {
		t.Fatalf("node lease: %v %v", ok, err)
	}
	procs, bytes, err := first.Reaper.Once()
	if err != nil || procs != 2 || bytes != 50*MiB {
		t.Fatalf("first monitor reaped %d slots, %d bytes (%v); want 2, 50 MiB", procs, bytes, err)
	}
	// Restart: a new monitor over the same files.
	first.Lease.Release() // as the kernel does when a monitor exits
	second := n.agentFor(quietLog(), nil)
	if ok, err := second.Lease.TryAcquire(); !ok || err != nil {
		t.Fatalf("node lease after restart: %v %v", ok, err)
	}
	if procs, bytes, _ := second.Reaper.Once(); procs != 0 || bytes != 0 {
		t.Fatalf("restarted monitor reaped %d slots, %d bytes again", procs, bytes)
	}
	fams := scrape(t, serve(t, second))
	for name, want := range map[string]float64{
		"tessera_container_reaped_processes_total": 2,
		"tessera_container_reaped_bytes_total":     50 * MiB,
		"tessera_container_processes":              1,
	} {
		if v, ok := value(fams, name, lbl(a.owner, "")); !ok || v != want {
			t.Errorf("after restart %s = %v (%v), want %v", name, v, ok, want)
		}
	}
	if v, _ := value(fams, "tessera_container_gpu_memory_used_bytes", lbl(a.owner, n.uuids[0])); v != 10*MiB {
		t.Errorf("live slot: used %v, want 10 MiB", v)
	}
}
