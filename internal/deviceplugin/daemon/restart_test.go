package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

// TestNoSecondRegistrationWhileConnected: kubelet v1.37 refuses to
// register a socket it is connected to ("device plugin already
// connected"). After one server lost its socket, only that server
// registers again, once; the others do not.
func TestNoSecondRegistrationWhileConnected(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	os.Remove(e.d.Plugin.Server("tessera.io/gpu-mem").Socket())
	if regs := e.kubelet.awaitRegistrations(t, 1); regs["tessera.io/gpu-mem"] == nil {
		t.Fatalf("registrations after the socket loss: %v", regs)
	}
	// Several registration periods (50 ms in tests) pass without another.
	select {
	case r := <-e.kubelet.regs:
		t.Fatalf("%s registered again while kubelet is connected to it", r.ResourceName)
	case <-time.After(400 * time.Millisecond):
	}
}
