package balloon

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestLendRules(t *testing.T) {
	g := NewGPU(80*GiB, 0)
	g.SetOwner(Owner{Key: "a", Priority: 2, Ceiling: 40 * GiB, Floor: 28 * GiB})
	g.SetOwner(Owner{Key: "b", Priority: 1, Ceiling: 40 * GiB, Floor: 20 * GiB})
	if got := g.Reclaimable(1); got != 32*GiB {
		t.Fatalf("reclaimable for priority 1: %d GiB, want 32", got/GiB)
	}
	if got := g.Reclaimable(2); got != 12*GiB {
		t.Fatalf("a priority-2 pod outranks owner b: reclaimable %d GiB, want 12", got/GiB)
	}
	loan, err := g.Lend(Borrower{Key: "x", Priority: 1, Seq: 1}, 25*GiB)
	if err != nil {
		t.Fatal(err)
	}
	if loan.From["b"] != 20*GiB || loan.From["a"] != 5*GiB || loan.Bytes() != 25*GiB {
		t.Errorf("loan %v: want the largest offer (b, 20) first, then a", loan.From)
	}
	if _, err := g.Lend(Borrower{Key: "x", Priority: 1}, GiB); !errors.Is(err, ErrAlreadyLent) {
		t.Errorf("second loan to x: %v", err)
	}
	if _, err := g.Lend(Borrower{Key: "y", Priority: 1}, 8*GiB); !errors.Is(err, ErrNotEnough) {
		t.Errorf("lent twice: %v", err)
	}
	if _, err := g.Lend(Borrower{Key: "z", Priority: 3}, GiB); !errors.Is(err, ErrNotEnough) {
		t.Errorf("a borrower that outranks every owner got a loan: %v", err)
	}
	y, err := g.Lend(Borrower{Key: "y", Priority: 0, Seq: 2}, 7*GiB)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	// Owner a grows: y (priority 0) goes before x (priority 1).
	order := g.ReclaimFor("a", 6*GiB)
	if len(order) != 1 || order[0].Borrower.Key != "y" || y.From["a"] != 7*GiB {
		t.Fatalf("reclaim for a: %+v, want y alone (it holds 7 GiB of a)", order)
	}
	if order := g.ReclaimFor("a", 10*GiB); len(order) != 2 || order[1].Borrower.Key != "x" {
		t.Fatalf("reclaim 10 GiB for a: %+v, want y then x", order)
	}
	g.Return("y")
	if got := g.Available("a"); got != 7*GiB {
		t.Errorf("after y returned: a has %d GiB to lend, want 7", got/GiB)
	}
	// The owner's floor rises above what is unlent: a shortfall, not a double loan.
	g.SetOwner(Owner{Key: "a", Priority: 2, Ceiling: 40 * GiB, Floor: 38 * GiB})
	if got := g.Shortfall("a"); got != 3*GiB {
		t.Errorf("shortfall %d GiB, want 3", got/GiB)
	}
	if got := g.Available("a"); got != 0 {
		t.Errorf("available %d with a shortfall", got)
	}
}

func TestCheckRefusesOverPhysical(t *testing.T) {
	g := NewGPU(40*GiB, 20*GiB)
	g.SetOwner(Owner{Key: "a", Ceiling: 30 * GiB, Floor: 10 * GiB})
	if err := g.Check(); !errors.Is(err, ErrOverPhysical) {
		t.Errorf("50 GiB promised on 40: %v", err)
	}
}

// TestLedgerProperties drives random owners, loans, floor changes, returns and
// reclaims and checks after every step: never lent twice (Σ loans from an owner ≤
// ceiling − floor at lending), no borrower above an owner it borrowed from, the GPU
// never promised beyond its memory, and reclaim order by priority then age.
func TestLedgerProperties(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		g := NewGPU(80*GiB, 8*GiB)
		var room uint64 = 72 * GiB
		owners := map[string]Owner{}
		var seq uint64
		for step := range 60 {
			switch r.IntN(5) {
			case 0: // a new owner, if it fits the GPU
				c := uint64(1+r.IntN(20)) * GiB
				if c > room {
					continue
				}
				room -= c
				o := Owner{Key: string(rune('a' + len(owners))), Priority: r.IntN(4), Ceiling: c, Floor: uint64(r.IntN(int(c/GiB)+1)) * GiB}
				owners[o.Key] = o
				g.SetOwner(o)
			case 1, 2: // a loan
				seq++
				b := Borrower{Key: "b" + string(rune('0'+seq%60)), Priority: r.IntN(4), Seq: seq}
				before := map[string]uint64{}
				for k := range owners {
					before[k] = g.Available(k)
				}
				loan, err := g.Lend(b, uint64(1+r.IntN(8))*GiB)
				if err != nil {
					continue
				}
				for k, n := range loan.From {
					if n > before[k] {
						t.Fatalf("seed %d step %d: %s took %d of owner %s, which had %d to lend", seed, step, b.Key, n, k, before[k])
					}
					if owners[k].Priority < b.Priority {
						t.Fatalf("seed %d step %d: %s outranks owner %s", seed, step, b.Key, k)
					}
				}
			case 3: // a borrower ends
				if ls := g.Loans(); len(ls) > 0 {
					g.Return(ls[r.IntN(len(ls))].Borrower.Key)
				}
			case 4: // an owner grows and reclaims its shortfall
				for k, o := range owners {
					o.Floor = min(o.Ceiling, o.Floor+uint64(r.IntN(4))*GiB)
					owners[k] = o
					g.SetOwner(o)
					need := g.Shortfall(k)
					victims := g.ReclaimFor(k, need)
					for i := 1; i < len(victims); i++ {
						if reclaimFirst(victims[i-1], victims[i]) > 0 {
							t.Fatalf("seed %d: reclaim order %v", seed, victims)
						}
					}
					for _, v := range victims {
						g.Return(v.Borrower.Key)
					}
					if g.Shortfall(k) != 0 {
						t.Fatalf("seed %d step %d: owner %s still short %d after evicting its borrowers", seed, step, k, g.Shortfall(k))
					}
					break
				}
			}
			if err := g.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
}
