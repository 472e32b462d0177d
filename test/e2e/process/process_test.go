package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone reports whether pid no longer runs: no such process, or a zombie
// (a killed grandchild reparented to an init that has not reaped it yet).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func eventuallyGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running after %v", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStopEndsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	p, err := Start(Spec{Name: "shell", Path: "/bin/sh", LogDir: dir,
		Args: []string{"-c", "sleep 300 & echo $! > " + pidFile + "; echo started; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	grandchild := readPID(t, pidFile)
	if got := Live(); len(got) != 1 || got[0] != p.PID {
		t.Fatalf("Live() = %v, want [%d]", got, p.PID)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventuallyGone(t, p.PID, time.Second)
	eventuallyGone(t, grandchild, 5*time.Second)
	if got := Live(); len(got) != 0 {
		t.Fatalf("Live() after Stop = %v", got)
	}
	if !strings.Contains(p.Tail(100), "started") {
		t.Fatalf("log tail %q lacks the process's output", p.Tail(100))
	}
}

func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(Spec{Name: "stubborn", Path: "/bin/sh", LogDir: dir,
		Args: []string{"-c", `trap "" TERM; echo ready; while :; do sleep 1; done`}})
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(p.Tail(100), "ready") {
		time.Sleep(10 * time.Millisecond)
	}
	began := time.Now()
	_ = p.Stop(300 * time.Millisecond)
	if d := time.Since(began); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Stop took %v, want the 300ms grace then SIGKILL", d)
	}
	eventuallyGone(t, p.PID, time.Second)
	if done, _ := p.Exited(); !done {
		t.Fatal("Exited() = false after Stop")
	}
}

func TestStartNamesAMissingBinary(t *testing.T) {
	_, err := Start(Spec{Name: "nothing", Path: "/nonexistent/etcd", LogDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/etcd") || !strings.Contains(err.Error(), "nothing") {
		t.Fatalf("Start of a missing binary: %v, want an error naming it", err)
	}
	if got := Live(); len(got) != 0 {
		t.Fatalf("Live() = %v after a failed start", got)
	}
}

// TestChildrenDieWithTheTestBinary SIGKILLs a test binary that started a
// child (no cleanup can run) and checks the kernel ended the child.
func TestChildrenDieWithTheTestBinary(t *testing.T) {
	if os.Getenv("TESSERA_E2E_SPAWNER") != "" {
		return // the helper is TestMain's job, see below
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TESSERA_E2E_SPAWNER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("spawner: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("spawner said %q", line)
	}
	if gone(child) {
		t.Fatalf("child %d not running before the spawner is killed", child)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	eventuallyGone(t, child, 5*time.Second)
}

// TestMain doubles as the spawner of TestChildrenDieWithTheTestBinary: it
// starts a long sleep, prints its PID and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("TESSERA_E2E_SPAWNER"); dir != "" {
		// Start from a goroutine that then ends, as a test's would: the
		// child must survive that and die only with the binary.
		done := make(chan *Process)
		go func() {
			p, err := Start(Spec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"300"}, LogDir: dir})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			done <- p
		}()
		p := <-done
		time.Sleep(200 * time.Millisecond) // let the Go runtime retire idle threads if it would
		fmt.Println(p.PID)
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestWaitReady: WaitReady returns once the check passes, fails as soon as
// the process exits (naming it and its status), and quotes the last check
// when its context ends.
func TestWaitReady(t *testing.T) {
	dir := t.TempDir()
	flag := filepath.Join(dir, "ready")
	p, err := Start(Spec{Name: "starter", Path: "/bin/sh", LogDir: dir,
		Args: []string{"-c", "sleep 0.3; touch " + flag + "; exec sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitReady(ctx, func(context.Context) error { _, err := os.Stat(flag); return err }); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if _, err := os.Stat(flag); err != nil {
		t.Fatalf("WaitReady returned before the check passed: %v", err)
	}

	crasher, err := Start(Spec{Name: "crasher", Path: "/bin/sh", LogDir: dir, Args: []string{"-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	err = crasher.WaitReady(ctx, func(context.Context) error { return errors.New("not listening") })
	if err == nil || !strings.Contains(err.Error(), "crasher exited") || !strings.Contains(err.Error(), "exit status 3") || ctx.Err() != nil {
		t.Fatalf("WaitReady of a process that exits: %v (context: %v); want its exit, before the context ends", err, ctx.Err())
	}

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	err = p.WaitReady(short, func(context.Context) error { return errors.New("port closed") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "port closed") {
		t.Fatalf("WaitReady past its context: %v; want the deadline and the last check", err)
	}
}

func TestCPUTimeGrowsWhileTheProcessComputes(t *testing.T) {
	p, err := Start(Spec{Name: "spinner", Path: "/bin/sh", LogDir: t.TempDir(),
		Args: []string{"-c", "while :; do :; done"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	// A busy loop on a loaded machine still gets a few ticks within a
	// minute; the clock counts in 10 ms ticks.
	deadline := time.Now().Add(time.Minute)
	for {
		used, err := p.CPUTime()
		if err != nil {
			t.Fatal(err)
		}
		if used >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spinner used %v of CPU in a minute, want ≥ 50ms", used)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CPUTime(); err == nil || !strings.Contains(err.Error(), "spinner") {
		t.Errorf("CPUTime of a reaped process: err = %v, want an error naming it", err)
	}
}
