package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// TestPluginRestartKeepsPreloadFile: every running tessera container has
// <stateDir>/ld.so.preload bind-mounted; a plugin restart must leave that
// file (its inode) in place instead of renaming a fresh copy over it.
func TestPluginRestartKeepsPreloadFile(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	path := filepath.Join(e.d.Config.StateDir, "ld.so.preload")
	before := preloadInode(t, path)
	e.stop()
	e.start()
	if after := preloadInode(t, path); after != before {
		t.Fatalf("plugin restart replaced ld.so.preload: inode %d, was %d", after, before)
	}
}

func preloadInode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}
