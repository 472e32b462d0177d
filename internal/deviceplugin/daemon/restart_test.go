package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/internal/region"
)

// TestPluginRestartKeepsPreloadFile: every running tessera container has
// <stateDir>/ld.so.preload bind-mounted; a plugin restart must leave that
// file (its inode) in place instead of renaming a fresh copy over it.
func TestPluginRestartKeepsPreloadFile(t *testing.T) {
	e := newEnv(t, gputest.DGXH100)
	e.start()
	path := filepath.Join(e.d.Config.StateDir, "ld.so.preload")
	before := inodeOf(t, path)
	e.stop()
	e.start()
	if after := inodeOf(t, path); after != before {
		t.Fatalf("plugin restart replaced ld.so.preload: inode %d, was %d", after, before)
	}
}

func inodeOf(t *testing.T, path string) uint64 {
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

// TestPluginRestartKeepsALoweredCap: the node agent lowered a running
// ballooned container's cap in its limits file (cap below the ceiling, the
// ceiling, wait bound and floor in the balloon words). A plugin restart
// restores the container's files from PodResources, and a later read-back does
// so again: both must leave the lowered cap and its words as they are (raising
// the cap would give the owner memory a borrower holds; dropping the words
// would leave the owner lowered with nothing to grow back to), and keep the
// inodes the container's hook has mapped.
func TestPluginRestartKeepsALoweredCap(t *testing.T) {
	e := newEnv(t, gputest.DGXH200)
	p := pod("owner", t0, "", ctr{name: "c", mem: 8})
	p.Status.Phase = "Running"
	e.createPod(p)
	u0 := e.node.Device(0).UUID
	var memIDs []string
	for i := range 8 {
		memIDs = append(memIDs, fmt.Sprintf("%s::mem::%d", u0, i))
	}
	e.podRes.set(&podresourcesapi.PodResources{Name: "owner", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{
		Name: "c", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "tessera.io/gpu-mem", DeviceIds: memIDs}}}}})
	e.start()
	dir := e.d.Builder.ContainerDir("mem", memIDs)
	limitsPath := filepath.Join(dir, "limits")
	if l := readLimits(t, limitsPath); len(l) != 1 || l[0].MemLimitBytes != 8<<30 {
		t.Fatalf("restored limits = %+v", l)
	}
	// What the balloon controller does to an owner it inflates.
	lowered := region.Balloon{CeilingBytes: 8 << 30, WaitMS: 2000, FloorBytes: 5 << 30}
	l, err := region.OpenLimits(limitsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBalloonCap(u0, 5<<30, lowered); err != nil {
		t.Fatal(err)
	}
	l.Close()
	inodes := map[string]uint64{"limits": inodeOf(t, limitsPath), "region": inodeOf(t, filepath.Join(dir, "region"))}

	check := func(when string) {
		t.Helper()
		l, err := region.OpenLimits(limitsPath)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		b, err := l.Balloon(u0)
		if err != nil {
			t.Fatal(err)
		}
		if d := l.Devices(); len(d) != 1 || d[0].MemLimitBytes != 5<<30 || b != lowered {
			t.Fatalf("%s: cap %+v, balloon %+v; want the cap at 5 GiB and %+v", when, d, b, lowered)
		}
		for name, ino := range inodes {
			if got := inodeOf(t, filepath.Join(dir, name)); got != ino {
				t.Fatalf("%s: %s replaced (inode %d, was %d)", when, name, got, ino)
			}
		}
	}
	e.stop()
	e.start()
	check("after a plugin restart")
	if err := e.d.Reconciler.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("after a read-back")
}
