package fakegpu_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/tessera-gpu/tessera/test/fakegpu"
)

// writeSlot forges slot i of a state file as a crashed process would leave it.
func writeSlot(t *testing.T, path string, i int, owner, used0 uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, fakegpu.StateSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	slot := fakegpu.HeaderSize + fakegpu.MaxDevices*fakegpu.DeviceRecSize + i*fakegpu.SlotSize
	binary.LittleEndian.PutUint64(m[slot:], owner)
	binary.LittleEndian.PutUint64(m[slot+16:], used0)
	if hwm := binary.LittleEndian.Uint32(m[36:]); hwm < uint32(i+1) {
		binary.LittleEndian.PutUint32(m[36:], uint32(i+1))
	}
}

// holdSlotLock takes the lock a live process holds on slot i for its life (an
// open file description lock on the slot's owner word), until the test ends.
func holdSlotLock(t *testing.T, path string, i int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	slot := fakegpu.HeaderSize + fakegpu.MaxDevices*fakegpu.DeviceRecSize + i*fakegpu.SlotSize
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(slot), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatalf("locking slot %d: %v", i, err)
	}
}

// Slots a crash can leave behind are reclaimed: a dead owner, an owner word
// naming this live process but without the slot's lock (what a process of
// another pid namespace looks like, or pid reuse), and a reaper that died while
// zeroing a slot. Only a slot whose lock is held is alive.
func TestReaperReclaimsEveryKindOfDeadSlot(t *testing.T) {
	n := newNode(t)
	lib := openNVML(t, n) // creates the state file
	d0 := handle(t, lib, 0)
	ticks, err := fakegpu.StartTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self := uint64(os.Getpid())
	writeSlot(t, n.state, 3, 4194000|uint64(12345)<<32, 100*MiB)     // no such pid
	writeSlot(t, n.state, 4, self|((ticks)&0x7fffffff)<<32, 200*MiB) // no lock
	writeSlot(t, n.state, 5, 1<<63|4194001, 300*MiB)                 // dead reaper
	writeSlot(t, n.state, 6, 4194002, 50*MiB)                        // alive: kept
	holdSlotLock(t, n.state, 6)
	st, err := fakegpu.ReadState(n.state)
	if err != nil {
		t.Fatal(err)
	}
	if st.UsedBytes(0) != 650*MiB {
		t.Fatalf("forged state: %d bytes", st.UsedBytes(0))
	}
	mem, ret := d0.GetMemoryInfo() // reaps
	if ret != nvml.SUCCESS || mem.Used != 50*MiB {
		t.Errorf("after reaping: used %d, want %d (%v)", mem.Used, 50*MiB, ret)
	}
	st, _ = fakegpu.ReadState(n.state)
	if len(st.Processes) != 1 || st.Processes[0].Slot != 6 {
		t.Errorf("slots left: %+v", st.Processes)
	}
	// A new process claims the lowest free slot.
	p, r := n.hold(0, MiB)
	mustAlloc(t, r, "0")
	st, _ = fakegpu.ReadState(n.state)
	if rec, ok := st.Process(p.pid()); !ok || rec.Slot != 0 {
		t.Errorf("new process got slot %d (%v), want 0", rec.Slot, ok)
	}
}

// One state file serves one device configuration at a time.
func TestStateFileConfigurationMismatch(t *testing.T) {
	n := newNode(t)
	_, r := n.hold(0, MiB)
	mustAlloc(t, r, "0")
	other := *n
	other.devices = "Bigger:4096:10"
	out, errOut, _ := other.run("info")
	if !strings.Contains(errOut, "different device configuration") || strings.Contains(out, "device 0") {
		t.Errorf("second configuration on a live state file: stderr %q\n%s", errOut, out)
	}
	n2 := newNode(t)
	if out, _, err := n2.run("info"); err != nil { // leaves the file with no live process
		t.Fatal(err, out)
	}
	n2.devices = "Bigger:4096:10"
	out, errOut, err := n2.run("info")
	if err != nil || !strings.Contains(out, "name Bigger") {
		t.Errorf("reformatting an idle state file for a new configuration: %v %q\n%s", err, errOut, out)
	}
	st, err := fakegpu.ReadState(n2.state)
	if err != nil || len(st.Devices) != 1 || st.Devices[0].MemBytes != 4096*MiB {
		t.Errorf("reformatted state: %+v, %v", st, err)
	}
}

// FuzzReadState: arbitrary bytes never panic the reader, and what it accepts is sane.
func FuzzReadState(f *testing.F) {
	good := make([]byte, fakegpu.StateSize)
	binary.LittleEndian.PutUint64(good, fakegpu.StateMagic)
	binary.LittleEndian.PutUint32(good[8:], fakegpu.StateVersion)
	binary.LittleEndian.PutUint32(good[20:], fakegpu.SlotSize)
	binary.LittleEndian.PutUint32(good[28:], fakegpu.MaxSlots)
	binary.LittleEndian.PutUint32(good[32:], 2)
	binary.LittleEndian.PutUint32(good[36:], 3)
	f.Add(good)
	f.Add([]byte("short"))
	f.Add(good[:100])
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 100 && len(b) < fakegpu.StateSize {
			b = append(b, make([]byte, fakegpu.StateSize-len(b))...) // reach the interesting size
		}
		path := fmt.Sprintf("%s/state", dir)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := fakegpu.ReadState(path)
		if err != nil {
			return
		}
		if len(st.Devices) > fakegpu.MaxDevices || len(st.Processes) > fakegpu.MaxSlots {
			t.Fatalf("accepted %d devices, %d processes", len(st.Devices), len(st.Processes))
		}
		for _, p := range st.Processes {
			if len(p.Used) != len(st.Devices) {
				t.Fatalf("process %+v has %d device entries, want %d", p, len(p.Used), len(st.Devices))
			}
		}
	})
}
