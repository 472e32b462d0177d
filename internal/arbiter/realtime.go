package arbiter

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// niceFallback is the nice value asked for when a real-time policy is refused
// (a kernel or cgroup without real-time bandwidth): still ahead of the
// tenants' CPU-bound threads, which run at nice 0.
const niceFallback = -10

// raisePriority puts the calling OS thread (only it: Linux schedules threads)
// under SCHED_FIFO at prio, or failing that at niceFallback. It says what it
// got, or why it got nothing.
func raisePriority(prio int) (string, error) {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	fifoErr := unix.SchedSetAttr(0, &attr, 0)
	if fifoErr == nil {
		return fmt.Sprintf("SCHED_FIFO priority %d", prio), nil
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), niceFallback); err != nil {
		return "", errors.Join(fmt.Errorf("SCHED_FIFO priority %d: %w", prio, fifoErr), fmt.Errorf("nice %d: %w", niceFallback, err))
	}
	return fmt.Sprintf("nice %d (SCHED_FIFO refused: %v)", niceFallback, fifoErr), nil
}

// runRealtime is Run's loop on an OS thread of its own at a raised priority:
// the grants are a control loop whose error grows with every millisecond the
// OS keeps it from running (a late tick is a turn that lasts as long). The
// tick is slept in clock_nanosleep on that thread, so the kernel wakes the
// loop itself, not a Go timer that another (unprivileged, starved) thread
// would have to notice first. When the loop ends the thread's scheduling is
// put back, and it stays locked: the Go runtime then ends it (or, for the
// process's main thread, parks it) instead of handing it to other goroutines.
func (a *Arbiter) runRealtime(ctx context.Context) {
	runtime.LockOSThread()
	if was, err := unix.SchedGetAttr(0, 0); err == nil {
		defer unix.SchedSetAttr(0, was, 0) //nolint:errcheck // best effort; the thread is not reused either way
	}
	if !a.Raised { // else scheduled as all the process's threads are
		a.raise()
	}
	a.loop(ctx)
}

// loop steps every tick, and sooner while a hand-over drains
// (handOverWait), until ctx ends. The waits are slept in clock_nanosleep
// (sleepUntil), also on an ordinary goroutine: a Go timer fires no sooner
// than about a millisecond (the runtime's poller waits in whole ms).
func (a *Arbiter) loop(ctx context.Context) {
	tick, poll := uint64(a.Tick), a.handOverPoll()
	next, polls := Monotonic()+tick, 0
	for ctx.Err() == nil {
		if err := a.sleepUntil(next); err != nil {
			time.Sleep(a.Tick) // not expected; never spin
		}
		if ctx.Err() != nil {
			return
		}
		handingOver := false
		if a.Active == nil || a.Active() {
			handingOver = a.Step(time.Now(), Monotonic())
		}
		if handingOver {
			// The GPU idles until a step sees the old holder's work done.
			next = Monotonic() + uint64(handOverWait(poll, a.Tick, polls))
			polls++
			continue
		}
		polls = 0
		// A late wake-up skips the ticks it missed (Step accounts for the
		// real time elapsed) rather than running them back to back.
		next += tick
		if now := Monotonic(); next <= now {
			next = now + tick
		}
	}
}

// raise raises the calling thread and says what it got.
func (a *Arbiter) raise() {
	got, err := raisePriority(a.RealtimePriority)
	if err != nil {
		a.log().Warn("compute arbiter: priority not raised (needs CAP_SYS_NICE); grants may come late on a busy node", "err", err)
		return
	}
	a.log().Info("compute arbiter: control loop on its own thread", "scheduling", got)
}

// sleepUntil sleeps the loop's thread until next (CLOCK_MONOTONIC ns). In the
// arbiter's own process (Raised) the sleep is a raw system call, which keeps
// the goroutine's P: an ordinary one hands the P back and forth at every
// tick, which there woke a second thread of the runtime each time, as busy as
// the loop itself and, like every thread of that process, real-time (measured:
// 10 % of a core against 4 %). That process has a P to spare for its other
// goroutines (GOMAXPROCS 2); the monitor, which may have one P only, sleeps
// the ordinary way. A signal (the runtime's preemption request) interrupts
// the sleep: it is taken up again, to the same instant.
func (a *Arbiter) sleepUntil(next uint64) error {
	ts := unix.NsecToTimespec(int64(next))
	if !a.Raised {
		if err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil); err != nil && err != unix.EINTR {
			return err
		}
		return nil
	}
	for {
		_, _, errno := unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return errno
		}
	}
}
