package region

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestGrantWordRoundTrip(t *testing.T) {
	for _, g := range []Grant{{Unpaced: true}, {Unpaced: true, Solo: true}, {PPM: 0}, {PPM: 300000}, {PPM: GrantPPMMax, Solo: true},
		{Unpaced: true, Until: 12 * time.Millisecond}, {PPM: 0, Solo: true, Until: time.Microsecond}, {PPM: 250000, Until: GrantUntilUsMax * time.Microsecond}} {
		got, ok := DecodeGrant(g.Word())
		if !ok || got != g {
			t.Errorf("%+v → %#x → %+v, %v", g, g.Word(), got, ok)
		}
	}
	if g, ok := DecodeGrant(Grant{PPM: 5 * GrantPPMMax}.Word()); !ok || g.PPM != GrantPPMMax {
		t.Errorf("an oversized rate decodes to %+v; want the maximum", g)
	}
	if g, _ := DecodeGrant(Grant{Until: time.Hour}.Word()); g.Until != GrantUntilUsMax*time.Microsecond {
		t.Errorf("a deadline beyond the word decodes to %v; want the most it holds", g.Until)
	}
	if g, _ := DecodeGrant(Grant{Until: 1500 * time.Nanosecond}.Word()); g.Until != 2*time.Microsecond {
		t.Errorf("a deadline of 1.5 µs decodes to %v; want it rounded up (never earlier than asked)", g.Until)
	}
	if _, ok := DecodeGrant(0); ok {
		t.Error("a word no arbiter wrote decodes as a grant")
	}
}

func TestGrantsSchedulingAndComputeWordsInPlace(t *testing.T) {
	dir := t.TempDir()
	lp, rp := filepath.Join(dir, "core-limits"), filepath.Join(dir, "core-region")
	devs := []DeviceLimit{{UUID: "GPU-a", CoreLimitPct: 30}, {UUID: "GPU-b", CoreLimitPct: 70, Policy: PolicyHard, Priority: 1}}
	if err := WriteLimits(lp, devs); err != nil {
		t.Fatal(err)
	}
	if err := WriteLimits(lp, []DeviceLimit{{UUID: "GPU-a", Priority: 4}, {UUID: "GPU-b"}}); err == nil {
		t.Error("priority 4 accepted")
	}
	l, err := OpenLimits(lp)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Devices()[1]; got.Policy != PolicyHard || got.Priority != 1 {
		t.Errorf("device b: %+v", got)
	}
	l.SetGrant(1, Grant{PPM: 250000}, 42)
	if g, ok := l.Grant(1); !ok || g.PPM != 250000 || atomic.LoadUint64(&l.raw.Devices[1].ComputeBeat) != 42 {
		t.Errorf("grant %+v %v", g, ok)
	}
	if _, ok := l.Grant(0); ok {
		t.Error("device a has a grant nobody wrote")
	}
	gen := l.Generation()
	if err := l.SetScheduling("GPU-a", PolicyHard, 0); err != nil {
		t.Fatal(err)
	}
	if l.Generation() == gen || l.Devices()[0].Policy != PolicyHard || l.Devices()[0].Priority != 0 {
		t.Errorf("SetScheduling: %+v, generation %d→%d", l.Devices()[0], gen, l.Generation())
	}
	gen = l.Generation()
	if err := l.SetScheduling("GPU-a", PolicyHard, 0); err != nil || l.Generation() != gen {
		t.Errorf("an unchanged scheduling bumped the generation (%v)", err)
	}
	for _, bad := range []struct {
		pol  uint64
		prio int32
	}{{2, 0}, {PolicyGuaranteed, -1}, {PolicyGuaranteed, 4}} {
		if err := l.SetScheduling("GPU-a", bad.pol, bad.prio); err == nil {
			t.Errorf("SetScheduling(%d, %d) accepted", bad.pol, bad.prio)
		}
	}
	if err := CreateRegion(rp); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRegion(rp)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	atomic.StoreUint64(&r.raw.Compute[1].BusyNs, 7)
	atomic.StoreUint64(&r.raw.Compute[1].ThrottledNs, 9)
	if c := r.Compute(1); c.BusyNs != 7 || c.ThrottledNs != 9 {
		t.Errorf("compute words %+v", c)
	}
	if c := r.Compute(MaxDevices); c != (Compute{}) {
		t.Errorf("out of range: %+v", c)
	}
	// A left-over in-flight count is cleared only if it is still what the
	// arbiter saw (a hook that changed it meanwhile is live).
	atomic.StoreUint64(&r.raw.Compute[1].Inflight, 3)
	if r.ClearInflight(1, 2, 0) || r.Compute(1).Inflight != 3 {
		t.Errorf("cleared a count that changed since it was seen: %d", r.Compute(1).Inflight)
	}
	if !r.ClearInflight(1, 3, 0) || r.Compute(1).Inflight != 0 {
		t.Errorf("did not clear the count seen: %d", r.Compute(1).Inflight)
	}
	if r.ClearInflight(MaxDevices, 1, 0) {
		t.Error("cleared out of range")
	}
	if p, err := ParsePolicy("hard"); err != nil || p != PolicyHard || PolicyName(p) != "hard" {
		t.Errorf("ParsePolicy(hard) = %d, %v", p, err)
	}
	if _, err := ParsePolicy("soft"); err == nil {
		t.Error("policy soft accepted")
	}
}

// TestClearInflightLeavesWordsCounts: the arbiter's clear on a container idle
// for long expires the launch-sequence words whose time has passed and leaves
// the counts of those whose time has not: when it zeroed those too, their
// later expiry (a hook's sweep) took the count of a sequence that started
// meanwhile, and the container looked drained with work in flight.
func TestClearInflightLeavesWordsCounts(t *testing.T) {
	r, _ := newRegion(t)
	const now = 1 << 20
	atomic.StoreUint32(&r.raw.SlotHWM, 3)
	atomic.StoreUint64(&r.raw.Compute[1].Inflight, 4) // 2 words' + 2 left by killed processes
	atomic.StoreUint64(&r.raw.Compute[4].Inflight, 1)
	atomic.StoreUint64(&r.raw.Slots[0].SeqUntil[2], 0x100|1)    // passed
	atomic.StoreUint64(&r.raw.Slots[2].SeqUntil[0], (now<<1)|1) // not yet
	atomic.StoreUint64(&r.raw.Slots[2].SeqUntil[1], 0x100|4)    // another device's
	if !r.ClearInflight(1, 4, now) {
		t.Fatal("cleared nothing")
	}
	if got := r.Compute(1).Inflight; got != 1 {
		t.Fatalf("in flight %d after the clear, want 1 (the word not yet expired)", got)
	}
	if atomic.LoadUint64(&r.raw.Slots[0].SeqUntil[2]) != 0 || atomic.LoadUint64(&r.raw.Slots[2].SeqUntil[0]) == 0 {
		t.Fatal("the passed word was not expired, or the other was")
	}
	if r.Compute(4).Inflight != 1 || atomic.LoadUint64(&r.raw.Slots[2].SeqUntil[1]) == 0 {
		t.Fatal("another device's word or count was touched")
	}
	// A sequence starts; then the remaining word's time passes and a hook's
	// sweep expires it: the new sequence stays counted.
	atomic.AddUint64(&r.raw.Compute[1].Inflight, 1)
	if expired, _ := r.expireSeqs(1, now<<2); expired != 1 {
		t.Fatalf("expired %d, want 1", expired)
	}
	if got := r.Compute(1).Inflight; got != 1 {
		t.Errorf("in flight %d with one live sequence, want 1", got)
	}
	// Changed since seen: nothing but passed words is taken.
	if r.ClearInflight(1, 7, now<<2) || r.Compute(1).Inflight != 1 {
		t.Errorf("cleared a count that changed since it was seen: %d", r.Compute(1).Inflight)
	}
}
