package computetest

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/region"
)

// TestArbiterProcessRestartedUnderLoad: the arbiter's process SIGKILLed while
// two tenants compete; the supervisor starts another, whose grants reach the
// hooks (the heartbeat moves on) within a bound, and the shares are held
// again afterwards.
func TestArbiterProcessRestartedUnderLoad(t *testing.T) {
	measureUnstarved(t, func() error {
		n := newNode(t)
		n.startArbiter(defaultPolicy())
		a, b := n.container("a", 30, false, 2), n.container("b", 70, false, 2)
		pa := n.start(a, "kernel", "1000", "30")
		pb := n.start(b, "kernel", "1000", "30")
		time.Sleep(300 * time.Millisecond)
		limits, err := region.OpenLimits(a.entry.CoreLimits())
		if err != nil {
			t.Fatal(err)
		}
		defer limits.Close()
		first := n.sup.Pid()
		if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed, killedMono := time.Now(), arbiter.Monotonic()
		resumed := time.Duration(-1)
		for time.Since(killed) < 10*time.Second {
			if limits.Heartbeat(0) > killedMono && n.sup.Pid() != first {
				resumed = time.Since(killed)
				break
			}
			time.Sleep(time.Millisecond)
		}
		fmt.Printf("BENCH hook.arbiter_restart_ms %.1f ms\n", float64(resumed.Microseconds())/1000)
		if resumed < 0 {
			return fmt.Errorf("no grant from a new arbiter process within 10 s of SIGKILL")
		}
		if resumed > 2*time.Second {
			return fmt.Errorf("grants resumed %v after SIGKILL, want within 2 s (backoff %v)", resumed, n.sup.MinBackoff)
		}
		_, got := n.utilization(time.Second, [][]int{{pa.pid}, {pb.pid}})
		t.Logf("grants resumed %v after SIGKILL; shares after: %.1f/%.1f", resumed, got[0], got[1])
		if got[0] < 20 || got[0] > 40 {
			return fmt.Errorf("after the restart 30/70 got %.1f/%.1f", got[0], got[1])
		}
		return nil
	})
}

// TestDeadArbiterLetsTenantsGoOn: with no arbiter process at all (stopped,
// as when the monitor loses its lease and no other takes over), the hooks
// fall back to their static shares once the last heartbeat is stale (1 s):
// both guaranteed tenants run, unthrottled.
func TestDeadArbiterLetsTenantsGoOn(t *testing.T) {
	measureUnstarved(t, func() error {
		n := newNode(t)
		n.startArbiter(defaultPolicy())
		pa := n.start(n.container("a", 30, false, 2), "kernel", "1000", "30")
		pb := n.start(n.container("b", 70, false, 2), "kernel", "1000", "30")
		time.Sleep(300 * time.Millisecond)
		n.stop()
		// utilization waits 400 ms more before it measures.
		time.Sleep(time.Duration(region.HeartbeatStaleNs) + 100*time.Millisecond)
		u, got := n.utilization(time.Second, [][]int{{pa.pid}, {pb.pid}})
		t.Logf("without an arbiter: device %.0f%% busy, shares %.1f/%.1f", 100*u, got[0], got[1])
		if u < 0.8 {
			return fmt.Errorf("without an arbiter the device is %.0f%% busy, want the tenants to run on", 100*u)
		}
		if got[0] < 20 || got[1] < 20 {
			return fmt.Errorf("without an arbiter the tenants got %.1f/%.1f, want both to run (time-sliced)", got[0], got[1])
		}
		return nil
	})
}
