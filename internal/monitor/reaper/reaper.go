// Package reaper gives dead processes' device memory back to their containers:
// it clears the region slots of processes that no longer exist, as
// TESSERA_REAPER_NODE (tessera_abi.h). The driver frees a dead process's memory
// itself, so zeroing its slot is exact. Slot pids are pids in the container's
// namespace; the host process table (hostproc) recognises them by innermost
// pid and start time.
package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// Reaper clears dead slots in every region of a state directory.
type Reaper struct {
	StateDir string
	ProcRoot string
	Log      *slog.Logger
	// OnReap sees each region where slots were cleared (metrics, tests).
	OnReap func(key string, procs int, bytes uint64)
	// Active says whether this monitor holds the node lease (package
	// lease); a standby reads the regions for Owners but clears nothing:
	// the protocol has one TESSERA_REAPER_NODE. Nil: always active.
	Active func() bool
	// scan reads the process table (hostproc.Scan; replaced in tests).
	scan func(procRoot string) (*hostproc.Table, error)
	// owners maps the host pid of each live slot owner to its state
	// directory key, as of the last pass (the collector attributes NVML's
	// per-process utilisation with it).
	ownersMu sync.Mutex
	owners   map[uint32]string
	// watched holds a pidfd for every live process that owns a slot: Run
	// wakes as soon as one exits instead of waiting for the next interval.
	watched map[uint32]int
}

// Once reaps every region once and returns the totals.
func (r *Reaper) Once() (procs int, bytes uint64, err error) {
	entries, err := statedir.List(r.StateDir)
	if err != nil {
		return 0, 0, err
	}
	table, err := r.scanner()(r.ProcRoot)
	if err != nil {
		return 0, 0, fmt.Errorf("reaper: %w", err)
	}
	claims := map[uint32]map[string]bool{} // host pid → keys whose slots name it
	for _, e := range entries {
		if e.Kind != "mem" {
			continue
		}
		reap := reapRegion
		if r.Active != nil && !r.Active() {
			reap = readRegion
		}
		p, b, left, err := reap(e.Region(), table, r.rescan)
		if err != nil {
			continue // the reader reports unusable files
		}
		for _, slot := range left {
			if slot.StartTime == 0 {
				continue // a claim in progress names no process (any start time would match)
			}
			for _, hp := range table.Match(slot.PID, slot.StartTime) {
				if claims[hp.PID] == nil {
					claims[hp.PID] = map[string]bool{}
				}
				claims[hp.PID][e.Key] = true
			}
		}
		if p > 0 {
			r.Log.Info("reclaimed dead processes' slots", "key", e.Key, "processes", p, "bytes", b)
			if r.OnReap != nil {
				r.OnReap(e.Key, p, b)
			}
		}
		procs += p
		bytes += b
	}
	owners := map[uint32]string{}
	watched := map[uint32]string{}
	for pid, keys := range claims {
		for key := range keys {
			watched[pid] = key
			if len(keys) == 1 {
				// Only a process one region names is charged: when
				// two regions name it, one slot is forged.
				owners[pid] = key
			}
		}
	}
	r.watch(watched)
	r.ownersMu.Lock()
	r.owners = owners
	r.ownersMu.Unlock()
	return procs, bytes, nil
}

// Owners returns the host pids of the live slot owners with their keys, as
// of the last pass.
func (r *Reaper) Owners() map[uint32]string {
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	return r.owners
}

// readRegion returns a region's slots and clears nothing (a standby's pass).
func readRegion(path string, _ *hostproc.Table, _ func() *hostproc.Table) (int, uint64, []region.ProcUsage, error) {
	reg, err := region.OpenRegion(path)
	if err != nil {
		return 0, 0, nil, err
	}
	defer reg.Close()
	var slots []region.ProcUsage
	err = region.Guard(path, func() { slots = reg.Usage().Procs })
	return 0, 0, slots, err
}

// reapRegion clears a region's dead slots and returns the slots left.
//
// A process that claimed its slot after first was scanned is missing from
// it. The slots are read once (a snapshot) before one more scan: a process
// named by a snapshot slot existed before that scan began, so the second
// scan decides it. A slot claimed after the snapshot is left for the next
// pass (never take a live process's usage away). One extra scan per region
// with misses, not one per dead slot: a container rewriting its region with
// dead slots cannot make the reaper read /proc a thousand times a pass.
func reapRegion(path string, first *hostproc.Table, rescan func() *hostproc.Table) (procs int, bytes uint64, left []region.ProcUsage, err error) {
	reg, err := region.OpenRegion(path)
	if err != nil {
		return 0, 0, nil, err
	}
	defer reg.Close()
	var snapshot []region.ProcUsage
	if err := region.Guard(path, func() { snapshot = reg.Usage().Procs }); err != nil {
		return 0, 0, nil, err
	}
	type slotID struct {
		pid   uint32
		start uint64
	}
	missed := map[slotID]bool{}
	for _, p := range snapshot {
		if !first.Alive(p.PID, p.StartTime) {
			missed[slotID{p.PID, p.StartTime}] = true
		}
	}
	var again *hostproc.Table
	if len(missed) > 0 {
		if again = rescan(); again == nil {
			return 0, 0, snapshot, nil // cannot tell: reap nothing now
		}
	}
	alive := func(pid uint32, start uint64) bool {
		if first.Alive(pid, start) {
			return true
		}
		if !missed[slotID{pid, start}] {
			return true // claimed after the snapshot: judged next pass
		}
		return again.Alive(pid, start)
	}
	err = region.Guard(path, func() {
		procs, bytes = reg.Reap(alive)
		left = reg.Usage().Procs
	})
	return procs, bytes, left, err
}

// watch keeps a pidfd open for each slot owner (host pids) and closes the
// others. A process that cannot be opened is simply not watched: the interval
// still reaps it.
func (r *Reaper) watch(owners map[uint32]string) {
	if r.watched == nil {
		r.watched = map[uint32]int{}
	}
	for pid, fd := range r.watched {
		if _, ok := owners[pid]; !ok {
			unix.Close(fd)
			delete(r.watched, pid)
		}
	}
	for pid := range owners {
		if _, ok := r.watched[pid]; ok {
			continue
		}
		if fd, err := unix.PidfdOpen(int(pid), 0); err == nil {
			r.watched[pid] = fd
		}
	}
	// An owner that has exited but whose slot this pass could not clear
	// (an incomplete process table) would wake every wait at once: leave
	// it to the interval.
	for pid, fd := range r.watched {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n > 0 {
			unix.Close(fd)
			delete(r.watched, pid)
		}
	}
}

// wait returns when a watched process exits or after timeout.
func (r *Reaper) wait(timeout time.Duration) {
	fds := make([]unix.PollFd, 0, len(r.watched))
	for _, fd := range r.watched {
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	if len(fds) == 0 {
		time.Sleep(timeout)
		return
	}
	_, _ = unix.Poll(fds, int(timeout.Milliseconds()))
}

// Close releases the pidfds.
func (r *Reaper) Close() {
	r.watch(nil)
}

func (r *Reaper) scanner() func(string) (*hostproc.Table, error) {
	if r.scan != nil {
		return r.scan
	}
	return hostproc.Scan
}

// rescan reads the process table again; nil when it cannot be read.
func (r *Reaper) rescan() *hostproc.Table {
	t, err := r.scanner()(r.ProcRoot)
	if err != nil {
		r.Log.Warn("reaper: process table", "err", err)
		return nil
	}
	return t
}

// Run reaps every interval, and at once when a slot's owner exits, until
// ctx ends.
func (r *Reaper) Run(ctx context.Context, interval time.Duration) {
	defer r.Close()
	for ctx.Err() == nil {
		if _, _, err := r.Once(); err != nil {
			r.Log.Warn("reap failed", "err", err)
		}
		// Short polls keep shutdown prompt; an exit ends the wait early.
		deadline := time.Now().Add(interval)
		for ctx.Err() == nil && time.Now().Before(deadline) {
			before := len(r.watched)
			r.wait(min(time.Until(deadline), 200*time.Millisecond))
			if before > 0 && r.exited() {
				break
			}
		}
	}
}

// exited says whether some watched process has exited.
func (r *Reaper) exited() bool {
	fds := make([]unix.PollFd, 0, len(r.watched))
	for _, fd := range r.watched {
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	n, _ := unix.Poll(fds, 0)
	return n > 0
}
