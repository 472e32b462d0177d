package fakegpu_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// Simulated GPU time shared between processes (docs/fakegpu.md, "Kernels and
// time"). Shares are read from the committed device timeline in the state file:
// exact at each snapshot's instant, so the only error a window sees is how well
// the tenants keep their queues full on this loaded machine.

// shareWindow reads the state twice, window apart, and returns each pid's share
// of device 0's time in between (0..1), the device's busy fraction, and the
// length of the simulated interval.
func shareWindow(t *testing.T, n *node, window time.Duration, pids ...int) (map[int]float64, float64, time.Duration) {
	t.Helper()
	s1 := readState(t, n)
	time.Sleep(window)
	s2 := readState(t, n)
	dt := float64(s2.Devices[0].SchedNs - s1.Devices[0].SchedNs)
	if dt < float64(window)/2 {
		t.Fatalf("timeline advanced %v in a %v window: nothing commits it", time.Duration(dt), window)
	}
	shares := map[int]float64{}
	for _, pid := range pids {
		p1, ok1 := s1.Process(pid)
		p2, ok2 := s2.Process(pid)
		if !ok1 || !ok2 {
			t.Fatalf("process %d not in the state file", pid)
		}
		shares[pid] = float64(p2.RunNs[0]-p1.RunNs[0]) / dt
	}
	busy := float64(s2.Devices[0].RunNs-s1.Devices[0].RunNs) / dt
	return shares, busy, time.Duration(dt)
}

func readState(t *testing.T, n *node) *fakegpu.State {
	t.Helper()
	st, err := fakegpu.ReadState(n.state)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

const sharePP = 0.05 // ±5 percentage points: tenants on this shared 2-core machine miss wake-ups

// Two processes that saturate one device with no hook split it evenly, whatever
// API they launch through.
func TestTimeTwoTenantsSplitEvenly(t *testing.T) {
	for _, apis := range [][2]string{{"launch", "launch"}, {"graph", "ex"}, {"capture", "coop"}, {"ptsz", "launch"}} {
		t.Run(apis[0]+"-"+apis[1], func(t *testing.T) {
			n := newNode(t)
			a := n.start("saturate", "3000", "1000", "64", apis[0])
			b := n.start("saturate", "3000", "1000", "64", apis[1])
			time.Sleep(200 * time.Millisecond)
			shares, busy, dt := shareWindow(t, n, time.Second, a.pid(), b.pid())
			t.Logf("%s/%s over %v: %.1f%% / %.1f%%, device busy %.1f%%", apis[0], apis[1], dt,
				100*shares[a.pid()], 100*shares[b.pid()], 100*busy)
			for _, p := range []*proc{a, b} {
				if math.Abs(shares[p.pid()]-0.5) > sharePP {
					t.Errorf("tenant %d got %.1f%% of the device, want 50 ± %.0f", p.pid(), 100*shares[p.pid()], 100*sharePP)
				}
			}
			if busy < 0.95 {
				t.Errorf("device busy %.1f%% while two tenants saturate it", 100*busy)
			}
		})
	}
}

// One process alone gets the whole device.
func TestTimeAloneGetsAll(t *testing.T) {
	n := newNode(t)
	a := n.start("saturate", "2000", "1000", "64", "launch")
	time.Sleep(200 * time.Millisecond)
	shares, busy, dt := shareWindow(t, n, time.Second, a.pid())
	t.Logf("alone over %v: %.2f%%", dt, 100*shares[a.pid()])
	if shares[a.pid()] < 0.95 || busy < 0.95 {
		t.Errorf("a tenant alone got %.1f%% (device busy %.1f%%), want ~100%%", 100*shares[a.pid()], 100*busy)
	}
}

// Three tenants: round robin gives each a third.
func TestTimeThreeTenants(t *testing.T) {
	n := newNode(t)
	var ps []*proc
	var pids []int
	for i := 0; i < 3; i++ {
		p := n.start("saturate", "3000", "1000", "64", "launch")
		ps = append(ps, p)
		pids = append(pids, p.pid())
	}
	time.Sleep(200 * time.Millisecond)
	shares, busy, dt := shareWindow(t, n, time.Second, pids...)
	t.Logf("three tenants over %v: %v, busy %.1f%%", dt, shares, 100*busy)
	for _, pid := range pids {
		if math.Abs(shares[pid]-1.0/3) > sharePP {
			t.Errorf("tenant %d got %.1f%%, want 33.3 ± %.0f", pid, 100*shares[pid], 100*sharePP)
		}
	}
}

func probe(t *testing.T, n *node, kernelUs int) (sim, wall float64) {
	t.Helper()
	out, errOut, err := n.run("probe", strconv.Itoa(kernelUs))
	if err != nil {
		t.Fatalf("probe: %v\n%s%s", err, out, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if _, err := fmt.Sscanf(l, "probe sim %g wall %g", &sim, &wall); err == nil {
			return sim, wall
		}
	}
	t.Fatalf("probe printed no result: %q", out)
	return 0, 0
}

// A kernel longer than a slice is preempted: another context's short kernel
// finishes within about one slice, not after the long one.
func TestTimeLongKernelIsSliced(t *testing.T) {
	for _, slice := range []int{0, 5000} {
		t.Run(fmt.Sprintf("slice=%d", slice), func(t *testing.T) {
			n := newNode(t)
			sliceMs := 1.024
			if slice != 0 {
				n.extra = []string{"FAKEGPU_SLICE_US=" + strconv.Itoa(slice)}
				sliceMs = float64(slice) / 1000
			}
			long := n.start("queue", "1", "300000") // one 300 ms kernel
			sim, wall := probe(t, n, 100)
			t.Logf("slice %.3f ms: 0.1 ms kernel beside a 300 ms one: %.4f ms simulated, %.2f ms wall", sliceMs, sim, wall)
			if sim < 0.1 || sim > sliceMs+0.1+0.05 {
				t.Errorf("short kernel took %.4f ms of device time, want at most one slice (%.3f) + 0.1", sim, sliceMs)
			}
			if wall > 150 {
				t.Errorf("short kernel's synchronisation took %.1f ms: it waited for the long kernel", wall)
			}
			st := readState(t, n)
			if st.SliceNs != uint64(sliceMs*1e6) {
				t.Errorf("state slice %d ns, want %v ms", st.SliceNs, sliceMs)
			}
			long.expect(t, "done")
		})
	}
}

// Order within a stream and a context, events, every launch API, capture (one
// process alone): the C scenario asserts simulated times to 0.5 µs.
func TestTimeOrderAndEvents(t *testing.T) {
	out, errOut, err := newNode(t).run("order")
	t.Log(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("order: %v\n%s", err, errOut)
	}
}

// NVML reports what the simulated device did: two saturating tenants at ~50 %
// each, the device at ~100 %.
func TestTimeNVMLUtilisation(t *testing.T) {
	n := newNode(t)
	lib := openNVML(t, n)
	d0 := handle(t, lib, 0)
	a := n.start("saturate", "3000", "1000", "64", "launch")
	b := n.start("saturate", "3000", "1000", "64", "launch")
	time.Sleep(200 * time.Millisecond)
	if _, ret := d0.GetUtilizationRates(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := d0.GetProcessUtilization(0); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	time.Sleep(time.Second)
	u, ret := d0.GetUtilizationRates()
	if ret != nvml.SUCCESS || u.Gpu < 95 {
		t.Errorf("device utilisation %d%% (%v) with two saturating tenants", u.Gpu, ret)
	}
	samples, ret := d0.GetProcessUtilization(0)
	if ret != nvml.SUCCESS || len(samples) != 2 {
		t.Fatalf("process utilisation %+v, %v", samples, ret)
	}
	for _, s := range samples {
		if int(s.Pid) != a.pid() && int(s.Pid) != b.pid() {
			t.Errorf("unknown pid %d", s.Pid)
		}
		if s.SmUtil < 45 || s.SmUtil > 55 {
			t.Errorf("pid %d smUtil %d%%, want 50 ± 5", s.Pid, s.SmUtil)
		}
	}
	t.Logf("NVML: device %d%%, processes %d%% / %d%%", u.Gpu, samples[0].SmUtil, samples[1].SmUtil)
}

// A tenant SIGKILLed with seconds of work queued frees the device at once: its
// queue is dropped, the other tenant gets everything.
func TestTimeSIGKILLFreesDevice(t *testing.T) {
	n := newNode(t)
	a := n.start("queue", "200", "10000") // 2 s of work
	b := n.start("saturate", "3000", "1000", "64", "launch")
	time.Sleep(100 * time.Millisecond)
	shares, _, _ := shareWindow(t, n, 300*time.Millisecond, a.pid(), b.pid())
	if math.Abs(shares[a.pid()]-0.5) > sharePP {
		t.Errorf("before the kill: queued tenant %.1f%%, want ~50", 100*shares[a.pid()])
	}
	a.kill()
	shares, busy, dt := shareWindow(t, n, 500*time.Millisecond, b.pid())
	t.Logf("after SIGKILL of the other tenant, over %v: %.1f%% (device %.1f%%)", dt, 100*shares[b.pid()], 100*busy)
	if shares[b.pid()] < 0.95 {
		t.Errorf("survivor got %.1f%% after the kill, want ~100", 100*shares[b.pid()])
	}
}

// A SIGSTOPped tenant's queued work still runs, as on hardware; then it stops
// consuming and the other tenant gets the device.
func TestTimeSIGSTOPQueuedWorkCompletes(t *testing.T) {
	n := newNode(t)
	b := n.start("saturate", "4000", "1000", "64", "launch")
	a := n.start("queue", "30", "10000") // 300 ms queued
	if err := syscall.Kill(a.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(a.pid(), syscall.SIGCONT)
	deadline := time.Now().Add(3 * time.Second)
	var ran uint64
	for time.Now().Before(deadline) {
		if p, ok := readState(t, n).Process(a.pid()); ok {
			if ran = p.RunNs[0]; ran == 300e6 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ran != 300e6 {
		t.Fatalf("stopped tenant ran %v of its 300 ms queued work", time.Duration(ran))
	}
	shares, _, dt := shareWindow(t, n, 300*time.Millisecond, a.pid(), b.pid())
	t.Logf("stopped tenant done; over the next %v: stopped %.1f%%, other %.1f%%", dt, 100*shares[a.pid()], 100*shares[b.pid()])
	if shares[a.pid()] != 0 || shares[b.pid()] < 0.95 {
		t.Errorf("after the stopped tenant's queue drained: %.1f%% / %.1f%%, want 0 / ~100",
			100*shares[a.pid()], 100*shares[b.pid()])
	}
	if err := syscall.Kill(a.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.expect(t, "done")
}

// A fork child is its own context: parent and child split the device.
func TestTimeForkChildIsOwnContext(t *testing.T) {
	n := newNode(t)
	p := n.start("forksat", "3000", "1000", "64")
	var child int
	for _, l := range p.prelude {
		fmt.Sscanf(l, "child %d", &child)
	}
	if child == 0 {
		t.Fatalf("no child pid in %q", p.prelude)
	}
	time.Sleep(200 * time.Millisecond)
	shares, _, dt := shareWindow(t, n, time.Second, p.pid(), child)
	t.Logf("parent/child over %v: %.1f%% / %.1f%%", dt, 100*shares[p.pid()], 100*shares[child])
	for _, pid := range []int{p.pid(), child} {
		if math.Abs(shares[pid]-0.5) > sharePP {
			t.Errorf("pid %d got %.1f%%, want 50 ± %.0f", pid, 100*shares[pid], 100*sharePP)
		}
	}
}

// How late a synchronisation returns after the simulated completion: the
// model's only timing error (the shares above are exact by construction).
func TestTimeWakeupLatency(t *testing.T) {
	out, errOut, err := newNode(t).run("latency", "300", "200")
	if err != nil {
		t.Fatalf("latency: %v\n%s%s", err, out, errOut)
	}
	var p50, p99, max float64
	for _, l := range strings.Split(out, "\n") {
		fmt.Sscanf(l, "latency p50 %g p99 %g max %g", &p50, &p99, &max)
	}
	t.Logf("wake-up after simulated completion: p50 %.0f µs, p99 %.0f µs, max %.0f µs", p50, p99, max)
	if p50 <= 0 || p50 > 2000 {
		t.Errorf("median wake-up %.0f µs after completion", p50)
	}
}
