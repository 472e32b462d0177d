package regiontest

import (
	"path/filepath"
	"testing"

	"github.com/tessera-gpu/tessera/internal/region"
)

func TestWriteIsReadBackByRegion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	if err := region.CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	err := Write(path, Contents{
		Refused: map[int]uint64{1: 3},
		Peak:    map[int]uint64{0: 100, 15: 7},
		Slots:   []Slot{{PID: 11, StartTime: 5, UsedBytes: map[int]uint64{0: 40, 15: 2}}, {PID: 12, StartTime: 6, UsedBytes: map[int]uint64{0: 2}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := region.OpenRegion(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	u := r.Usage()
	if u.Refused[1] != 3 || u.PeakBytes[0] != 100 || u.PeakBytes[15] != 7 || u.UsedBytes[0] != 42 || u.UsedBytes[15] != 2 {
		t.Fatalf("usage %+v", u)
	}
	if len(u.Procs) != 2 || u.Procs[1].PID != 12 || u.Procs[1].StartTime != 6 {
		t.Fatalf("procs %+v", u.Procs)
	}
	if err := MarkReaping(path, 1); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); len(u.Procs) != 1 {
		t.Fatalf("a slot being reaped is still listed: %+v", u.Procs)
	}
	if p, b := r.Reap(func(uint32, uint64) bool { return true }); p != 1 || b != 2 {
		t.Fatalf("restarted node reaper finished %d slots, %d bytes; want 1, 2", p, b)
	}
}
