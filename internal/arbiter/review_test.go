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

// TestHardTenantWithAStaleCountIsNotStarvedByUnbilledTime: a hard tenant
// whose in-flight count stays up for a thread that is away (one that
// launched and then waits on the host for another thread without coming
// back through the hook: PyTorch's autograd thread between backward passes)
// holds a go while its launching thread is briefly on the host. Its
// unbilled time then grows past what its bank may ever hold; no bill comes
// (nothing runs), it stays active (its thread waits in pace, stamping), and
// the count stays up, so nothing reset it: the tenant was never eligible
// again, its thread waited in pace forever.
func TestHardTenantWithAStaleCountIsNotStarvedByUnbilledTime(t *testing.T) {
	for away := 1; away <= 4; away++ {
		p := testPolicy()
		p.Quantum = 10 * time.Millisecond
		p.IdleAfter = 5 * time.Millisecond
		s := &Scheduler{Policy: p}
		start := time.Unix(1000, 0)
		// Inflight 1 throughout: the away thread's burst, counted until it
		// comes back.
		a := Tenant{Key: "a", Share: 0.1, Hard: true, Priority: 2, Inflight: 1}
		wentGo, n := false, 0
		step := func() bool {
			now := start.Add(time.Duration(n) * time.Millisecond)
			n++
			return s.Step(now, uint64(now.UnixNano()), []Tenant{a})[0].Go
		}
		// Launching below its share (a light user: its tokens fill up):
		// stamps, and a short kernel's worth is billed per step it held a go.
		for i := 0; i < 200 || !wentGo; i++ {
			a.DemandNs = uint64(start.Add(time.Duration(n) * time.Millisecond).UnixNano())
			if wentGo {
				a.BusyNs += uint64(50 * time.Microsecond)
			}
			wentGo = step()
		}
		// Its launching thread on the host for `away` ms, holding the go.
		for i := 0; i < away; i++ {
			wentGo = step()
		}
		// Back: it wants to launch, and waits in pace (stamping) until it may.
		gotGo := false
		for i := 0; i < 500 && !gotGo; i++ {
			a.DemandNs = uint64(start.Add(time.Duration(n) * time.Millisecond).UnixNano())
			gotGo = step()
		}
		if !gotGo {
			st := s.tenants["a"]
			t.Errorf("away %d ms: a hard 10%% tenant never got a go again in 500 ms (tokens %.4f s, unbilled %.4f s)",
				away, st.tokens, st.unbilled)
		}
	}
}
