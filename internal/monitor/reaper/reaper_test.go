package reaper

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

func mkRegion(t *testing.T, state string, slots ...regiontest.Slot) string {
	dir := filepath.Join(statedir.Containers(state), "mem-0000000000000001")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, statedir.RegionFile)
	if err := region.CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	if err := regiontest.Write(path, regiontest.Contents{Slots: slots}); err != nil {
		t.Fatal(err)
	}
	return path
}

// A process that claims its slot after the reaper's first scan of /proc is
// not in that scan; the reaper must look again before taking its usage.
func TestSlotClaimedAfterTheScanIsNotReaped(t *testing.T) {
	state := t.TempDir()
	mkRegion(t, state,
		regiontest.Slot{PID: 40, StartTime: 4, UsedBytes: map[int]uint64{0: 100}}, // started after the first scan
		regiontest.Slot{PID: 41, StartTime: 5, UsedBytes: map[int]uint64{0: 7}},   // dead
	)
	scans := 0
	r := &Reaper{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		scan: func(string) (*hostproc.Table, error) {
			scans++
			if scans == 1 {
				return hostproc.NewTable(), nil
			}
			return hostproc.NewTable(hostproc.Process{PID: 9040, NSPID: 40, StartTime: 4}), nil
		}}
	procs, bytes, err := r.Once()
	if err != nil || procs != 1 || bytes != 7 {
		t.Fatalf("reaped %d slots, %d bytes (%v); want only the dead one (1, 7)", procs, bytes, err)
	}
}

func TestIncompleteProcessTableReapsNothing(t *testing.T) {
	state := t.TempDir()
	mkRegion(t, state, regiontest.Slot{PID: 41, StartTime: 5, UsedBytes: map[int]uint64{0: 7}})
	r := &Reaper{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		scan: func(string) (*hostproc.Table, error) {
			t := hostproc.NewTable()
			t.Incomplete = true
			return t, nil
		}}
	if procs, _, _ := r.Once(); procs != 0 {
		t.Fatalf("reaped %d slots with an unreadable process table", procs)
	}
}

func TestCorruptRegionIsSkipped(t *testing.T) {
	state := t.TempDir()
	path := mkRegion(t, state, regiontest.Slot{PID: 41, StartTime: 5, UsedBytes: map[int]uint64{0: 7}})
	os.Truncate(path, 1000)
	r := &Reaper{StateDir: state, ProcRoot: "/proc", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if procs, _, err := r.Once(); procs != 0 || err != nil {
		t.Fatalf("%d, %v", procs, err)
	}
}
