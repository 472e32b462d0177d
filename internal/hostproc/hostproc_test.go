package hostproc

import (
	"os"
	"os/exec"
	"testing"
)

func TestScanFindsThisProcessAndItsChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	tab, err := Scan("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self, ok := tab.Get(uint32(os.Getpid()))
	if !ok || self.NSPID == 0 || self.StartTime == 0 || self.Finished {
		t.Fatalf("self: %+v, %v", self, ok)
	}
	child, ok := tab.Get(uint32(cmd.Process.Pid))
	if !ok || child.Cgroup != self.Cgroup {
		t.Fatalf("child %+v (self cgroup %q)", child, self.Cgroup)
	}
	if !tab.Alive(child.NSPID, child.StartTime) || !tab.Alive(child.NSPID, 0) {
		t.Error("running child not alive")
	}
	if tab.Alive(child.NSPID, child.StartTime+1) {
		t.Error("a reused pid (other start time) counted as the slot's owner")
	}
	cmd.Process.Kill()
	cmd.Wait()
	after, err := Scan("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if after.Alive(child.NSPID, child.StartTime) {
		t.Error("killed and waited-for child still alive")
	}
}

func TestIncompleteTableKeepsEverythingAlive(t *testing.T) {
	tab := NewTable(Process{PID: 10, NSPID: 3, StartTime: 7})
	if tab.Alive(4, 7) {
		t.Fatal("unknown pid alive in a complete table")
	}
	tab.Incomplete = true
	if !tab.Alive(4, 7) {
		t.Fatal("an incomplete table let a slot be reaped")
	}
}

func TestFinishedZombieIsDeadButLeaderWithThreadsIsNot(t *testing.T) {
	tab := NewTable(Process{PID: 10, NSPID: 3, StartTime: 7, Finished: true}, Process{PID: 11, NSPID: 3, StartTime: 9})
	if tab.Alive(3, 7) {
		t.Error("finished zombie alive")
	}
	if !tab.Alive(3, 9) || len(tab.Match(3, 0)) != 1 {
		t.Error("the other namespace's pid 3 not found")
	}
	for line, finished := range map[string]bool{
		"5 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n": true,
		"5 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 100 0 0\n": false,
		"5 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n": false,
	} {
		st, err := ParseStat([]byte(line))
		if err != nil || st.Finished() != finished || st.StartTime != 100 {
			t.Errorf("%q: %+v %v", line, st, err)
		}
	}
}

func TestParseNSPID(t *testing.T) {
	for in, want := range map[string]uint32{
		"Name:\tx\nNSpid:\t4711\n":          4711,
		"Name:\tx\nNSpid:\t4711\t12\t1\n":   1,
		"Tgid: 5\nNSpid:  900  7  \nX: 1\n": 7,
	} {
		got, err := ParseNSPID([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Name: x\n", "NSpid:\n", "NSpid: x\n", "NSpid: 0\n", "NSpid: 99999999999\n"} {
		if _, err := ParseNSPID([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseCgroup(t *testing.T) {
	v2 := "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n"
	if got := ParseCgroup([]byte(v2)); got != "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope" {
		t.Errorf("v2: %q", got)
	}
	v1 := "12:memory:/kubepods/pod1/abc\n11:cpu,cpuacct:/kubepods/pod1/abc\n"
	if got := ParseCgroup([]byte(v1)); got != "/kubepods/pod1/abc" {
		t.Errorf("v1: %q", got)
	}
	hybrid := "1:name=systemd:/x\n0::/y\n"
	if got := ParseCgroup([]byte(hybrid)); got != "/y" {
		t.Errorf("hybrid: %q", got)
	}
}

func FuzzParseNSPID(f *testing.F) {
	f.Add([]byte("NSpid:\t4711\t12\t1\n"))
	f.Add([]byte("NSpid:\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if pid, err := ParseNSPID(data); err == nil && pid == 0 {
			t.Fatal("pid 0 accepted")
		}
	})
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/a/b\n"))
	f.Add([]byte("3:memory:/x\n::\n"))
	f.Fuzz(func(t *testing.T, data []byte) { _ = ParseCgroup(data) })
}
