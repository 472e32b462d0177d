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

// The slot owners feed the per-container utilisation series. A slot with start
// time 0 (a claim in progress) matches every process with that namespace pid
// on the node, and a forged slot can name another container's process: such
// a process must not be charged to the forger (it would show the victim's
// SM utilisation under the forger's labels, and a victim whose own slot names
// it would be charged to whichever key sorts last).
func TestOwnersIgnoreWildcardAndContestedSlots(t *testing.T) {
	state := t.TempDir()
	mkRegion(t, state, regiontest.Slot{PID: 1, StartTime: 50, UsedBytes: map[int]uint64{0: 7}}) // mem-...01: the victim
	dir := filepath.Join(statedir.Containers(state), "mem-0000000000000002")
	os.MkdirAll(dir, 0o755)
	hostile := filepath.Join(dir, statedir.RegionFile)
	region.CreateRegion(hostile)
	regiontest.Write(hostile, regiontest.Contents{Slots: []regiontest.Slot{
		{PID: 2, StartTime: 70, UsedBytes: map[int]uint64{0: 1}}, // its own
		{PID: 1, StartTime: 50, UsedBytes: map[int]uint64{0: 1}}, // forged: the victim's pid and start
		{PID: 3, StartTime: 0, UsedBytes: map[int]uint64{0: 1}},  // wildcard
	}})
	tab := hostproc.NewTable(
		hostproc.Process{PID: 100, NSPID: 1, StartTime: 50},
		hostproc.Process{PID: 200, NSPID: 2, StartTime: 70},
		hostproc.Process{PID: 300, NSPID: 3, StartTime: 80}, // another container's, no slot yet
	)
	r := &Reaper{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		scan: func(string) (*hostproc.Table, error) { return tab, nil }}
	defer r.Close()
	if _, _, err := r.Once(); err != nil {
		t.Fatal(err)
	}
	owners := r.Owners()
	if k, ok := owners[100]; ok {
		t.Errorf("a process two regions claim is owned by %s", k)
	}
	if k, ok := owners[300]; ok {
		t.Errorf("a process matched only by a start-time-0 slot is owned by %s", k)
	}
	if owners[200] != "mem-0000000000000002" {
		t.Errorf("owners %v", owners)
	}
}

// Each dead slot used to cost a full scan of /proc (to catch a process that
// claimed its slot after the first scan). A container rewrites its own region
// at will: 1024 dead slots per pass made the reaper read every process's
// stat and status 1024 times, starving the enforcement it shares a CPU limit
// with. A pass must scan a bounded number of times, and still reap them all.
func TestDeadSlotsDoNotCostAScanEach(t *testing.T) {
	state := t.TempDir()
	var slots []regiontest.Slot
	for i := range 200 {
		slots = append(slots, regiontest.Slot{PID: uint32(1000 + i), StartTime: 5, UsedBytes: map[int]uint64{0: 1}})
	}
	mkRegion(t, state, slots...)
	scans := 0
	r := &Reaper{StateDir: state, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		scan: func(string) (*hostproc.Table, error) { scans++; return hostproc.NewTable(), nil }}
	defer r.Close()
	procs, bytes, err := r.Once()
	if err != nil || procs != 200 || bytes != 200 {
		t.Fatalf("reaped %d slots, %d bytes (%v); want 200, 200", procs, bytes, err)
	}
	if scans > 2 {
		t.Errorf("%d scans of /proc for one pass over 200 dead slots; want at most 2", scans)
	}
}
