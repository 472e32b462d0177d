package balloon

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Owner is an opted-in container on one GPU as the ledger sees it.
type Owner struct {
	Key      string // the container (allocation) it is
	Priority int    // larger is more important (priority.Class values are inverted by the caller)
	Ceiling  uint64 // the cap it was given
	Floor    uint64 // the lowest cap the policy allows it now
}

// Borrower is a pod placed on memory reclaimed from owners.
type Borrower struct {
	Key      string
	Priority int
	Seq      uint64 // larger = placed later; the youngest loses least when evicted
}

// Loan is what one borrower took on one GPU, per owner.
type Loan struct {
	Borrower Borrower
	From     map[string]uint64 // owner key → bytes
}

// Bytes is the loan's total.
func (l Loan) Bytes() uint64 {
	var n uint64
	for _, b := range l.From {
		n += b
	}
	return n
}

// GPU is one physical GPU's balloon book: its owners, loans and what is committed.
type GPU struct {
	Physical  uint64 // the GPU's memory
	Committed uint64 // caps of every container on it that is not an owner (their full caps)
	owners    map[string]Owner
	loans     map[string]Loan // borrower key → loan
}

// NewGPU is an empty book for a GPU of physical bytes with committed bytes of
// plain (non-ballooned) caps on it.
func NewGPU(physical, committed uint64) *GPU {
	return &GPU{Physical: physical, Committed: committed, owners: map[string]Owner{}, loans: map[string]Loan{}}
}

// Errors of Lend.
var (
	ErrNotEnough    = errors.New("not enough reclaimable memory")
	ErrAlreadyLent  = errors.New("borrower already holds a loan on this GPU")
	ErrOverPhysical = errors.New("the GPU would be promised beyond its physical memory")
)

// SetOwner adds or updates an owner. A floor that rose above what is still unlent
// is kept as asked; Reclaimable then reports 0 and Shortfall says how much the
// owner needs back.
func (g *GPU) SetOwner(o Owner) { g.owners[o.Key] = o }

// RemoveOwner forgets an owner that ended; its loans stay until the borrowers end
// (the memory is free now, not promised twice).
func (g *GPU) RemoveOwner(key string) {
	delete(g.owners, key)
}

// Lent is how much of owner key's memory is on loan.
func (g *GPU) Lent(key string) uint64 {
	var n uint64
	for _, l := range g.loans {
		n += l.From[key]
	}
	return n
}

// Available is what owner o can still lend: ceiling − floor − lent, never negative.
func (g *GPU) Available(key string) uint64 {
	o, ok := g.owners[key]
	if !ok || o.Floor >= o.Ceiling {
		return 0
	}
	free := o.Ceiling - o.Floor
	lent := g.Lent(key)
	if lent >= free {
		return 0
	}
	return free - lent
}

// Reclaimable is what the GPU can lend to a pod of priority prio: the owners'
// available memory, counting only owners the pod does not outrank.
func (g *GPU) Reclaimable(prio int) uint64 {
	var n uint64
	for k, o := range g.owners {
		if o.Priority >= prio {
			n += g.Available(k)
		}
	}
	return n
}

// promised is every byte the GPU has promised: plain caps, owners' ceilings and
// loans to borrowers of owners that ended.
func (g *GPU) promised() uint64 {
	n := g.Committed
	for _, o := range g.owners {
		n += o.Ceiling
	}
	for _, l := range g.loans {
		for k, b := range l.From {
			if _, ok := g.owners[k]; !ok {
				n += b
			}
		}
	}
	return n
}

// Lend takes bytes for borrower b from owners it does not outrank, largest
// available first (fewest owners inflated), and returns the loan. Nothing changes
// on error.
func (g *GPU) Lend(b Borrower, bytes uint64) (Loan, error) {
	if _, ok := g.loans[b.Key]; ok {
		return Loan{}, fmt.Errorf("%s: %w", b.Key, ErrAlreadyLent)
	}
	if bytes == 0 {
		return Loan{}, errors.New("a loan of 0 bytes")
	}
	if g.Reclaimable(b.Priority) < bytes {
		return Loan{}, fmt.Errorf("%s wants %d bytes, %d reclaimable: %w", b.Key, bytes, g.Reclaimable(b.Priority), ErrNotEnough)
	}
	type offer struct {
		key   string
		avail uint64
	}
	var offers []offer
	for k, o := range g.owners {
		if a := g.Available(k); a > 0 && o.Priority >= b.Priority {
			offers = append(offers, offer{k, a})
		}
	}
	slices.SortFunc(offers, func(x, y offer) int {
		if c := cmp.Compare(y.avail, x.avail); c != 0 {
			return c
		}
		return cmp.Compare(x.key, y.key)
	})
	loan := Loan{Borrower: b, From: map[string]uint64{}}
	left := bytes
	for _, o := range offers {
		take := min(o.avail, left)
		loan.From[o.key] = take
		left -= take
		if left == 0 {
			break
		}
	}
	g.loans[b.Key] = loan
	return loan, nil
}

// Return ends borrower key's loan (it ended or was evicted) and returns it.
func (g *GPU) Return(key string) (Loan, bool) {
	l, ok := g.loans[key]
	delete(g.loans, key)
	return l, ok
}

// Loans lists the loans, most reclaimable first: ReclaimOrder.
func (g *GPU) Loans() []Loan {
	out := make([]Loan, 0, len(g.loans))
	for _, l := range g.loans {
		out = append(out, l)
	}
	slices.SortFunc(out, reclaimFirst)
	return out
}

// reclaimFirst orders loans by who goes first when owners need memory back: the
// lowest priority, then the youngest (least work lost), then by key.
func reclaimFirst(a, b Loan) int {
	if c := cmp.Compare(a.Borrower.Priority, b.Borrower.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Borrower.Seq, a.Borrower.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.Borrower.Key, b.Borrower.Key)
}

// ReclaimFor is the borrowers to evict, in order, so that owner key gets need bytes
// of its loans back: borrowers holding its memory, lowest priority and youngest
// first, until their loans from it cover need. Fewer than need if its loans do not.
func (g *GPU) ReclaimFor(key string, need uint64) []Loan {
	var out []Loan
	var got uint64
	for _, l := range g.Loans() {
		if got >= need {
			break
		}
		if b := l.From[key]; b > 0 {
			out = append(out, l)
			got += b
		}
	}
	return out
}

// Check verifies the ledger's rules; property tests call it after every step.
func (g *GPU) Check() error {
	for k, o := range g.owners {
		if lent := g.Lent(k); lent > o.Ceiling {
			return fmt.Errorf("owner %s: %d bytes lent of a %d-byte ceiling", k, lent, o.Ceiling)
		}
	}
	for bk, l := range g.loans {
		for k := range l.From {
			if o, ok := g.owners[k]; ok && l.Borrower.Priority > o.Priority {
				return fmt.Errorf("borrower %s (priority %d) outranks owner %s (%d)", bk, l.Borrower.Priority, k, o.Priority)
			}
		}
	}
	if p := g.promised(); p > g.Physical {
		return fmt.Errorf("%d bytes promised on a %d-byte GPU: %w", p, g.Physical, ErrOverPhysical)
	}
	return nil
}

// Shortfall is how much owner key needs back to have its floor: lent − (ceiling −
// floor), or 0.
func (g *GPU) Shortfall(key string) uint64 {
	o, ok := g.owners[key]
	if !ok {
		return 0
	}
	spare := o.Ceiling - min(o.Floor, o.Ceiling)
	if lent := g.Lent(key); lent > spare {
		return lent - spare
	}
	return 0
}
