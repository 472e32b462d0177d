package balloon

import (
	"testing"
	"time"
)

const GiB = 1 << 30

func TestFloor(t *testing.T) {
	p := DefaultPolicy()
	for _, tc := range []struct {
		name                string
		ceiling, peak, want uint64
	}{
		{"peak plus a tenth of the ceiling", 40 * GiB, 24 * GiB, 28 * GiB},
		{"an idle container keeps its margin", 40 * GiB, 0, 4 * GiB},
		{"the minimum when peak plus margin is below it", 4 * GiB, 100 << 20, GiB},
		{"never above the ceiling", 40 * GiB, 39 * GiB, 40 * GiB},
		{"a peak near 2^64 does not wrap", 40 * GiB, ^uint64(0) - 1, 40 * GiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Floor(tc.ceiling, tc.peak); got != tc.want {
				t.Errorf("Floor(%d, %d) = %d, want %d", tc.ceiling, tc.peak, got, tc.want)
			}
		})
	}
	p.MarginFraction = 0
	if got := p.Floor(40*GiB, 100); got != GiB {
		t.Errorf("with no margin the minimum applies: %d", got)
	}
}

func TestShouldReclaim(t *testing.T) {
	p := DefaultPolicy() // margin 4 GiB on 40, half is 2
	for _, tc := range []struct {
		capB, usage uint64
		want        bool
	}{
		{28 * GiB, 24 * GiB, false},
		{28 * GiB, 26 * GiB, true},
		{28 * GiB, 27 * GiB, true},
		{40 * GiB, 39 * GiB, false}, // not lowered: nothing to reclaim
	} {
		if got := p.ShouldReclaim(40*GiB, tc.capB, tc.usage); got != tc.want {
			t.Errorf("cap %d usage %d: %v, want %v", tc.capB/GiB, tc.usage/GiB, got, tc.want)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Policy){
		"window":  func(p *Policy) { p.Window = 0 },
		"settle":  func(p *Policy) { p.Settle = 2 * p.Window },
		"margin":  func(p *Policy) { p.MarginFraction = 1 },
		"wait ms": func(p *Policy) { p.WaitMS = 61000 },
	} {
		p := DefaultPolicy()
		mut(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: invalid policy accepted", name)
		}
	}
}

func TestHistoryPeakAndSettle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h History
	w := 30 * time.Minute
	if h.Settled(t0, time.Minute, 0) {
		t.Fatal("settled before any sample")
	}
	h.Observe(t0, 30*GiB, w)
	h.Observe(t0.Add(5*time.Minute), 10*GiB, w)
	h.Observe(t0.Add(20*time.Minute), 12*GiB, w)
	h.Observe(t0.Add(3*time.Minute), 99*GiB, w) // out of order: dropped
	now := t0.Add(20 * time.Minute)
	if got := h.Peak(now, w); got != 30*GiB {
		t.Errorf("peak %d, want the 30 GiB sample", got/GiB)
	}
	now = t0.Add(40 * time.Minute)
	h.Observe(now, 12*GiB, w)
	if got := h.Peak(now, w); got != 12*GiB {
		t.Errorf("peak %d GiB after the 30 GiB sample left the window", got/GiB)
	}
	if !h.Settled(now, 25*time.Minute, GiB) {
		t.Error("flat at 12 GiB for 20 minutes: not settled")
	}
	h.Observe(now.Add(time.Minute), 15*GiB, w)
	if h.Settled(now.Add(time.Minute), 10*time.Minute, GiB) {
		t.Error("rose 3 GiB inside the settle time: settled")
	}
}
