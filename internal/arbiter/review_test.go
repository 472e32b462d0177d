package arbiter

import (
	"testing"
	"time"
)

// TestSuppressedHardTenantKeepsNoLumpAtFloorZero: a hard P2 tenant of long
// kernels banks up to one of its bills (bank's lump term). Once a P0 tenant
// wants the GPU, P2 is capped at the priority floor (0 by default) and must
// not be served ahead of P0 with what it banked: a suppressed tenant that is
// eligible ranks first, so a kernel's worth of tokens kept at floor 0 ran
// another long kernel of P2's before P0's first burst.
func TestSuppressedHardTenantKeepsNoLumpAtFloorZero(t *testing.T) {
	worst := time.Duration(0)
	for phase := 0; phase < 40; phase++ {
		p := testPolicy()
		p.Quantum = 10 * time.Millisecond
		s := &Scheduler{Policy: p}
		start := time.Unix(1000, 0)
		p2 := Tenant{Key: "p2", Share: 0.5, Hard: true, Priority: 2, Inflight: 1}
		p0 := Tenant{Key: "p0", Share: 0.5, Priority: 0}
		doneAt := -1 // P2's 10 ms kernel in flight completes at this tick (-1 none)
		arrive := 300 + phase
		var p2GoAfter time.Duration
		for n := 0; n < arrive+30; n++ {
			now := start.Add(time.Duration(n) * time.Millisecond)
			mono := uint64(now.UnixNano())
			p2.DemandNs = mono
			if n >= arrive {
				p0.DemandNs, p0.Inflight = mono, 1
			}
			if n == doneAt { // its kernel completed: billed whole
				p2.BusyNs += uint64(10 * time.Millisecond)
				doneAt = -1
			}
			vs := s.Step(now, mono, []Tenant{p2, p0})
			if vs[0].Go && doneAt < 0 { // the hook launches its next kernel
				doneAt = n + 10
				if n > arrive { // one tick to notice P0's stamp
					p2GoAfter += 10 * time.Millisecond
				}
			}
		}
		worst = max(worst, p2GoAfter)
	}
	if worst > 0 {
		t.Errorf("a hard P2 tenant at priority floor 0 was let go for %v after P0 wanted the GPU; want none", worst)
	}
}
