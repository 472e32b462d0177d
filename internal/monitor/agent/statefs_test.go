package agent

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/internal/hostproc"
	"github.com/tessera-gpu/tessera/internal/monitor/lease"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
)

// needRoot skips a test that mounts, unless CI runs it (CI runs as root; a
// skip there would prove nothing).
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("needs root (%s), and CI must run it", why)
	}
	t.Skipf("needs root (%s); CI runs it as root", why)
}

// mountTmpfs mounts a tmpfs of size bytes on dir until the test ends.
func mountTmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	mkdir(t, dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// fill writes a file until the filesystem refuses with ENOSPC.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			return
		}
	}
}

// TestFullStateFilesystem: the state directory's filesystem is full (a
// small tmpfs filled to the last block). The monitor keeps serving and
// reaping, reports the condition (metric and log line), loses nothing
// already accounted, and leaves no partial file: its own holder file fails
// cleanly, and a new container's region is refused at creation instead of
// faulting later.
func TestFullStateFilesystem(t *testing.T) {
	needRoot(t, "mounts a small tmpfs as the state directory")
	n := newNode(t)
	mountTmpfs(t, n.stateDir, 4*(region.RegionSize+region.LimitsSize))
	a := n.allocate("ns", "p", "c", map[int]uint64{0: 256 * MiB}, nil, true)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	doomed, err := hostproc.Read("/proc", uint32(sleeper.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	self, err := hostproc.Read("/proc", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := regiontest.Write(a.region, regiontest.Contents{Slots: []regiontest.Slot{
		{PID: self.NSPID, StartTime: self.StartTime, UsedBytes: map[int]uint64{0: 7 * MiB}},
		{PID: doomed.NSPID, StartTime: doomed.StartTime, UsedBytes: map[int]uint64{0: 3 * MiB}},
	}}); err != nil {
		t.Fatal(err)
	}
	fill(t, filepath.Join(n.stateDir, "filler"))

	// A new container's files on the full filesystem: refused, nothing left.
	fresh := filepath.Join(n.stateDir, "containers", "mem-new")
	mkdir(t, fresh)
	if err := region.CreateRegion(filepath.Join(fresh, "region")); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("region on a full filesystem: %v, want ENOSPC", err)
	}
	if entries, _ := os.ReadDir(fresh); len(entries) != 0 {
		t.Errorf("partial files left: %v", entries)
	}
	os.Remove(fresh)
	// The existing region's every page is allocated: a hook claiming its
	// last slot on the full filesystem writes, it does not fault.
	if f, err := os.OpenFile(a.region, os.O_RDWR, 0); err != nil {
		t.Fatal(err)
	} else {
		b := make([]byte, 8)
		off := int64(region.RegionSize - 8)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(b, off); err != nil {
			t.Errorf("write to the region's last page on a full filesystem: %v", err)
		}
		f.Close()
	}

	var log syncLog
	ag := n.agentFor(slog.New(slog.NewTextHandler(&log, nil)), nil)
	url := start(t, ag)
	eventually(t, 30*time.Second, "the node lease held on a full filesystem", ag.Lease.Held)
	fams := scrape(t, url)
	if v, ok := value(fams, "tessera_monitor_state_dir_free_bytes", nil); !ok || v != 0 {
		t.Errorf("free bytes %v (%v), want 0", v, ok)
	}
	if v, _ := value(fams, "tessera_monitor_state_write_errors_total", map[string]string{"file": lease.HolderFile}); v != 1 {
		t.Errorf("holder file write errors %v, want 1", v)
	}
	if v, _ := value(fams, "tessera_container_gpu_memory_used_bytes", lbl(a.owner, n.uuids[0])); v != 10*MiB {
		t.Errorf("used %v, want 10 MiB", v)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	eventually(t, 30*time.Second, "a dead process reaped on the full filesystem", func() bool {
		v, _ := value(scrape(t, url), "tessera_container_gpu_memory_used_bytes", lbl(a.owner, n.uuids[0]))
		return v == 7*MiB
	})
	fams = scrape(t, url)
	if v, _ := value(fams, "tessera_container_reaped_bytes_total", lbl(a.owner, "")); v != 3*MiB {
		t.Errorf("reaped bytes %v, want 3 MiB", v)
	}
	entries, _ := os.ReadDir(n.stateDir)
	for _, e := range entries {
		if e.Name() != "containers" && e.Name() != "filler" {
			t.Errorf("left in the state directory: %s", e.Name())
		}
	}
	if !strings.Contains(log.String(), "state directory filesystem full") || !strings.Contains(log.String(), "holder file could not be written") {
		t.Errorf("the log does not say the filesystem is full:\n%s", log.String())
	}
	// Space again: said once, and the gauge follows.
	os.Remove(filepath.Join(n.stateDir, "filler"))
	if _, err := ag.Node.Check(); err != nil {
		t.Fatal(err)
	}
	if v, _ := value(scrape(t, url), "tessera_monitor_state_dir_free_bytes", nil); v < float64(region.RegionSize) {
		t.Errorf("free bytes %v after the filler went", v)
	}
	if !strings.Contains(log.String(), "has space again") {
		t.Error("recovery not logged")
	}
}
