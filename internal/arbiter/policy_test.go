package arbiter

import (
	"math"
	"testing"
	"time"
)

func testPolicy() Policy {
	return Policy{Quantum: 5 * time.Millisecond, IdleAfter: 3 * time.Millisecond, PriorityHold: 50 * time.Millisecond}
}

// sim drives a Scheduler with an idealised exclusive GPU: each tick the holder,
// if it has work, runs for the whole tick.
type sim struct {
	s     Scheduler
	ts    []Tenant
	wants []func(tick int) bool
	start time.Time
	got   []time.Duration // GPU time per tenant
	busy  time.Duration
	tick  time.Duration
	n     int
}

func newSim(p Policy, ts []Tenant, wants []func(int) bool) *sim {
	return &sim{s: Scheduler{Policy: p}, ts: ts, wants: wants, start: time.Unix(1000, 0), got: make([]time.Duration, len(ts)), tick: time.Millisecond}
}

// step advances one tick and returns the verdicts.
func (m *sim) step() []Verdict {
	now := m.start.Add(time.Duration(m.n) * m.tick)
	mono := uint64(now.UnixNano())
	for i := range m.ts {
		if m.wants[i](m.n) {
			m.ts[i].DemandNs = mono
		}
	}
	vs := m.s.Step(now, mono, m.ts)
	for i, v := range vs {
		if v.Go && m.wants[i](m.n) {
			m.ts[i].BusyNs += uint64(m.tick)
			m.got[i] += m.tick
			m.busy += m.tick
		}
	}
	m.n++
	return vs
}

func (m *sim) run(ticks int) {
	for i := 0; i < ticks; i++ {
		m.step()
	}
}

func always(int) bool { return true }

func shares(pcts ...float64) []Tenant {
	ts := make([]Tenant, len(pcts))
	for i, p := range pcts {
		ts[i] = Tenant{Key: string(rune('a' + i)), Share: p / 100, Priority: 2}
	}
	return ts
}

func TestSharesOfSaturatingTenants(t *testing.T) {
	for _, c := range [][]float64{{10, 90}, {25, 75}, {30, 30, 40}, {10, 20, 30, 40}} {
		for _, hard := range []bool{false, true} {
			ts := shares(c...)
			wants := make([]func(int) bool, len(ts))
			for i := range ts {
				ts[i].Hard = hard
				wants[i] = always
			}
			m := newSim(testPolicy(), ts, wants)
			m.run(10000)
			for i, p := range c {
				got := 100 * m.got[i].Seconds() / m.busy.Seconds()
				if math.Abs(got-p) > 1 {
					t.Errorf("%v hard=%v: tenant %d got %.1f%%, want %.0f%%", c, hard, i, got, p)
				}
			}
			if util := m.busy.Seconds() / 10; util < 0.97 {
				t.Errorf("%v hard=%v: GPU busy %.1f%%", c, hard, 100*util)
			}
		}
	}
}

func TestAloneGuaranteedTakesAllHardTakesItsShare(t *testing.T) {
	m := newSim(testPolicy(), shares(30), []func(int) bool{always})
	m.run(2000)
	if u := m.busy.Seconds() / 2; u < 0.99 {
		t.Errorf("guaranteed 30 alone got %.1f%%, want all", 100*u)
	}
	ts := shares(30)
	ts[0].Hard = true
	m = newSim(testPolicy(), ts, []func(int) bool{always})
	m.run(2000)
	if u := 100 * m.busy.Seconds() / 2; math.Abs(u-30) > 1 {
		t.Errorf("hard 30 alone got %.1f%%, want 30", u)
	}
}

func TestWorkConservationWithAHalfIdleTenant(t *testing.T) {
	halfIdle := func(n int) bool { return (n/250)%2 == 0 }
	m := newSim(testPolicy(), shares(30, 70), []func(int) bool{always, halfIdle})
	m.run(4000)
	if u := m.busy.Seconds() / 4; u < 0.97 {
		t.Errorf("GPU busy %.1f%% with 30/70 and the 70 idle half the time", 100*u)
	}
	// While both run, 30/70 still holds: the 30 tenant got its 30 % of the
	// shared half plus all of the idle half.
	if got := m.got[0].Seconds() / 4; got < 0.6 || got > 0.7 {
		t.Errorf("30%% tenant got %.2f of the GPU, want 0.5 + 0.5×0.3", got)
	}
}

func TestPriorityThrottlesLowerWithinATickAndHolds(t *testing.T) {
	p := testPolicy()
	ts := shares(50, 50)
	ts[0].Priority = 0
	p0On := 10
	p0 := func(n int) bool { return n >= p0On && n < p0On+2 } // one 2 ms burst
	m := newSim(p, ts, []func(int) bool{p0, always})
	for m.n < p0On {
		if vs := m.step(); !vs[1].Go {
			t.Fatalf("tick %d: P2 alone is stopped", m.n)
		}
	}
	vs := m.step()
	if !vs[0].Go || vs[1].Go || !vs[1].Suppressed {
		t.Fatalf("the tick P0 starts: %+v; want P0 go, P2 suppressed", vs)
	}
	// P0 idle again: P2 stays stopped for the hold time, P0 keeps the turn.
	for m.n < p0On+int(p.PriorityHold/m.tick) {
		if vs := m.step(); vs[1].Go || !vs[0].Go {
			t.Fatalf("tick %d (P0 idle since %d): %+v; want P0 holding, P2 held", m.n, p0On+2, vs)
		}
	}
	for i := 0; i < int(p.IdleAfter/m.tick)+2; i++ {
		vs = m.step()
	}
	if !vs[1].Go {
		t.Fatalf("after the hold: %+v; want P2 resumed", vs)
	}
}

func TestPriorityFloor(t *testing.T) {
	p := testPolicy()
	p.PriorityFloor = 0.2
	ts := shares(50, 50)
	ts[0].Priority = 0
	m := newSim(p, ts, []func(int) bool{always, always})
	m.run(5000)
	if got := 100 * m.got[1].Seconds() / 5; math.Abs(got-20) > 1.5 {
		t.Errorf("P2 under an active P0 got %.1f%%, want the 20%% floor", got)
	}
}

func TestStoppedTenantFreesItsTurnWithinIdleAfter(t *testing.T) {
	p := testPolicy()
	dead := 1000
	m := newSim(p, shares(90, 10), []func(int) bool{func(n int) bool { return n < dead }, always})
	for m.n < dead {
		m.step()
	}
	limit := dead + int((p.IdleAfter+2*m.tick)/m.tick)
	for {
		if vs := m.step(); vs[1].Go {
			break
		}
		if m.n > limit {
			t.Fatalf("tick %d: the dead tenant (stopped at %d) still blocks the other", m.n, dead)
		}
	}
}

func TestRemovedTenantIsForgotten(t *testing.T) {
	var s Scheduler
	s.Policy = testPolicy()
	now := time.Unix(10, 0)
	s.Step(now, uint64(now.UnixNano()), shares(50, 50))
	s.Step(now.Add(time.Millisecond), uint64(now.UnixNano()), shares(50))
	if len(s.tenants) != 1 {
		t.Fatalf("tenants remembered: %d, want 1", len(s.tenants))
	}
}
