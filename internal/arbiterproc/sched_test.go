package arbiterproc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadScheduling is (policy, rt priority, nice) of each thread of pid,
// from /proc/<pid>/task/*/stat.
func threadScheduling(t *testing.T, pid int) map[int][3]int {
	t.Helper()
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][3]int{}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended meanwhile
		}
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		// Fields after the command's closing parenthesis start at field 3.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		nice, _ := strconv.Atoi(f[19-3])
		rtPrio, _ := strconv.Atoi(f[40-3])
		policy, _ := strconv.Atoi(f[41-3])
		out[tid] = [3]int{policy, rtPrio, nice}
	}
	return out
}

// TestEveryThreadOfTheProcessIsRaised: as root (CI), every thread of the
// arbiter's process runs SCHED_FIFO at the configured priority, those the Go
// runtime starts later too, and the process says so in one structured log
// line on the stderr it was given. Not root, it must still run (nice -10 or
// unraised, logged); only then, and outside CI, is the check skipped.
func TestEveryThreadOfTheProcessIsRaised(t *testing.T) {
	const prio = 7
	state, _ := stateDir(t)
	s := &Supervisor{Config: testConfig(state, prio)}
	stderr := run(t, s)
	eventually(t, 20*time.Second, "process stepping", func() bool { return s.Pid() != 0 && s.Steps() > 50 })
	pid := s.Pid()
	logs := func() string { b, _ := os.ReadFile(stderr); return string(b) }
	eventually(t, 10*time.Second, "the process's scheduling logged", func() bool { return strings.Contains(logs(), "arbiter process: ") })
	var raised struct {
		Msg, Scheduling, Component string
		PID                        int
	}
	for _, l := range strings.Split(strings.TrimSpace(logs()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a log line of the process is not JSON: %q", l)
		}
		if strings.HasPrefix(rec["msg"].(string), "arbiter process: ") {
			json.Unmarshal([]byte(l), &raised)
		}
	}
	if raised.Component != "tessera-arbiter" || raised.PID != pid {
		t.Errorf("log line %+v: want component tessera-arbiter, pid %d", raised, pid)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI runs as root; euid %d", os.Geteuid())
		}
		t.Skipf("not root: the process runs as %q (%s)", raised.Msg, raised.Scheduling)
	}
	// (policy, rt priority): SCHED_FIFO (1) at prio; nice does not matter
	// to a real-time thread (it inherits the test's).
	want := [2]int{1, prio}
	matches := func(sc [3]int) bool { return [2]int{sc[0], sc[1]} == want }
	if err := fifoAllowed(prio); err != nil {
		// A kernel with real-time group scheduling and no real-time
		// budget for this cgroup refuses root too: the fallback is owed.
		t.Logf("this kernel refuses SCHED_FIFO even to root (%v): every thread must be at nice %d", err, niceFallback)
		matches = func(sc [3]int) bool { return sc[0] == 0 && sc[2] == niceFallback }
	} else if raised.Scheduling != fmt.Sprintf("SCHED_FIFO priority %d", prio) {
		t.Fatalf("as root, the process got %q (%s), want SCHED_FIFO priority %d", raised.Msg, raised.Scheduling, prio)
	}
	// Several looks, a while apart: threads the runtime starts later inherit
	// the policy.
	for look := 0; look < 5; look++ {
		threads := threadScheduling(t, pid)
		if len(threads) < 2 {
			t.Fatalf("%d threads listed for pid %d", len(threads), pid)
		}
		for tid, sc := range threads {
			if !matches(sc) {
				t.Errorf("thread %d of the arbiter's process: (policy, rt priority, nice) %v, want SCHED_FIFO %d (or, refused by the kernel, nice %d)", tid, sc, prio, niceFallback)
			}
		}
		if t.Failed() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d threads, all raised: %v", len(threadScheduling(t, pid)), threadScheduling(t, pid))
	// The supervisor's own threads are left as they were (the fork's
	// thread is put back).
	for tid, sc := range threadScheduling(t, os.Getpid()) {
		if sc[0] == 1 && sc[1] == prio {
			t.Errorf("supervisor thread %d left at SCHED_FIFO %d", tid, prio)
		}
	}
}

// fifoAllowed tries SCHED_FIFO prio on a thread of this test process (and
// puts it back): nil where the kernel grants it.
func fifoAllowed(prio int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	was, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return err
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return err
	}
	return unix.SchedSetAttr(0, was, 0)
}
