// Package process starts the binaries of an end-to-end cluster as child
// processes and guarantees they end with it: every process runs in its own
// process group, is recorded by PID while it lives, and is stopped with
// SIGTERM, then SIGKILL after a grace period, then reaped. If the test
// binary itself dies (a -timeout panic, os.Exit, a SIGKILL) the kernel kills
// the children through PR_SET_PDEATHSIG.
package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// Spec describes one process to start.
type Spec struct {
	// Name identifies the process in errors and names its log file.
	Name string
	Path string
	Args []string
	// LogDir receives <Name>.log with the process's stdout and stderr.
	LogDir string
	// Env is added to the test's environment.
	Env []string
}

// Process is a started child.
type Process struct {
	Name    string
	PID     int
	LogPath string

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // its exit status, valid after done
	once sync.Once
}

// live records every started process that has not been reaped yet.
var live = struct {
	sync.Mutex
	byPID map[int]*Process
}{byPID: map[int]*Process{}}

// Live lists the PIDs of the processes this package started that have not
// ended yet, sorted.
func Live() []int {
	live.Lock()
	defer live.Unlock()
	pids := make([]int, 0, len(live.byPID))
	for pid := range live.byPID {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// StopAll stops every live process (for a signal handler or TestMain).
func StopAll(grace time.Duration) {
	live.Lock()
	ps := make([]*Process, 0, len(live.byPID))
	for _, p := range live.byPID {
		ps = append(ps, p)
	}
	live.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.Stop(grace) })
	}
	wg.Wait()
}

// Start launches spec. Its output goes to spec.LogDir/<Name>.log.
func Start(spec Spec) (*Process, error) {
	if spec.Name == "" || spec.Path == "" {
		return nil, fmt.Errorf("process spec: name and path are required (got name %q, path %q)", spec.Name, spec.Path)
	}
	logPath := filepath.Join(spec.LogDir, spec.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", spec.Name, err)
	}
	defer logFile.Close() // the child holds its own descriptor

	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), spec.Env...)
	// Own process group: Stop signals the group, so anything the binary
	// spawns goes too. Pdeathsig: the child dies with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", spec.Name, spec.Path, err)
	}
	p := &Process{Name: spec.Name, PID: cmd.Process.Pid, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	live.Lock()
	live.byPID[p.PID] = p
	live.Unlock()
	go p.reap()
	return p, nil
}

func (p *Process) reap() {
	p.err = p.cmd.Wait()
	live.Lock()
	delete(live.byPID, p.PID)
	live.Unlock()
	close(p.done)
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Done is closed when the process has ended and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group, SIGKILL after grace, and waits
// until the process is reaped. It is safe to call more than once.
func (p *Process) Stop(grace time.Duration) error {
	p.once.Do(func() {
		_ = syscall.Kill(-p.PID, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			<-p.done
		}
		// Anything left in the group (a grandchild that ignored SIGTERM).
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	})
	<-p.done
	return nil
}

// Kill sends SIGKILL to the process group and waits until it is reaped
// (for tests that crash a component on purpose).
func (p *Process) Kill() {
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	<-p.done
}

// WaitExit waits for the process to end on its own.
func (p *Process) WaitExit(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("%s (pid %d) still running: %w", p.Name, p.PID, ctx.Err())
	}
}

// WaitReady calls check every 100 ms, each call bounded by 5 s, until it
// succeeds, the process exits, or ctx ends. An exit is an error naming the
// process and its exit status; the end of ctx, one quoting the last
// check's error. Callers add the log tail where they report.
func (p *Process) WaitReady(ctx context.Context, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited: %v", p.Name, err)
		}
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last := check(attempt)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), last)
		case <-p.done:
		case <-tick.C:
		}
	}
}

// Tail returns the last n bytes of the process's log, for error messages.
func (p *Process) Tail(n int64) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	got, _ := f.ReadAt(buf, off)
	return string(buf[:got])
}

// spawn starts commands from one goroutine locked to one OS thread that
// never exits: PR_SET_PDEATHSIG fires when the *thread* that forked the
// child ends, and Go retires idle threads, which would kill the children
// of a healthy test at random.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnc = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
			for r := range spawnc {
				r.result <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, result: make(chan error, 1)}
	spawnc <- r
	return <-r.result
}

type spawnReq struct {
	cmd    *exec.Cmd
	result chan error
}

var (
	spawnOnce sync.Once
	spawnc    chan spawnReq
)

// CPUTime is the user plus system CPU time the process has used so far
// (/proc/<pid>/stat; its own threads, not its children). A benchmark
// samples it around a measured interval to say which component spent the
// machine's time.
func (p *Process) CPUTime() (time.Duration, error) {
	proc, err := procfs.NewProc(p.PID)
	if err != nil {
		return 0, fmt.Errorf("%s (pid %d) CPU time: %w", p.Name, p.PID, err)
	}
	st, err := proc.Stat()
	if err != nil {
		return 0, fmt.Errorf("%s (pid %d) CPU time: %w", p.Name, p.PID, err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}
