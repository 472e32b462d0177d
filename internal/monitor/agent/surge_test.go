package agent

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
)

// runStoppable runs the agent until stop is called (or the test ends).
func runStoppable(t *testing.T, ag *Agent) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx, ln) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// TestTwoMonitorsOnOneNode: a DaemonSet rollout with surge runs two monitors
// on one state directory. Exactly one holds the node lease and reaps; both
// serve the containers' metrics; every dead slot is reaped once (the
// region's count and the monitors' counts agree); when the acting monitor
// stops, the standby takes over and reaps what dies next.
func TestTwoMonitorsOnOneNode(t *testing.T) {
	defer func(d time.Duration) { LeaseRetry = d }(LeaseRetry)
	LeaseRetry = 20 * time.Millisecond
	n := newNode(t)
	a := n.allocate("ns", "p", "c", map[int]uint64{0: 512 * MiB}, nil, true)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	live, err := hostproc.Read("/proc", uint32(sleeper.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	const dead = 8
	slots := []regiontest.Slot{{PID: live.NSPID, StartTime: live.StartTime, UsedBytes: map[int]uint64{0: 5 * MiB}}}
	for range dead {
		pid, start := deadProcess(t)
		slots = append(slots, regiontest.Slot{PID: pid, StartTime: start, UsedBytes: map[int]uint64{0: 1 * MiB}})
	}
	if err := regiontest.Write(a.region, regiontest.Contents{Slots: slots}); err != nil {
		t.Fatal(err)
	}

	agents := []*Agent{n.agentFor(quietLog(), nil), n.agentFor(quietLog(), nil)}
	urls := make([]string, 2)
	stops := make([]func(), 2)
	for i, ag := range agents {
		urls[i], stops[i] = runStoppable(t, ag)
	}
	total := func(name string, labels map[string]string) (sum float64, each []float64) {
		for _, u := range urls {
			v, _ := value(scrape(t, u), name, labels)
			sum += v
			each = append(each, v)
		}
		return sum, each
	}
	eventually(t, 30*time.Second, "every dead slot reaped", func() bool {
		v, _ := value(scrape(t, urls[0]), "tessera_container_reaped_processes_total", lbl(a.owner, ""))
		return v == dead
	})
	// Give a second reaper, were there one, every chance to count again.
	time.Sleep(200 * time.Millisecond)
	held, each := total("tessera_monitor_lease_held", nil)
	if held != 1 {
		t.Fatalf("lease held by %v monitors (%v), want exactly 1", held, each)
	}
	active := 0
	if each[1] == 1 {
		active = 1
	}
	standby := 1 - active
	if reaped, each := total("tessera_monitor_reaped_slots_total", nil); reaped != dead || each[standby] != 0 {
		t.Errorf("monitors reaped %v slots (%v), want %d, all by the lease holder", reaped, each, dead)
	}
	for i, u := range urls {
		fams := scrape(t, u)
		if v, _ := value(fams, "tessera_container_gpu_memory_used_bytes", lbl(a.owner, n.uuids[0])); v != 5*MiB {
			t.Errorf("monitor %d (active %v): container used %v, want 5 MiB", i, i == active, v)
		}
		if v, _ := value(fams, "tessera_container_reaped_processes_total", lbl(a.owner, "")); v != dead {
			t.Errorf("monitor %d: region counts %v reaped, want %d (once each)", i, v, dead)
		}
	}

	// The compute arbiter's process (arbiter.process, the default) runs
	// under the acting monitor only: a standby must not write grants.
	eventually(t, 30*time.Second, "the acting monitor's arbiter process", func() bool { return agents[active].ArbiterProcess.Pid() != 0 })
	if n := agents[standby].ArbiterProcess.Starts(); n != 0 {
		t.Errorf("the standby monitor started %d arbiter processes, want none", n)
	}
	arbiterPid := agents[active].ArbiterProcess.Pid()

	stops[active]() // the old pod ends: the standby takes over
	eventually(t, 30*time.Second, "standby takes the lease over", func() bool {
		v, _ := value(scrape(t, urls[standby]), "tessera_monitor_lease_held", nil)
		return v == 1
	})
	if processAlive(arbiterPid) {
		t.Errorf("the stopped monitor's arbiter process %d outlived it", arbiterPid)
	}
	eventually(t, 30*time.Second, "the new acting monitor's arbiter process", func() bool { return agents[standby].ArbiterProcess.Pid() != 0 })
	sleeper.Process.Kill()
	sleeper.Wait()
	eventually(t, 30*time.Second, "the new acting monitor reaps", func() bool {
		v, _ := value(scrape(t, urls[standby]), "tessera_container_reaped_processes_total", lbl(a.owner, ""))
		return v == dead+1
	})
	fams := scrape(t, urls[standby])
	if v, _ := value(fams, "tessera_monitor_reaped_slots_total", nil); v != 1 {
		t.Errorf("new acting monitor reaped %v slots, want 1", v)
	}
	if v, _ := value(fams, "tessera_container_reaped_bytes_total", lbl(a.owner, "")); v != dead*MiB+5*MiB {
		t.Errorf("reaped bytes %v, want %d", v, dead*MiB+5*MiB)
	}
}

// processAlive: pid exists and has not exited (a zombie has).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
