package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
)

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func enforcing(policy string) func(*configv1.MonitorConfig) {
	return func(c *configv1.MonitorConfig) {
		c.Enforcement.Policy = policy
		c.Enforcement.Grace = configv1.Duration{Duration: 300 * time.Millisecond}
		c.Enforcement.Interval = configv1.Duration{Duration: 100 * time.Millisecond}
		// The fake GPU's contexts hold no memory, and its allocations
		// are MiB, not GiB: no tolerance for contexts is needed.
		c.Enforcement.ToleranceMiB = 0
		c.Enforcement.AllowLowTolerance = true
		c.Health.Enabled = false
	}
}

// exited reports whether the process has been reaped by its waiter.
func exited(p *proc) <-chan struct{} {
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	return done
}

// TestProcessWithoutTheHookIsKilled: a process that allocates on a tessera
// GPU without the hook (LD_PRELOAD stripped) is detected and, under the kill
// policy, killed within 10 s; the container that plays by the rules is not.
func TestProcessWithoutTheHookIsKilled(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns", "good", "c", map[int]uint64{0: 256 * MiB}, nil, true)
	good := n.run(a.env, true)
	good.ok("init")
	good.ok("ctx 0")
	good.ok("alloc x 16777216")
	g := n.openGPUs()
	var log syncLog
	ag := n.agentFor(slog.New(slog.NewTextHandler(&log, nil)), g, enforcing(configv1.PolicyKill))
	// The test's processes stand for a pod's; they are not in kubepods.
	ag.Enforcer.Killable = func(hostproc.Process) bool { return true }
	url := start(t, ag)

	rogue := n.run(nil, false)
	rogue.ok("init")
	rogue.ok("ctx 0")
	rogue.ok("alloc r 67108864")
	began := time.Now()
	select {
	case <-exited(rogue):
		t.Logf("the bypassing process was killed %v after its allocation", time.Since(began).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the bypassing process still runs after 10 s; log:\n%s", log.String())
	}
	// The enforcer counts a kill after the signal, so the process can be
	// seen dead a moment before the counters move.
	counted := func(fams map[string]*dto.MetricFamily) (detections, kills float64) {
		detections, _ = value(fams, "tessera_monitor_bypass_detections_total", map[string]string{"kind": "no_region"})
		kills, _ = value(fams, "tessera_monitor_enforcement_kills_total", nil)
		return detections, kills
	}
	eventually(t, 30*time.Second, "the detection and the kill counted", func() bool {
		d, k := counted(scrape(t, url))
		return d >= 1 && k >= 1
	})
	if d, k := counted(scrape(t, url)); d != 1 || k != 1 {
		t.Errorf("no_region detections %v, kills %v; want 1 and 1", d, k)
	}
	good.ok("alloc y 16777216") // still alive and capped as before
	if !strings.Contains(log.String(), "without a region") {
		t.Errorf("no log line names the violation:\n%s", log.String())
	}
}

// TestBypassReportedNotKilledUnderReport: the default policy counts and logs.
func TestBypassReportedNotKilledUnderReport(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns", "good", "c", map[int]uint64{0: 256 * MiB}, nil, true)
	good := n.run(a.env, true)
	good.ok("init")
	good.ok("ctx 0")
	good.ok("alloc x 1048576")
	g := n.openGPUs()
	ag := n.agentFor(quietLog(), g, enforcing(configv1.PolicyReport))
	url := start(t, ag)
	rogue := n.run(nil, false)
	rogue.ok("init")
	rogue.ok("ctx 0")
	rogue.ok("alloc r 67108864")
	eventually(t, 30*time.Second, "no_region reported", func() bool {
		v, _ := value(scrape(t, url), "tessera_monitor_bypass_detections_total", map[string]string{"kind": "no_region"})
		return v == 1
	})
	time.Sleep(500 * time.Millisecond)
	rogue.ok("alloc r2 1048576") // alive
	fams := scrape(t, url)
	if v, _ := value(fams, "tessera_monitor_bypass_detections_total", map[string]string{"kind": "no_region"}); v != 1 {
		t.Errorf("a lasting violation counted %v times, want once", v)
	}
	if v, _ := value(fams, "tessera_monitor_enforcement_kills_total", nil); v != 0 {
		t.Errorf("kills %v under report", v)
	}
}

// TestUnderReportingRegionIsCaughtByTheDriversCount: a container that
// rewrites its own region to hide its usage passes its cap as far as the hook
// is concerned; the driver's per-process count shows it.
func TestUnderReportingRegionIsCaughtByTheDriversCount(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns", "sly", "c", map[int]uint64{0: 256 * MiB}, nil, true)
	p := n.run(a.env, true)
	p.ok("init")
	p.ok("ctx 0")
	p.ok("alloc x 209715200") // 200 MiB of 256
	hp, err := hostproc.Read("/proc", p.pid())
	if err != nil {
		t.Fatal(err)
	}
	// The container zeroes its own slot (its processes map the region read-write).
	if err := regiontest.Write(a.region, regiontest.Contents{Slots: []regiontest.Slot{{PID: hp.NSPID, StartTime: hp.StartTime, UsedBytes: map[int]uint64{0: 0}}}}); err != nil {
		t.Fatal(err)
	}
	p.ok("alloc y 209715200") // the hook now believes 200 MiB of 256 are used
	g := n.openGPUs()
	var log syncLog
	ag := n.agentFor(slog.New(slog.NewTextHandler(&log, nil)), g, enforcing(configv1.PolicyReport))
	events := make(chan string, 4)
	ag.Enforcer.Event = func(_ context.Context, o identity.Owner, reason, msg string) {
		events <- o.String() + " " + reason + ": " + msg
	}
	url := start(t, ag)
	eventually(t, 30*time.Second, "over_cap reported", func() bool {
		v, _ := value(scrape(t, url), "tessera_monitor_bypass_detections_total", map[string]string{"kind": "over_cap"})
		return v == 1
	})
	select {
	case ev := <-events:
		if !strings.HasPrefix(ev, "ns/sly/c TesseraGPUMemoryOverCap: ") {
			t.Errorf("event %q", ev)
		}
	case <-time.After(30 * time.Second):
		t.Error("no Event for the pod")
	}
	if !strings.Contains(log.String(), "ns/sly/c holds 419430400 bytes") {
		t.Errorf("log does not name the container and the driver's count:\n%s", log.String())
	}
}
