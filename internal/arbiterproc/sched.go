package arbiterproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// niceFallback is asked for where SCHED_FIFO is refused, as the in-process
// loop does (internal/arbiter): ahead of the tenants' threads at nice 0.
const niceFallback = -10

// raiseThreads puts every thread of this process under SCHED_FIFO at prio,
// or, where that is refused, at niceFallback. Threads created later inherit
// the policy of the thread that creates them, so the sweep is repeated until
// it finds no thread left to raise: a thread made meanwhile by one not yet
// raised is caught by the next pass, and once every thread is raised every
// new one is born raised. It says what it got.
func raiseThreads(prio int) (string, error) {
	fifo := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	var fifoErr error
	for pass := 0; pass < 100; pass++ {
		tids, err := threads()
		if err != nil {
			return "", err
		}
		raised := 0
		for _, tid := range tids {
			got, err := raiseThread(tid, &fifo, fifoErr == nil)
			switch {
			case errors.Is(err, unix.ESRCH):
				// Ended meanwhile.
			case err != nil && fifoErr == nil:
				fifoErr = err // refused: every thread gets the fallback instead
				raised++
			case err != nil:
				return "", errors.Join(fmt.Errorf("SCHED_FIFO priority %d: %w", prio, fifoErr), fmt.Errorf("nice %d: %w", niceFallback, err))
			case got:
				raised++
			}
		}
		if raised == 0 {
			if fifoErr != nil {
				return fmt.Sprintf("nice %d (SCHED_FIFO refused: %v)", niceFallback, fifoErr), nil
			}
			return fmt.Sprintf("SCHED_FIFO priority %d", prio), nil
		}
	}
	return "", fmt.Errorf("threads kept appearing unraised after 100 sweeps of /proc/self/task")
}

// raiseThread raises one thread unless it already is; got: it changed.
func raiseThread(tid int, fifo *unix.SchedAttr, useFIFO bool) (bool, error) {
	if useFIFO {
		cur, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			return false, err
		}
		if cur.Policy == unix.SCHED_FIFO && cur.Priority == fifo.Priority {
			return false, nil
		}
		return true, unix.SchedSetAttr(tid, fifo, 0)
	}
	// getpriority's raw value is 20 - nice.
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return false, err
	}
	if 20-cur == niceFallback {
		return false, nil
	}
	return true, unix.Setpriority(unix.PRIO_PROCESS, tid, niceFallback)
}

// threads lists this process's thread ids.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
