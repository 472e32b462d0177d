package accounting

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

// validEntry makes a mem entry with one GPU capped at 1 GiB and a slot using 5 bytes.
func validEntry(t testing.TB, stateDir, key string) statedir.Entry {
	dir := filepath.Join(statedir.Containers(stateDir), key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := statedir.Entry{Key: key, Kind: "mem", Dir: dir}
	if err := region.WriteLimits(e.Limits(), []region.DeviceLimit{{UUID: "GPU-a", MemLimitBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	if err := region.CreateRegion(e.Region()); err != nil {
		t.Fatal(err)
	}
	if err := regiontest.Write(e.Region(), regiontest.Contents{Slots: []regiontest.Slot{{PID: 7, StartTime: 9, UsedBytes: map[int]uint64{0: 5}}}}); err != nil {
		t.Fatal(err)
	}
	return e
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func TestBadFilesAreSkippedWithALogLineAndACount(t *testing.T) {
	patch := func(off int64, v uint64) func(path string) {
		return func(path string) {
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			defer f.Close()
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], v)
			f.WriteAt(b[:], off)
		}
	}
	cases := []struct {
		name, file, reason string
		spoil              func(path string)
	}{
		{"truncated region", statedir.RegionFile, SkipTruncated, func(p string) { os.Truncate(p, 100) }},
		{"empty region", statedir.RegionFile, SkipTruncated, func(p string) { os.Truncate(p, 0) }},
		{"foreign region", statedir.RegionFile, SkipForeign, patch(0, 0x4141414141414141)},
		{"wrong-version region", statedir.RegionFile, SkipVersion, patch(8, 99|uint64(1)<<40)},
		{"corrupt region size field", statedir.RegionFile, SkipCorrupt, patch(12, 0)},
		{"corrupt region slot count", statedir.RegionFile, SkipCorrupt, patch(16, 16|uint64(5)<<32)},
		{"foreign limits", statedir.LimitsFile, SkipForeign, patch(0, 1)},
		{"limits with too many devices", statedir.LimitsFile, SkipCorrupt, patch(24, 17)},
		{"limits with a UUID that is not UTF-8", statedir.LimitsFile, SkipCorrupt, patch(96, 0xfffefdfc)},
		{"region is a directory", statedir.RegionFile, SkipUnreadable, func(p string) { os.Remove(p); os.Mkdir(p, 0o755) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			e := validEntry(t, state, "mem-0000000000000001")
			validEntry(t, state, "mem-0000000000000002")
			c.spoil(filepath.Join(e.Dir, c.file))
			var log logBuf
			var skips []Skip
			r := &Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(&log, nil)), OnSkip: func(s Skip) { skips = append(skips, s) }}
			for range 3 {
				allocs, err := r.ReadAll()
				if err != nil || len(allocs) != 1 || allocs[0].Entry.Key != "mem-0000000000000002" || allocs[0].GPUs[0].UsedBytes != 5 {
					t.Fatalf("ReadAll = %+v, %v; want only the good entry", allocs, err)
				}
			}
			if len(skips) != 3 || skips[0].Reason != c.reason || skips[0].File != c.file {
				t.Fatalf("skips %+v, want 3 × %s/%s", skips, c.file, c.reason)
			}
			if got := strings.Count(log.String(), "state file skipped"); got != 1 {
				t.Errorf("%d log lines for 3 reads of one bad file, want 1:\n%s", got, log.String())
			}
			if !strings.Contains(log.String(), "reason="+c.reason) || !strings.Contains(log.String(), e.Key) {
				t.Errorf("log line does not name the key and reason: %s", log.String())
			}
		})
	}
}

// A container shrinks its region while the monitor keeps it mapped: the next
// read faults, which costs one skipped file, not the monitor.
func TestRegionShrunkWhileMappedIsSkipped(t *testing.T) {
	state := t.TempDir()
	e := validEntry(t, state, "mem-0000000000000003")
	var skips []Skip
	r := &Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(discard{}, nil)), OnSkip: func(s Skip) { skips = append(skips, s) }}
	if allocs, _ := r.ReadAll(); len(allocs) != 1 {
		t.Fatal("the valid entry did not read")
	}
	if err := os.Truncate(e.Region(), 4096); err != nil {
		t.Fatal(err)
	}
	if allocs, _ := r.ReadAll(); len(allocs) != 0 || len(skips) != 1 || skips[0].Reason != SkipTruncated {
		t.Fatalf("after shrinking: %d allocations, skips %+v", len(allocs), skips)
	}
	// Restored (the plugin recreates it): read again.
	os.Remove(e.Region())
	validEntry(t, state, "mem-0000000000000003")
	if allocs, _ := r.ReadAll(); len(allocs) != 1 {
		t.Fatalf("a recreated region is not read: skips %+v", skips)
	}
}

// FuzzReadRegion overlays arbitrary bytes on the start of a valid region (its
// header and first slots), optionally cut short, and reads it the way a scrape
// does: it must be skipped with a reason or read, never crash, and a file
// that reads must have passed the header checks.
func FuzzReadRegion(f *testing.F) {
	state := f.TempDir()
	e := validEntry(f, state, "mem-00000000000000ff")
	template, err := os.ReadFile(e.Region())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(template[:64], uint32(len(template)))
	f.Add([]byte("TSREGION"), uint32(len(template)))
	f.Add(template[:32], uint32(31))
	f.Add(append(append([]byte(nil), template[:24]...), 0xff, 0xff, 0xff, 0xff), uint32(len(template)))
	f.Fuzz(func(t *testing.T, head []byte, size uint32) {
		data := append([]byte(nil), template...)
		copy(data, head)
		data = data[:min(int(size), len(data))]
		if err := os.WriteFile(e.Region(), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var skipped []Skip
		r := &Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(discard{}, nil)), OnSkip: func(s Skip) { skipped = append(skipped, s) }}
		a, ok := r.Read(e)
		if ok == (len(skipped) > 0) {
			t.Fatalf("read %v with skips %+v", ok, skipped)
		}
		if ok {
			if binary.LittleEndian.Uint64(data) != region.RegionMagic || len(a.GPUs) != 1 {
				t.Fatalf("accepted a region with magic %#x, GPUs %+v", binary.LittleEndian.Uint64(data), a.GPUs)
			}
			return
		}
		if skipped[0].Reason == SkipUnreadable {
			t.Fatalf("a bad region not classified: %v", skipped[0].Err)
		}
	})
}

// FuzzReadLimits does the same for the limits file.
func FuzzReadLimits(f *testing.F) {
	state := f.TempDir()
	e := validEntry(f, state, "mem-00000000000000fe")
	template, err := os.ReadFile(e.Limits())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(template[:40], uint32(len(template)))
	f.Add([]byte{}, uint32(10))
	f.Fuzz(func(t *testing.T, head []byte, size uint32) {
		data := append([]byte(nil), template...)
		copy(data, head)
		data = data[:min(int(size), len(data))]
		if err := os.WriteFile(e.Limits(), data, 0o644); err != nil {
			t.Fatal(err)
		}
		r := &Reader{StateDir: state, Log: slog.New(slog.NewTextHandler(discard{}, nil))}
		if a, ok := r.Read(e); ok && len(a.GPUs) > region.MaxDevices {
			t.Fatalf("%d GPUs", len(a.GPUs))
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
