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
	"time"

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
	// scan reads the process table (hostproc.Scan; replaced in tests).
	scan func(procRoot string) (*hostproc.Table, error)
}

// Once reaps every region once and returns the totals.
func (r *Reaper) Once() (procs int, bytes uint64, err error) {
	entries, err := statedir.List(r.StateDir)
	if err != nil {
		return 0, 0, err
	}
	alive, err := r.liveness()
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		if e.Kind != "mem" {
			continue
		}
		p, b, err := reapRegion(e.Region(), alive)
		if err != nil {
			continue // the reader reports unusable files
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
	return procs, bytes, nil
}

func reapRegion(path string, alive region.Liveness) (procs int, bytes uint64, err error) {
	reg, err := region.OpenRegion(path)
	if err != nil {
		return 0, 0, err
	}
	defer reg.Close()
	err = region.Guard(path, func() { procs, bytes = reg.Reap(alive) })
	return procs, bytes, err
}

// liveness answers from a table scanned now, and on a miss scans again: a
// process that claimed its slot after the first scan began is in /proc by the
// time its slot was read (it existed before it claimed), so a table scanned
// after the read sees it. Misses are the dead slots, so the rescans are few.
func (r *Reaper) liveness() (region.Liveness, error) {
	scan := r.scan
	if scan == nil {
		scan = hostproc.Scan
	}
	first, err := scan(r.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	return func(pid uint32, start uint64) bool {
		if first.Alive(pid, start) {
			return true
		}
		again, err := scan(r.ProcRoot)
		if err != nil {
			return true // cannot tell: never take a live process's usage away
		}
		return again.Alive(pid, start)
	}, nil
}

// Run reaps every interval until ctx ends.
func (r *Reaper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, _, err := r.Once(); err != nil {
			r.Log.Warn("reap failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
