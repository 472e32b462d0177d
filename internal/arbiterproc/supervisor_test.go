package arbiterproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/arbiter"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// testParentEnv makes this test binary a supervisor of its own (the parent
// whose death the arbiter's process must follow): it prints the process's
// pid and waits to be killed.
const testParentEnv = "TESSERA_ARBITERPROC_TEST_PARENT"

func TestMain(m *testing.M) {
	MainIfSubcommand() // the supervisors below start this binary as the process
	if dir := os.Getenv(testParentEnv); dir != "" {
		testParent(dir)
		return
	}
	os.Exit(m.Run())
}

func testParent(stateDir string) {
	s := &Supervisor{Exe: os.Args[0], Config: testConfig(stateDir, 0)}
	if err := s.Prepare(); err != nil {
		fmt.Println("err", err)
		os.Exit(1)
	}
	go s.Run(context.Background())
	for s.Pid() == 0 || s.Steps() < 10 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(s.Pid())
	select {}
}

func testConfig(stateDir string, prio int) Config {
	return Config{StateDir: stateDir, Tick: time.Millisecond, HandOverPoll: 100 * time.Microsecond, Rescan: 20 * time.Millisecond,
		Policy:           arbiter.Policy{Quantum: 10 * time.Millisecond, IdleAfter: 5 * time.Millisecond, PriorityHold: 100 * time.Millisecond, TurnGrace: 2 * time.Millisecond},
		RealtimePriority: prio, MemoryLimit: 32 << 20, LogLevel: "info", LogFormat: "json"}
}

// stateDir holds one gpu-core allocation whose grant the arbiter writes.
func stateDir(t *testing.T) (string, *region.Limits) {
	t.Helper()
	state := t.TempDir()
	e := statedir.Entry{Key: "core-a", Kind: "core", Dir: filepath.Join(statedir.Containers(state), "core-a")}
	if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := region.WriteLimits(e.CoreLimits(), []region.DeviceLimit{{UUID: "GPU-a", CoreLimitPct: 30}}); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(e.CoreRegion()); err != nil {
		t.Fatal(err)
	}
	l, err := region.OpenLimits(e.CoreLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return state, l
}

// run starts s until cleanup; the processes' log lines go to the file it
// returns the path of.
func run(t *testing.T, s *Supervisor) string {
	t.Helper()
	s.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s.Exe = os.Args[0]
	stderr := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	s.Stderr = f
	if err := s.Prepare(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
		f.Close()
	})
	return stderr
}

// eventually polls cond for up to limit (generous: two loaded cores).
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// alive: pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// TestRestartsADeadProcessAndGrantsResume: the arbiter's process SIGKILLed,
// the supervisor starts another (after its backoff) and grants are written
// again within a bound.
func TestRestartsADeadProcessAndGrantsResume(t *testing.T) {
	state, limits := stateDir(t)
	s := &Supervisor{Config: testConfig(state, 0), MinBackoff: 50 * time.Millisecond}
	run(t, s)
	eventually(t, 20*time.Second, "first process stepping and granting", func() bool { return s.Steps() > 20 && limits.Heartbeat(0) != 0 })
	// Its collector is off, under the memory limit, and has not run.
	if cycles, percent, limit := s.GC(); percent != -1 || limit != s.Config.MemoryLimit || cycles != 0 {
		t.Errorf("the arbiter's process: GOGC %d, memory limit %d, %d collections; want off (-1), %d, none",
			percent, limit, cycles, s.Config.MemoryLimit)
	}
	first := s.Pid()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed, killedMono := time.Now(), arbiter.Monotonic()
	eventually(t, 10*time.Second, "the killed process reaped", func() bool { return !alive(first) })
	eventually(t, 10*time.Second, "grants written again by a new process", func() bool {
		return s.Pid() != 0 && s.Pid() != first && limits.Heartbeat(0) > killedMono
	})
	resumed := time.Since(killed)
	if s.Starts() != 2 {
		t.Errorf("%d processes started, want 2", s.Starts())
	}
	// Bound: the backoff, a fork and exec, and a tick, on a loaded machine.
	if resumed > 5*time.Second {
		t.Errorf("grants resumed %v after the process was killed, want within 5 s (before the hooks' 1 s staleness, unloaded)", resumed)
	}
	t.Logf("grants resumed %v after SIGKILL (restart backoff %v)", resumed.Round(time.Millisecond), s.MinBackoff)
}

// TestRestartsAStoppedProcess: a process that takes no steps (SIGSTOP) is
// killed after HangAfter and replaced.
func TestRestartsAStoppedProcess(t *testing.T) {
	state, _ := stateDir(t)
	s := &Supervisor{Config: testConfig(state, 0), MinBackoff: 20 * time.Millisecond, HangAfter: 300 * time.Millisecond,
		Poll: 20 * time.Millisecond}
	run(t, s)
	eventually(t, 20*time.Second, "first process stepping", func() bool { return s.Pid() != 0 && s.Steps() > 10 })
	first := s.Pid()
	if err := syscall.Kill(first, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(first, syscall.SIGKILL)
	steps := s.Steps()
	took := eventually(t, 20*time.Second, "a new process stepping", func() bool {
		return s.Pid() != 0 && s.Pid() != first && s.Steps() > steps+10
	})
	if alive(first) {
		t.Errorf("the stopped process %d was left behind", first)
	}
	t.Logf("replaced %v after SIGSTOP (HangAfter %v)", took, s.HangAfter)
}

// TestLeaseLostStopsTheProcess: no process while the monitor does not hold
// the node lease (a standby starts none), one while it does, and it is
// stopped once the lease is lost.
func TestLeaseLostStopsTheProcess(t *testing.T) {
	state, _ := stateDir(t)
	var held atomic.Bool
	s := &Supervisor{Config: testConfig(state, 0), Active: held.Load, Poll: 10 * time.Millisecond}
	run(t, s)
	time.Sleep(300 * time.Millisecond)
	if s.Starts() != 0 || s.Steps() != 0 {
		t.Fatalf("standby: %d processes started, %d steps; want none", s.Starts(), s.Steps())
	}
	held.Store(true)
	eventually(t, 20*time.Second, "process stepping once the lease is held", func() bool { return s.Pid() != 0 && s.Steps() > 10 })
	pid := s.Pid()
	held.Store(false)
	eventually(t, 10*time.Second, "process stopped once the lease is lost", func() bool { return s.Pid() == 0 && !alive(pid) })
	steps := s.Steps()
	time.Sleep(100 * time.Millisecond)
	if s.Steps() != steps {
		t.Errorf("steps went on after the lease was lost: %d → %d", steps, s.Steps())
	}
	if s.Starts() != 1 {
		t.Errorf("%d processes started, want 1", s.Starts())
	}
}

// TestProcessExitsWithItsParent: the supervisor's process SIGKILLed, the
// arbiter's process does not outlive it (parent-death signal).
func TestProcessExitsWithItsParent(t *testing.T) {
	state, _ := stateDir(t)
	parent := exec.Command(os.Args[0])
	parent.Env = append(os.Environ(), testParentEnv+"="+state)
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer parent.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("supervisor: %q %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || !alive(pid) {
		t.Fatalf("supervisor said %q; alive: %v", line, err == nil && alive(pid))
	}
	parent.Process.Kill()
	parent.Wait()
	took := eventually(t, 10*time.Second, "the arbiter's process gone after its parent", func() bool { return !alive(pid) })
	t.Logf("gone %v after its parent", took)
}

// TestChildRefusesAForeignParent: started by another process than the one
// its configuration names, the process exits at once with an error naming
// the supervisor.
func TestChildRefusesAForeignParent(t *testing.T) {
	state, _ := stateDir(t)
	c := testConfig(state, 0)
	c.ParentPID = os.Getpid() + 100000
	cmd := exec.Command(os.Args[0], append([]string{Subcommand}, c.Args()...)...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "supervisor") {
		t.Fatalf("exit %v, output %q; want an error naming the supervisor", err, out)
	}
}
