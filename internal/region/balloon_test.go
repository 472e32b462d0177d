package region

import (
	"path/filepath"
	"testing"
)

func TestSetBalloonCapInflatesAndDeflatesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits")
	const uuid = "GPU-aaaa"
	if err := WriteLimits(path, []DeviceLimit{{UUID: uuid, MemLimitBytes: 40 << 30}}); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLimits(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gen := l.Generation()
	b := Balloon{CeilingBytes: 40 << 30, WaitMS: 2000, FloorBytes: 24 << 30}
	if err := l.SetBalloonCap(uuid, 24<<30, b); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Balloon(uuid); got != b {
		t.Errorf("balloon words %+v, want %+v", got, b)
	}
	if got := l.Devices()[0].MemLimitBytes; got != 24<<30 {
		t.Errorf("cap %d after inflating", got)
	}
	if l.Generation() <= gen {
		t.Error("generation not bumped")
	}
	for _, bad := range []uint64{0, 41 << 30} {
		if err := l.SetBalloonCap(uuid, bad, b); err == nil {
			t.Errorf("cap %d under ceiling %d accepted", bad, b.CeilingBytes)
		}
	}
	// A plugin rewriting the file (restart) keeps the balloon words.
	if err := WriteLimits(path, []DeviceLimit{{UUID: uuid, MemLimitBytes: 24 << 30}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Balloon(uuid); got != b {
		t.Errorf("balloon words after a rewrite %+v, want %+v", got, b)
	}
	if err := l.SetBalloonCap(uuid, 40<<30, Balloon{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Balloon(uuid); got.Inflated() || l.Devices()[0].MemLimitBytes != 40<<30 {
		t.Errorf("after deflating: %+v cap %d", got, l.Devices()[0].MemLimitBytes)
	}
	if _, err := l.Balloon("GPU-none"); err == nil {
		t.Error("unknown device accepted")
	}
}
