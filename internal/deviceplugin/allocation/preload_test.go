package allocation

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPreloadFileKeptAcrossStarts: running containers have ld.so.preload's
// inode bind-mounted. A plugin start with the same hook path keeps that
// inode (a wrong mode is fixed in place); a new hook path gets a new inode,
// so containers started before keep the content naming the hook path
// mounted into them.
func TestPreloadFileKeptAcrossStarts(t *testing.T) {
	b, _ := builder(t) // builder runs Prepare: the first start
	path := filepath.Join(b.StateDir, "ld.so.preload")
	first := inode(t, path)
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, path); got != first {
		t.Fatalf("second start replaced ld.so.preload: inode %d, was %d", got, first)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 || inode(t, path) != first {
		t.Fatalf("mode %v, inode %d (was %d): want 0644 fixed in place", st.Mode().Perm(), inode(t, path), first)
	}

	// A running container holds the old file open through its mount.
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	b.HookLibrary = "/opt/tessera-v2/libtessera-hook.so"
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, path); got != b.HookLibrary+"\n" {
		t.Fatalf("new hook path not written: %q", got)
	}
	if inode(t, path) == first {
		t.Fatal("new content written into the inode running containers see")
	}
	old := make([]byte, 64)
	n, _ := held.ReadAt(old, 0)
	if string(old[:n]) != "/opt/tessera/libtessera-hook.so\n" {
		t.Fatalf("running containers' file changed to %q", old[:n])
	}
}

// TestPreloadFileRepaired: wrong content, and an empty directory left where
// the file belongs, are replaced by the file; a directory with something
// in it is reported and left alone.
func TestPreloadFileRepaired(t *testing.T) {
	b, _ := builder(t)
	path := filepath.Join(b.StateDir, "ld.so.preload")
	want := b.HookLibrary + "\n"
	if err := os.WriteFile(path, []byte("/lib/other.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(); err != nil || readString(t, path) != want {
		t.Fatalf("wrong content not rewritten (err %v)", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(); err != nil || readString(t, path) != want {
		t.Fatalf("empty directory not replaced (err %v)", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("directory with content: %v", err)
	}
	if _, err := os.Stat(filepath.Join(path, "keep")); err != nil {
		t.Fatalf("directory content lost: %v", err)
	}
}

// TestPreloadFileFlushedBeforeReplace: the new content reaches the disk
// before it is renamed over the old file. Without the flush a power loss can
// leave an empty ld.so.preload, which containers restarted before the plugin
// mount: no hook, no cap. A failed flush must leave the old file in place.
func TestPreloadFileFlushedBeforeReplace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ld.so.preload")
	if err := ensureFile(path, []byte("/old/libtessera-hook.so\n")); err != nil {
		t.Fatal(err)
	}
	synced := map[string]bool{}
	defer func(orig func(*os.File) error) { syncFile = orig }(syncFile)
	syncFile = func(f *os.File) error {
		synced[f.Name()] = true
		return errors.New("EIO")
	}
	if err := ensureFile(path, []byte("/new/libtessera-hook.so\n")); err == nil {
		t.Error("a failed flush was not reported")
	}
	if !synced[path+".tmp"] {
		t.Errorf("the new content was not flushed before the rename (flushed: %v)", synced)
	}
	if got := readString(t, path); got != "/old/libtessera-hook.so\n" {
		t.Errorf("after a failed flush the file holds %q, want the old content", got)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	syncFile = func(f *os.File) error { synced[f.Name()] = true; return nil }
	if err := ensureFile(path, []byte("/new/libtessera-hook.so\n")); err != nil {
		t.Fatal(err)
	}
	if !synced[filepath.Dir(path)] {
		t.Errorf("the directory was not flushed after the rename (flushed: %v)", synced)
	}
}
