package enforce

import (
	"testing"

	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/accounting"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

func alloc(key string, slots ...accounting.Proc) accounting.Allocation {
	return accounting.Allocation{Entry: statedir.Entry{Key: key, Kind: "mem"},
		GPUs: []accounting.GPU{{UUID: "GPU-a", HasMemory: true, MemLimitBytes: 100}}, Procs: slots}
}

// A container that forges a slot naming another container's process (its
// namespace pid and start time) must not pull that process, or its cgroup,
// into its own account: that would let it steer the kill policy at it.
func TestForgedSlotDoesNotCaptureAnotherContainersProcess(t *testing.T) {
	tab := hostproc.NewTable(
		hostproc.Process{PID: 100, NSPID: 1, StartTime: 50, Cgroup: "/pod-victim/c"},
		hostproc.Process{PID: 101, NSPID: 7, StartTime: 60, Cgroup: "/pod-victim/c"}, // unhooked sibling
		hostproc.Process{PID: 200, NSPID: 1, StartTime: 70, Cgroup: "/pod-hostile/c"},
	)
	victim := alloc("mem-victim", accounting.Proc{PID: 1, StartTime: 50})
	hostile := alloc("mem-hostile", accounting.Proc{PID: 1, StartTime: 70}, accounting.Proc{PID: 1, StartTime: 50}) // forged
	a := newAttribution(tab, []accounting.Allocation{victim, hostile}, "/monitor")
	if len(a.contested[100]) != 2 {
		t.Error("a process two regions claim is not contested")
	}
	if k, ok := a.hooked[100]; ok {
		t.Errorf("contested process attributed to %s", k)
	}
	if a.hooked[200] != "mem-hostile" || a.byCgroup["/pod-hostile/c"] != "mem-hostile" {
		t.Errorf("the hostile container's own process: %q, cgroup %q", a.hooked[200], a.byCgroup["/pod-hostile/c"])
	}
	if k := a.byCgroup["/pod-victim/c"]; k == "mem-hostile" {
		t.Error("the victim's cgroup linked to the forger")
	}
}

func TestOwnCgroupAndRootAreNotLinked(t *testing.T) {
	tab := hostproc.NewTable(hostproc.Process{PID: 5, NSPID: 5, StartTime: 1, Cgroup: "/monitor"}, hostproc.Process{PID: 6, NSPID: 6, StartTime: 1, Cgroup: "/"})
	a := newAttribution(tab, []accounting.Allocation{alloc("mem-x", accounting.Proc{PID: 5, StartTime: 1}, accounting.Proc{PID: 6, StartTime: 1})}, "/monitor")
	if len(a.byCgroup) != 0 || a.hooked[5] != "mem-x" || a.hooked[6] != "mem-x" {
		t.Fatalf("byCgroup %v hooked %v", a.byCgroup, a.hooked)
	}
}

// A slot with start time 0 (a claim in progress) matches every process with
// that namespace pid on the node, in every pid namespace. A hostile container
// that writes {pid 1, start 0} into its region must not capture another
// container's process that has no slot of its own yet (a hooked process
// before its first charge) nor, through it, that container's cgroup: under
// kill, its over_cap would name the victim (every process "hooked", so all
// of them are killed).
func TestWildcardSlotDoesNotCaptureAnotherContainersProcess(t *testing.T) {
	tab := hostproc.NewTable(
		hostproc.Process{PID: 100, NSPID: 1, StartTime: 50, Cgroup: "/pod-victim/c"}, // no slot yet
		hostproc.Process{PID: 101, NSPID: 7, StartTime: 60, Cgroup: "/pod-victim/c"},
		hostproc.Process{PID: 200, NSPID: 2, StartTime: 70, Cgroup: "/pod-hostile/c"},
	)
	victim := alloc("mem-victim")
	hostile := alloc("mem-hostile", accounting.Proc{PID: 2, StartTime: 70}, accounting.Proc{PID: 1, StartTime: 0}) // forged wildcard
	a := newAttribution(tab, []accounting.Allocation{victim, hostile}, "/monitor")
	if k, ok := a.hooked[100]; ok {
		t.Errorf("another container's process attributed to %s by a start-time-0 slot", k)
	}
	if k, ok := a.byCgroup["/pod-victim/c"]; ok {
		t.Errorf("the victim's cgroup linked to %s by a start-time-0 slot", k)
	}
	if a.hooked[200] != "mem-hostile" {
		t.Errorf("the hostile container's own process: %q", a.hooked[200])
	}
}
