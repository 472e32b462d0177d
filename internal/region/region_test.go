package region

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"unsafe"
)

func TestWriteLimitsCreatesThenUpdatesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits")
	devs := []DeviceLimit{{UUID: "GPU-a", MemLimitBytes: 8 << 30}, {UUID: "GPU-b", CoreLimitPct: 30}}
	if err := WriteLimits(path, devs); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	l, err := OpenLimits(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gen := l.Generation()

	devs[0].MemLimitBytes = 4 << 30
	if err := WriteLimits(path, devs); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Fatal("WriteLimits replaced the file; mapped readers would keep the old one")
	}
	// The already-open mapping sees the change: that is what the hook relies on.
	got := l.Devices()
	if got[0].MemLimitBytes != 4<<30 || got[1].CoreLimitPct != 30 || got[1].UUID != "GPU-b" {
		t.Fatalf("devices after update: %+v", got)
	}
	if l.Generation() <= gen {
		t.Fatalf("generation %d did not advance past %d", l.Generation(), gen)
	}
	if err := l.SetMemLimit("GPU-b", 1<<30); err != nil {
		t.Fatal(err)
	}
	if i, _ := l.Index("GPU-b"); l.Devices()[i].MemLimitBytes != 1<<30 {
		t.Fatal("SetMemLimit not visible")
	}
}

func TestWriteLimitsRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]DeviceLimit{
		"empty uuid":    {{UUID: ""}},
		"core over 100": {{UUID: "GPU-a", CoreLimitPct: 101}},
		"too many":      make([]DeviceLimit, MaxDevices+1),
	}
	for name, devs := range cases {
		if err := WriteLimits(filepath.Join(dir, name), devs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	path := filepath.Join(dir, "reorder")
	if err := WriteLimits(path, []DeviceLimit{{UUID: "GPU-a"}, {UUID: "GPU-b"}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteLimits(path, []DeviceLimit{{UUID: "GPU-b"}, {UUID: "GPU-a"}}); err == nil {
		t.Error("an update that reorders devices was accepted")
	}
}

func TestOpenRejectsDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "region")
	if err := CreateRegion(good); err != nil {
		t.Fatal(err)
	}
	img, _ := os.ReadFile(good)
	mutate := func(name string, f func([]byte) []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, f(bytes.Clone(img)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		path string
		want error
	}{
		{mutate("truncated", func(b []byte) []byte { return b[:100] }), ErrTruncated},
		{mutate("magic", func(b []byte) []byte { b[0] ^= 0xff; return b }), ErrBadMagic},
		{mutate("version", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 99); return b }), ErrBadVersion},
		{mutate("size", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 7); return b }), ErrBadSize},
	}
	for _, c := range cases {
		if _, err := OpenRegion(c.path); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", filepath.Base(c.path), err, c.want)
		}
	}
	if _, err := OpenRegion(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file opened")
	}
	if _, err := OpenLimits(good); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBadMagic) {
		t.Errorf("a region opened as a limits file: %v", err)
	}
	if err := CreateRegion(mutate("garbage", func(b []byte) []byte { b[0] = 1; return b })); !errors.Is(err, ErrBadMagic) {
		t.Errorf("CreateRegion over a damaged file: %v", err)
	}
}

// charge stands in for a hook process: it claims slot i for pid and charges bytes.
func charge(r *Region, i int, pid uint32, start uint64, dev int, n uint64) {
	s := &r.raw.Slots[i]
	atomic.StoreUint32(&s.PID, pid)
	atomic.StoreUint64(&s.StartTime, start)
	atomic.AddUint64(&s.UsedBytes[dev], n)
	for {
		hwm := atomic.LoadUint32(&r.raw.SlotHWM)
		if int(hwm) > i || atomic.CompareAndSwapUint32(&r.raw.SlotHWM, hwm, uint32(i+1)) {
			return
		}
	}
}

// newRegion creates an empty region file and opens it for the test.
func newRegion(t *testing.T) (*Region, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "region")
	if err := CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRegion(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, path
}

func TestUsageAndReap(t *testing.T) {
	r, _ := newRegion(t)
	charge(r, 0, 100, 7, 0, 1<<20)
	charge(r, 1, 200, 9, 0, 3<<20)
	charge(r, 1, 200, 9, 2, 5<<20)
	charge(r, 4, 300, 11, 2, 1<<10)
	// a slot left half-cleared by a monitor that died
	atomic.StoreUint32(&r.raw.Slots[5].PID, SlotReclaimBit|ReaperNode)
	atomic.StoreUint64(&r.raw.Slots[5].UsedBytes[1], 42)
	atomic.StoreUint32(&r.raw.SlotHWM, 6)

	u := r.Usage()
	if u.UsedBytes[0] != 4<<20 || u.UsedBytes[2] != 5<<20+1<<10 || len(u.Procs) != 3 {
		t.Fatalf("usage %+v", u)
	}
	dead := map[uint32]bool{200: true}
	procs, bytes := r.Reap(func(pid uint32, start uint64) bool { return !dead[pid] })
	if procs != 2 || bytes != 3<<20+5<<20+42 {
		t.Fatalf("reaped %d procs, %d bytes", procs, bytes)
	}
	u = r.Usage()
	if u.UsedBytes[0] != 1<<20 || u.UsedBytes[2] != 1<<10 || len(u.Procs) != 2 || u.ReapedProcs != 2 {
		t.Fatalf("after reap: %+v", u)
	}
	if atomic.LoadUint32(&r.raw.Slots[1].PID) != 0 || atomic.LoadUint32(&r.raw.Slots[5].PID) != 0 {
		t.Fatal("reaped slots not freed")
	}
	// A slot being cleared by a container process is left alone.
	atomic.StoreUint32(&r.raw.Slots[2].PID, SlotReclaimBit|55)
	atomic.StoreUint32(&r.raw.SlotHWM, 6)
	if procs, _ := r.Reap(func(uint32, uint64) bool { return false }); procs != 2 {
		t.Fatalf("reaped %d, want the two owned slots only", procs)
	}
	if atomic.LoadUint32(&r.raw.Slots[2].PID) != SlotReclaimBit|55 {
		t.Fatal("a container reaper's slot was taken")
	}
}

// TestReapExpiresLaunchSequenceWords: a dead process's seq_until words each
// hold one count of its device's in-flight launch sequences (tessera_abi.h,
// "Launch sequences"); reaping its slot takes those counts back, whatever
// the words' times, and never below 0.
func TestReapExpiresLaunchSequenceWords(t *testing.T) {
	r, _ := newRegion(t)
	charge(r, 0, 100, 7, 0, 1<<20)
	charge(r, 1, 200, 9, 0, 1<<20)
	atomic.StoreUint64(&r.raw.Compute[2].Inflight, 3)
	atomic.StoreUint64(&r.raw.Compute[5].Inflight, 0) // taken back already by someone
	s := &r.raw.Slots[1]
	atomic.StoreUint64(&s.SeqUntil[0], ^uint64(SeqDevMask)|2) // far ahead: still expired
	atomic.StoreUint64(&s.SeqUntil[3], 0x100|2)
	atomic.StoreUint64(&s.SeqUntil[5], 0x100|5)
	// The live process's word is not touched.
	atomic.StoreUint64(&r.raw.Slots[0].SeqUntil[1], 0x100|2)
	if procs, _ := r.Reap(func(pid uint32, _ uint64) bool { return pid != 200 }); procs != 1 {
		t.Fatalf("reaped %d, want 1", procs)
	}
	if got := atomic.LoadUint64(&r.raw.Compute[2].Inflight); got != 1 {
		t.Errorf("device 2 in flight %d after reaping two of its words from 3, want 1", got)
	}
	if got := atomic.LoadUint64(&r.raw.Compute[5].Inflight); got != 0 {
		t.Errorf("device 5 in flight %d, want 0 (floored)", got)
	}
	for k, v := range s.SeqUntil {
		if v != 0 {
			t.Errorf("reaped slot's word %d is %#x, want 0", k, v)
		}
	}
	if atomic.LoadUint64(&r.raw.Slots[0].SeqUntil[1]) == 0 {
		t.Error("a live process's word was cleared")
	}
}

func TestRegionSizeIsStable(t *testing.T) {
	if unsafe.Sizeof(rawRegion{}) != 197152+2*16*64 || unsafe.Sizeof(rawLimits{}) != 2656 {
		t.Fatalf("layout changed (region %d, limits %d): bump ABIVersion and update the header",
			unsafe.Sizeof(rawRegion{}), unsafe.Sizeof(rawLimits{}))
	}
}

// FuzzOpen feeds arbitrary file contents to both readers: they must return an
// error or a valid mapping, never panic.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	seedR := filepath.Join(dir, "r")
	seedL := filepath.Join(dir, "l")
	if err := CreateRegion(seedR); err != nil {
		f.Fatal(err)
	}
	if err := WriteLimits(seedL, []DeviceLimit{{UUID: "GPU-x", MemLimitBytes: 1}}); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{seedR, seedL} {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte("TSREGION"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if r, err := OpenRegion(p); err == nil {
			_ = r.Usage()
			r.Close()
		}
		if l, err := OpenLimits(p); err == nil {
			_ = l.Devices()
			l.Close()
		}
	})
}

func TestGuardTurnsAFaultOnAShrunkFileIntoAnError(t *testing.T) {
	r, path := newRegion(t)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	err := Guard(path, func() { _ = r.Usage() })
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("Guard = %v, want ErrTruncated", err)
	}
	if err := Guard(path, func() {}); err != nil {
		t.Fatalf("no fault: %v", err)
	}
}
