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

func TestWriteBalloonWaitReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	if err := region.CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	if err := WriteBalloonWait(path, 3, 5<<30, 2, 12345); err != nil {
		t.Fatal(err)
	}
	r, err := region.OpenRegion(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := r.BalloonWait(3)
	if w.WantBytes != 5<<30 || w.Waiters != 2 || w.WaitSinceNs != 12345 || !w.Waiting() {
		t.Fatalf("read back %+v", w)
	}
	if other := r.BalloonWait(2); other.Waiting() {
		t.Fatalf("device 2 shows a wait: %+v", other)
	}
	if err := WriteBalloonPoll(path, 3, 777); err != nil {
		t.Fatal(err)
	}
	seen := r.BalloonWait(3)
	if seen.PollNs != 777 || seen.LastSignNs() != 12345 {
		t.Fatalf("poll read back %+v", seen)
	}
	if err := WriteBalloonPoll(path, 3, 20000); err != nil { // a waiter polled since
		t.Fatal(err)
	}
	if r.ClearBalloonWait(3, seen) || !r.BalloonWait(3).Waiting() {
		t.Fatalf("cleared although a waiter polled after the reading: %+v", r.BalloonWait(3))
	}
	if !r.ClearBalloonWait(3, r.BalloonWait(3)) {
		t.Fatal("not cleared on a current reading")
	}
	if w := r.BalloonWait(3); w.Waiting() || w.WantBytes != 0 || w.WaitSinceNs != 0 || w.PollNs != 0 {
		t.Fatalf("after clearing: %+v", w)
	}
}

// TestWriteBalloonEndedReadsBackAndWraps: the ended-wait words read back lane by
// lane, and differences between readings are taken per lane modulo its width (a
// lane that wrapped counts what it went through, never a neighbour's).
func TestWriteBalloonEndedReadsBackAndWraps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	if err := region.CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	r, err := region.OpenRegion(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := [region.BalloonWaitLanes]uint16{0: 65535, 3: 7, 7: 1}
	if err := WriteBalloonEnded(path, 1, before, 0xffffffff, 4, 1000); err != nil {
		t.Fatal(err)
	}
	prev := r.BalloonWait(1)
	if prev.Hist != before || prev.WaitsGranted != 0xffffffff || prev.WaitsExpired != 4 || prev.WaitNsTotal != 1000 || prev.Ended() != 0xffffffff+4 {
		t.Fatalf("read back %+v", prev)
	}
	if err := WriteBalloonEnded(path, 1, [region.BalloonWaitLanes]uint16{0: 1, 3: 7, 7: 2}, 1, 5, 4000); err != nil {
		t.Fatal(err)
	}
	lanes, granted, expired, ns := r.BalloonWait(1).Since(prev)
	if lanes != [region.BalloonWaitLanes]uint64{0: 2, 7: 1} || granted != 2 || expired != 1 || ns != 3000 {
		t.Fatalf("since: lanes %v granted %d expired %d ns %d", lanes, granted, expired, ns)
	}
	if other := r.BalloonWait(0); other.Hist != [region.BalloonWaitLanes]uint16{} || other.Ended() != 0 {
		t.Fatalf("device 0 touched: %+v", other)
	}
}

func TestMapComputeIsReadBackByRegion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	if err := region.CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	w, err := MapCompute(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := region.OpenRegion(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.Set(0, 11, 22, 3)
	w.Set(15, 44, 55, 6)
	if c := r.Compute(0); c.BusyNs != 11 || c.DemandNs != 22 || c.Inflight != 3 || c.Launches != 0 {
		t.Fatalf("device 0: %+v", c)
	}
	if c := r.Compute(15); c.BusyNs != 44 || c.DemandNs != 55 || c.Inflight != 6 {
		t.Fatalf("device 15: %+v", c)
	}
	if c := r.Compute(1); c != (region.Compute{}) {
		t.Fatalf("device 1 written: %+v", c)
	}
}
