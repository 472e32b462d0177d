package fakegpu

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/tessera-gpu/tessera/test/fakegpu/csrc"
)

func TestStateLayoutMatchesC(t *testing.T) {
	var s rawState
	var snap rawSnap
	got := map[string]uint64{
		"state":              StateSize,
		"header.slice_ns":    uint64(unsafe.Offsetof(s.Header.SliceNs)),
		"device.sched":       uint64(unsafe.Offsetof(s.Devices[0].Sched)),
		"state.sched":        uint64(unsafe.Sizeof(s)),
		"sched_slot":         SchedSlotSize,
		"sched_slot.ring":    64,
		"sched_slot.snap":    64 + RingEntries*RingEntrySize,
		"ring_entry":         RingEntrySize,
		"snap":               uint64(unsafe.Sizeof(snap)),
		"snap.ctx":           uint64(unsafe.Offsetof(snap.Ctx)),
		"snap.busy_ns":       uint64(unsafe.Offsetof(snap.BusyNs)),
		"snap_ctx.busy_ns":   uint64(unsafe.Offsetof(snap.Ctx[0].BusyNs)),
		"header":             uint64(unsafe.Sizeof(s.Header)),
		"device":             uint64(unsafe.Sizeof(s.Devices[0])),
		"slot":               uint64(unsafe.Sizeof(s.Slots[0])),
		"header.slot_hwm":    uint64(unsafe.Offsetof(s.Header.SlotHWM)),
		"header.fingerprint": uint64(unsafe.Offsetof(s.Header.ConfigFingerprint)),
		"device.busy_total":  uint64(unsafe.Offsetof(s.Devices[0].BusyTotalNs)),
		"device.xid_seq":     uint64(unsafe.Offsetof(s.Devices[0].XidSeq)),
		"device.xid_last":    uint64(unsafe.Offsetof(s.Devices[0].XidLast)),
		"slot.used":          uint64(unsafe.Offsetof(s.Slots[0].Used)),
		"slot.busy_ns":       uint64(unsafe.Offsetof(s.Slots[0].BusyNs)),
		"slot.contexts":      uint64(unsafe.Offsetof(s.Slots[0].Contexts)),
		"state.slots":        uint64(unsafe.Offsetof(s.Slots)),
		"magic":              StateMagic,
	}
	want := csrc.Layout()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: Go %d, C %d", k, got[k], w)
		}
	}
	if StateSize != want["state"] || HeaderSize != want["header"] || SlotSize != want["slot"] {
		t.Errorf("size constants disagree with C: %d/%d/%d", StateSize, HeaderSize, SlotSize)
	}
}

func TestIdentityFormulaMatchesC(t *testing.T) {
	devs, err := csrc.ParseDevices("A:1:1;B:2:2;C:3:3", ';', "test")
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devs {
		if d.UUID != UUID("", i) {
			t.Errorf("device %d: C UUID %s, Go predicts %s", i, d.UUID, UUID("", i))
		}
		if d.BusID != BusID(i) {
			t.Errorf("device %d: C bus id %s, Go predicts %s", i, d.BusID, BusID(i))
		}
	}
	if UUID("", 0) == UUID("x", 0) || UUID("", 0) == UUID("", 1) {
		t.Error("UUIDs do not depend on seed and index")
	}
	if len(UUID("", 0)) != 40 || !strings.HasPrefix(UUID("", 0), "GPU-") {
		t.Errorf("UUID shape: %q", UUID("", 0))
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct{ text, want string }{
		{"H200", `FAKEGPU_DEVICES entry 1: "H200" is not name:mem_mib:sm_count`},
		{"A:1:1;B:x:1", `FAKEGPU_DEVICES entry 2: field mem_mib: "x"`},
		{"A:1:0", `field sm_count: "0"`},
		{" :1:1", "field name"},
	}
	for _, c := range cases {
		_, err := csrc.ParseDevices(c.text, ';', "FAKEGPU_DEVICES")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.text, err, c.want)
		}
	}
}

// FuzzParseDevices: the parser never crashes, and whatever it accepts
// round-trips through its own spec format.
func FuzzParseDevices(f *testing.F) {
	for _, s := range []string{
		"NVIDIA H200:143771:132", "A:1:1;B:2:2;", "", ";;", "A:B:1:2", "x", ":::", "A:99999999999999999999:1",
		"A:1:1\n# c\nB:2:2", "A:-1:1", "A: 5 : 7 ", "A:1:1;" + strings.Repeat("B:1:1;", 20),
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, file bool) {
		if strings.IndexByte(text, 0) >= 0 {
			return // C strings end at NUL; the file loader rejects NUL bytes before parsing
		}
		sep := byte(';')
		if file {
			sep = '\n'
		}
		devs, err := csrc.ParseDevices(text, sep, "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz") {
				t.Fatalf("error does not name its origin: %v", err)
			}
			return
		}
		var spec []string
		for _, d := range devs {
			if d.Name == "" || d.MemBytes == 0 || d.MemBytes%(1<<20) != 0 || d.SMCount <= 0 {
				t.Fatalf("accepted invalid device %+v from %q", d, text)
			}
			spec = append(spec, d.Name+":"+strconv.FormatUint(d.MemBytes>>20, 10)+":"+strconv.Itoa(d.SMCount))
		}
		again, err := csrc.ParseDevices(strings.Join(spec, string(sep)), sep, "again")
		if err != nil || len(again) != len(devs) {
			t.Fatalf("round trip of %q: %v (%d devices, want %d)", text, err, len(again), len(devs))
		}
		for i := range devs {
			if again[i] != devs[i] {
				t.Fatalf("round trip of %q: %+v != %+v", text, again[i], devs[i])
			}
		}
	})
}
