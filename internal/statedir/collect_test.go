package statedir

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// mkEntry makes a container directory with a region whose slot 0 is taken by
// pid (0: no slot) and backdates it by age.
func mkEntry(t *testing.T, stateDir, key string, pid uint32, age time.Duration) {
	t.Helper()
	dir := filepath.Join(Containers(stateDir), key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, RegionFile)
	if err := region.CreateRegion(path); err != nil {
		t.Fatal(err)
	}
	if pid != 0 {
		claimSlot(t, path, pid)
	}
	old := time.Now().Add(-age)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
}

func exists(dir string) bool { _, err := os.Stat(dir); return err == nil }

func TestCollectorRule(t *testing.T) {
	state := t.TempDir()
	mkEntry(t, state, "mem-live", 0, time.Hour)
	mkEntry(t, state, "mem-gone", 0, time.Hour)
	mkEntry(t, state, "mem-young", 0, 0)
	mkEntry(t, state, "mem-held", 4242, time.Hour)
	mkEntry(t, state, "mem-deadslot", 4343, time.Hour)
	alive := func(pid uint32, _ uint64) bool { return pid == 4242 }
	// The clock is stepped past the grace: with a wall-clock grace, a test
	// descheduled between refreshing mem-young and collecting (a loaded
	// machine) would see mem-young expire.
	now := time.Now()
	c := &Collector{StateDir: state, Grace: time.Minute, Log: quiet, now: func() time.Time { return now }}
	live := map[string]bool{"mem-live": true}
	if got := c.Collect(live, alive); len(got) != 0 {
		t.Fatalf("first sighting removed %v: the grace period counts across calls", got)
	}
	now = now.Add(time.Minute + time.Second)
	os.Chtimes(c.Path("mem-young"), now, now) // allocated again just now: its mtime protects it
	got := c.Collect(live, alive)
	want := map[string]bool{"mem-gone": true, "mem-deadslot": true}
	if len(got) != len(want) {
		t.Fatalf("removed %v, want %v", got, want)
	}
	for _, k := range got {
		if !want[k] || exists(c.Path(k)) {
			t.Errorf("removed %s (still there: %v)", k, exists(c.Path(k)))
		}
	}
	for _, k := range []string{"mem-live", "mem-young", "mem-held"} {
		if !exists(c.Path(k)) {
			t.Errorf("%s removed", k)
		}
	}
	// Every slot counts as alive without a liveness: nothing with a slot goes.
	delete(live, "mem-live")
	c.Collect(live, nil)
	now = now.Add(time.Minute + time.Second)
	c.Collect(live, nil)
	if !exists(c.Path("mem-held")) {
		t.Error("a region with a slot removed without a liveness check")
	}
	if exists(c.Path("mem-live")) {
		t.Error("a region without slots, unlisted for the grace period, kept")
	}
}

func TestListSkipsFilesAndMissingDir(t *testing.T) {
	state := t.TempDir()
	if es, err := List(state); err != nil || len(es) != 0 {
		t.Fatalf("no containers dir: %v %v", es, err)
	}
	mkEntry(t, state, "core-b", 0, 0)
	mkEntry(t, state, "mem-a", 0, 0)
	os.WriteFile(filepath.Join(Containers(state), "stray"), nil, 0o644)
	es, err := List(state)
	if err != nil || len(es) != 2 || es[0].Key != "core-b" || es[0].Kind != "core" || es[1].Kind != "mem" {
		t.Fatalf("%+v %v", es, err)
	}
}

// TestCollectorDoesNotRemoveUnderAWriter: an Allocate handed the IDs of a
// directory that is due for removal refreshes it (MkdirAll, mtime, files).
// If it does so while Collect is between its check of the directory and
// its removal, Collect must not remove the fresh files: the container would
// start with missing bind-mount sources (created as empty directories by
// the runtime) and its hook would fail closed. The writer here is that
// Allocate, run while Collect consults the region's liveness (the window).
func TestCollectorDoesNotRemoveUnderAWriter(t *testing.T) {
	state := t.TempDir()
	mkEntry(t, state, "mem-reused", 4343, time.Hour)
	writers := &sync.RWMutex{}
	c := &Collector{StateDir: state, Grace: time.Minute, Log: quiet, Writers: writers,
		missing: map[string]time.Time{"mem-reused": time.Now().Add(-time.Hour)}}
	limits := filepath.Join(c.Path("mem-reused"), LimitsFile)
	allocated := make(chan struct{})
	allocate := func() { // what allocation.Builder does for a directory
		defer close(allocated)
		writers.RLock()
		defer writers.RUnlock()
		dir := c.Path("mem-reused")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Error(err)
			return
		}
		now := time.Now()
		os.Chtimes(dir, now, now)
		if err := os.WriteFile(limits, []byte("fresh"), 0o644); err != nil {
			t.Error(err)
		}
	}
	alive := func(uint32, uint64) bool {
		go allocate()
		select { // let it finish unless something holds it back
		case <-allocated:
		case <-time.After(300 * time.Millisecond):
		}
		return false // the slot's process is gone
	}
	c.Collect(map[string]bool{}, alive)
	<-allocated
	if _, err := os.Stat(limits); err != nil {
		t.Fatalf("the files an Allocate wrote during the collection were removed: %v", err)
	}
}
