package fakegpu_test

import (
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// inOwnPIDNamespace runs a scenario as pid 1 of a new pid namespace with its own
// /proc, as a container does; the namespace dies with the test's process.
func inOwnPIDNamespace(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root: new pid namespaces need CAP_SYS_ADMIN")
		}
		t.Skip("not root: creating pid namespaces needs CAP_SYS_ADMIN (CI runs this as root)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to make pid namespaces: %v", err)
	}
	return []string{unshare, "--pid", "--fork", "--mount-proc", "--kill-child"}
}

// slotsOf returns the slots of the live processes in the state file whose pid
// is pid (each namespace's first process is pid 1, so several can be).
func slotsOf(st *fakegpu.State, pid int) []fakegpu.Process {
	var out []fakegpu.Process
	for _, p := range st.Processes {
		if p.Pid == pid && !p.Reaping {
			out = append(out, p)
		}
	}
	return out
}

// Processes in different pid namespaces (containers sharing one GPU) are each
// other's live tenants: neither reaps the other's memory, they time-slice the
// device evenly, and a killed one is reclaimed by the other. The driver knows
// its tenants by a lock each holds on its slot, not by a pid that means nothing
// outside its own namespace.
func TestTenantsInSeparatePIDNamespaces(t *testing.T) {
	ns := inOwnPIDNamespace(t)
	n := newNode(t)
	a := n.startWrapped(ns, "hold", "0", "943718400") // 900 MiB
	b := n.startWrapped(ns, "hold", "0", "104857600") // 100 MiB; its cuInit reaps the dead
	st := readState(t, n)
	if got := len(slotsOf(st, 1)); got != 2 || st.UsedBytes(0) != 1000*MiB {
		t.Fatalf("two namespaced holders: %d processes as pid 1, %d bytes used, want 2 and %d; %+v",
			got, st.UsedBytes(0), 1000*MiB, st.Processes)
	}
	a.kill()
	c := n.startWrapped(ns, "hold", "0", "1048576") // its cuInit reaps a's slot
	st = readState(t, n)
	if st.UsedBytes(0) != 101*MiB {
		t.Errorf("after killing the 900 MiB holder: %d bytes used, want %d", st.UsedBytes(0), 101*MiB)
	}
	b.kill()
	c.kill()

	x := n.startWrapped(ns, tenantArgs(3000, 1000, "launch")...)
	y := n.startWrapped(ns, tenantArgs(3000, 1000, "launch")...)
	time.Sleep(200 * time.Millisecond)
	s1 := readState(t, n)
	time.Sleep(time.Second)
	s2 := readState(t, n)
	dt := float64(s2.Devices[0].SchedNs - s1.Devices[0].SchedNs)
	p1, p2 := slotsOf(s1, 1), slotsOf(s2, 1)
	if len(p1) != 2 || len(p2) != 2 || dt <= 0 {
		t.Fatalf("two namespaced tenants: %d then %d processes as pid 1, timeline advanced %v", len(p1), len(p2), time.Duration(dt))
	}
	for i := range p1 {
		if p1[i].Slot != p2[i].Slot {
			t.Fatalf("tenants changed slots: %+v then %+v", p1, p2)
		}
		share := float64(p2[i].RunNs[0]-p1[i].RunNs[0]) / dt
		t.Logf("tenant in slot %d: %.2f%% of %v", p1[i].Slot, 100*share, time.Duration(dt))
		if math.Abs(share-0.5) > sharePP {
			t.Errorf("tenant in slot %d got %.1f%% of the device, want 50 ± %.0f", p1[i].Slot, 100*share, 100*sharePP)
		}
	}
	x.kill()
	y.kill()
}
