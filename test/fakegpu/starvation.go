package fakegpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RunQueueWait is how long the threads of process pid have waited, runnable,
// for a CPU since they started (the second field of each thread's
// /proc/<pid>/task/<tid>/schedstat, summed). Simulated GPU time is exact, but
// a tenant whose threads wait for a CPU cannot keep its queue full and loses
// its share of the device, as it would on real hardware: tests that judge
// shares on a loaded host compare this over their window (Starvation) to
// tell a starved measurement from a wrong one. Threads that exited are not
// counted.
func RunQueueWait(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return 0, fmt.Errorf("threads of %d: %w", pid, err)
	}
	var sum time.Duration
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "schedstat"))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, fmt.Errorf("schedstat of %d/%s: %q has no run-queue field", pid, task.Name(), b)
		}
		ns, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("schedstat of %d/%s: run-queue field %q: %w", pid, task.Name(), f[1], err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// Starvation follows processes over a window: the largest fraction of it that
// any of them spent waiting for a CPU. Safe for concurrent use.
type Starvation struct {
	mu    sync.Mutex
	procs map[int]mark
}

type mark struct {
	at   time.Time
	wait time.Duration
}

// WatchStarvation starts a window over pids.
func WatchStarvation(pids ...int) *Starvation {
	s := &Starvation{procs: map[int]mark{}}
	for _, pid := range pids {
		s.Add(pid)
	}
	return s
}

// Add follows pid from now on (a process already gone is left out).
func (s *Starvation) Add(pid int) {
	w, err := RunQueueWait(pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[pid] = mark{at: time.Now(), wait: w}
}

// Worst is the largest fraction (0..1) of its window so far that one of the
// processes waited for a CPU (summed over its threads). A process that has
// exited counts as 0.
func (s *Starvation) Worst() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	worst := 0.0
	for pid, m := range s.procs {
		w, err := RunQueueWait(pid)
		span := time.Since(m.at)
		if err != nil || span <= 0 {
			continue
		}
		worst = max(worst, float64(w-m.wait)/float64(span))
	}
	return worst
}
