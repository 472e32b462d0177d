package arbiterproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Supervisor runs the arbiter's process while the monitor may write grants.
type Supervisor struct {
	// Exe is the program to run as Subcommand ("": /proc/self/exe, this
	// very binary).
	Exe string
	// Config is the process's configuration; Run fills in ParentPID.
	Config Config
	// Active says whether the monitor may write grants now (it holds the
	// node lease); nil: always. No process runs while it is false.
	Active func() bool
	Log    *slog.Logger
	// Stderr receives the process's log lines (nil: this process's stderr).
	Stderr *os.File
	// Poll is how often Active is looked at (0: 100 ms).
	Poll time.Duration
	// StopTimeout is how long a process asked to stop (SIGTERM) has before
	// it is killed (0: 2 s).
	StopTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart after the
	// process died (0: 100 ms and 5 s); it doubles with every death in a
	// row and starts over once a process has run for StableAfter (0: 10 s).
	MinBackoff, MaxBackoff, StableAfter time.Duration
	// HangAfter: a process that has taken no step for this long (stopped,
	// or stuck) is killed, and so restarted (0: 5 s).
	HangAfter time.Duration

	status *status
	pid    atomic.Int64
	starts atomic.Int64
	spawn  chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (s *Supervisor) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// TakeLongestGap returns the longest time between two steps of the
// arbiter's loop since the last call, across its restarts, and starts over
// (0 before any process ran).
func (s *Supervisor) TakeLongestGap() time.Duration {
	if s.status == nil {
		return 0
	}
	return s.status.Stats().TakeLongestGap()
}

// Steps is how many steps the arbiter's processes have taken in all.
func (s *Supervisor) Steps() uint64 {
	if s.status == nil {
		return 0
	}
	return s.status.Stats().Steps.Load()
}

// GC is what the running (or last) process says of its collector: how
// many collections it ran (0 unless its heap reached the limit), GOGC as set
// (-1: off) and its memory limit.
func (s *Supervisor) GC() (cycles uint64, percent, memoryLimit int64) {
	if s.status == nil {
		return 0, 0, 0
	}
	g := s.status.GC()
	return g.Cycles.Load(), g.Percent.Load(), g.MemoryLimit.Load()
}

// Pid is the running process's pid (0: none).
func (s *Supervisor) Pid() int { return int(s.pid.Load()) }

// Starts is how many processes Run has started.
func (s *Supervisor) Starts() int { return int(s.starts.Load()) }

// Prepare makes the status page, so that TakeLongestGap and Steps may be
// read before Run has started (Run calls it).
func (s *Supervisor) Prepare() error {
	if s.status != nil {
		return nil
	}
	st, err := newStatus()
	if err != nil {
		return err
	}
	s.status = st
	return nil
}

// child is one running process.
type child struct {
	cmd    *exec.Cmd
	since  time.Time
	exited chan error
	// steps and progressed: the step count last seen to move, and when.
	steps      uint64
	progressed time.Time
	killed     bool // for hanging
}

// hung reports whether c has taken no step for limit, by now.
func (c *child) hung(steps uint64, now time.Time, limit time.Duration) bool {
	if steps != c.steps {
		c.steps, c.progressed = steps, now
		return false
	}
	return now.Sub(c.progressed) >= limit
}

// Run keeps one arbiter process running while Active, until ctx ends; it
// stops the process before it returns. Only a failure to set up (no status
// page, no thread to start from) is an error: a process that cannot start
// is retried with backoff and logged.
func (s *Supervisor) Run(ctx context.Context) error {
	if err := s.Prepare(); err != nil {
		return err
	}
	// Every process is started from this one locked thread, which lives
	// exactly as long as Run: the parent-death signal is tied to the thread
	// that forked, not to the process, and a thread of the Go runtime's
	// pool may end at any time.
	s.spawn = make(chan spawnReq)
	spawnerDone := make(chan struct{})
	go s.spawner(spawnerDone)
	defer func() { close(s.spawn); <-spawnerDone }()

	poll := time.NewTicker(orDefault(s.Poll, 100*time.Millisecond))
	defer poll.Stop()
	minBackoff := orDefault(s.MinBackoff, 100*time.Millisecond)
	backoff, next := minBackoff, time.Time{}
	var c *child
	var exited chan error // c.exited, or nil (a nil channel never receives)
	for {
		active := s.Active == nil || s.Active()
		switch {
		case active && c == nil && !time.Now().Before(next):
			var err error
			if c, err = s.start(); err != nil {
				s.log().Warn("arbiter process not started; retrying", "err", err, "in", backoff)
				next, backoff = time.Now().Add(backoff), min(2*backoff, orDefault(s.MaxBackoff, 5*time.Second))
			} else {
				exited = c.exited
			}
		case !active && c != nil:
			s.log().Info("arbiter process stopped: this monitor no longer holds the node lease", "pid", c.cmd.Process.Pid)
			s.stop(c)
			c, exited = nil, nil
		}
		select {
		case <-ctx.Done():
			if c != nil {
				s.stop(c)
			}
			return nil
		case err := <-exited:
			ran := time.Since(c.since)
			if ran >= orDefault(s.StableAfter, 10*time.Second) {
				backoff = minBackoff
			}
			s.log().Warn("arbiter process died; restarting", "pid", c.cmd.Process.Pid, "err", err, "ran", ran, "in", backoff)
			s.pid.Store(0)
			next, backoff = time.Now().Add(backoff), min(2*backoff, orDefault(s.MaxBackoff, 5*time.Second))
			c, exited = nil, nil
		case <-poll.C:
			if c != nil && !c.killed && c.hung(s.Steps(), time.Now(), orDefault(s.HangAfter, 5*time.Second)) {
				s.log().Warn("arbiter process takes no steps; killing it to restart it", "pid", c.cmd.Process.Pid,
					"after", orDefault(s.HangAfter, 5*time.Second))
				c.killed = true
				c.cmd.Process.Kill()
			}
		}
	}
}

// start starts a process from the spawner thread.
func (s *Supervisor) start() (*child, error) {
	exe := s.Exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	cfg := s.Config
	cfg.ParentPID = os.Getpid()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{Subcommand}, cfg.Args()...)...)
	cmd.Stderr = s.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.ExtraFiles = []*os.File{s.status.file} // statusFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Its own environment, without GOGC or GOMEMLIMIT of the monitor's,
	// which would override the process's own settings.
	cmd.Env = []string{}
	req := spawnReq{cmd: cmd, done: make(chan error, 1)}
	s.spawn <- req
	if err := <-req.done; err != nil {
		return nil, fmt.Errorf("start %s %s: %w", exe, Subcommand, err)
	}
	s.starts.Add(1)
	s.pid.Store(int64(cmd.Process.Pid))
	now := time.Now()
	c := &child{cmd: cmd, since: now, exited: make(chan error, 1), steps: s.Steps(), progressed: now}
	go func() { c.exited <- cmd.Wait() }()
	s.log().Info("arbiter process started", "pid", cmd.Process.Pid)
	return c, nil
}

// spawner starts processes on its own locked thread, raised to the
// process's SCHED_FIFO priority for the fork (so that the new process's
// first threads are born raised; the process raises any other itself) and
// put back after it.
func (s *Supervisor) spawner(done chan struct{}) {
	defer close(done)
	runtime.LockOSThread()
	// Never unlocked: when Run ends, this goroutine's end ends the thread
	// (and with it the parent-death signal's anchor, after the last
	// process was stopped).
	for req := range s.spawn {
		restore := raiseForFork(s.Config.RealtimePriority)
		req.done <- req.cmd.Start()
		restore()
	}
}

// raiseForFork raises the calling thread to SCHED_FIFO prio if it may, and
// returns what puts it back.
func raiseForFork(prio int) func() {
	if prio <= 0 {
		return func() {}
	}
	was, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return func() {}
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if unix.SchedSetAttr(0, &attr, 0) != nil {
		return func() {} // refused: the process tries itself, and falls back
	}
	return func() { unix.SchedSetAttr(0, was, 0) } //nolint:errcheck // lowering is always allowed
}

// stop asks c to end (SIGTERM) and kills it after StopTimeout.
func (s *Supervisor) stop(c *child) {
	defer s.pid.Store(0)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.log().Warn("arbiter process: SIGTERM", "pid", c.cmd.Process.Pid, "err", err)
	}
	timeout := orDefault(s.StopTimeout, 2*time.Second)
	select {
	case <-c.exited:
		return
	case <-time.After(timeout):
	}
	s.log().Warn("arbiter process did not stop; killing it", "pid", c.cmd.Process.Pid, "after", timeout)
	c.cmd.Process.Kill()
	<-c.exited
}

// Close releases the status page (after Run returned).
func (s *Supervisor) Close() {
	if s.status != nil {
		s.status.close()
		s.status = nil
	}
}
