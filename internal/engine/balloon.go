package engine

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Memory balloons (docs/balloon.md): a running pod that opted in and settled can
// lend the memory between its cap and its floor. When a pod fits nowhere, the
// engine considers that reclaimable memory before preempting anyone: it lowers
// every candidate owner to its floor on the cluster, asks the placement engine
// (the same fragmentation-aware scoring as any placement), then keeps lowered only
// what the chosen GPUs need, largest lender first, and puts everyone else back. The
// borrower is preemptible by definition and never outranks an owner it borrows from.

// Loan is what one borrower took from one owner.
type Loan struct {
	Owner string
	// Lent is the owner's decision while lent (its shares lowered by what was
	// lent, never below its floor); Original what it had.
	Lent, Original placement.Decision
}

// balloonState is the engine's book of owners' floors and borrowers' loans.
type balloonState struct {
	floors map[string]int32  // owner key → floor MiB per GPU
	loans  map[string][]Loan // borrower key → loans
	lentBy map[string]string // owner key → borrower key (an owner lends once)
}

func (b *balloonState) init() {
	if b.floors == nil {
		b.floors, b.loans, b.lentBy = map[string]int32{}, map[string][]Loan{}, map[string]string{}
	}
}

// SetReclaimable records that running pod key opted in and, settled, may be lowered
// to floorMiB per GPU (what the node agent publishes); 0 withdraws it. An owner whose
// memory is lent keeps its loan until the borrower ends or ReclaimFor returns it.
func (e *Engine) SetReclaimable(key string, floorMiB int32) error {
	e.balloons.init()
	if _, ok := e.running[key]; !ok {
		return fmt.Errorf("engine: no running pod %s", key)
	}
	if floorMiB <= 0 {
		delete(e.balloons.floors, key)
		return nil
	}
	e.balloons.floors[key] = floorMiB
	return nil
}

// Loans returns a borrower's loans (nil: it borrowed nothing).
func (e *Engine) Loans(borrower string) []Loan { return e.balloons.loans[borrower] }

// LentOwners lists the owners whose memory is lent now.
func (e *Engine) LentOwners() []string {
	out := make([]string, 0, len(e.balloons.lentBy))
	for o := range e.balloons.lentBy {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// Borrower says whether running pod key rides on reclaimed memory (also after
// its owners ended: it stays preemptible on what it holds).
func (e *Engine) Borrower(key string) bool {
	_, ok := e.balloons.loans[key]
	return ok
}

// AdoptBorrower books a borrower that already holds d (a restarted or rebuilt
// scheduler reads it back from its tessera.io/borrowed record): what d's GPUs lack
// is taken again from the named owners, largest share first. The record is what
// was lent, so their current floors do not limit it (an owner that grew since is
// reclaimed next); owners it outranks or that lend already are not asked. An
// error, and nothing changed, when they cannot cover it.
func (e *Engine) AdoptBorrower(p *Pod, d placement.Decision, started time.Time, owners []string) error {
	if err := e.adoptable(p); err != nil {
		return err
	}
	e.balloons.init()
	var from []*Running
	for _, k := range owners {
		r := e.running[k]
		if r != nil && e.balloons.lentBy[k] == "" && e.balloons.loans[k] == nil && r.Pod.Class <= p.Class &&
			!slices.Contains(from, r) {
			from = append(from, r)
		}
	}
	slices.SortFunc(from, func(a, b *Running) int { return cmp.Compare(a.Pod.Key, b.Pod.Key) })
	loans, ok := e.lend(d, from, func(*Running) int32 { return 0 })
	if !ok {
		return fmt.Errorf("adopt borrower %s: its owners %v cannot lend what node %s lacks for it", p.Key, owners, d.NodeName)
	}
	if err := e.cluster.Reserve(d); err != nil {
		e.unlend(loans)
		return fmt.Errorf("adopt borrower %s: %w", p.Key, err)
	}
	p.Preemptible = true
	if loans == nil {
		loans = []Loan{} // a borrower still, though its GPUs had room now
	}
	e.balloons.loans[p.Key] = loans
	for _, l := range loans {
		e.balloons.lentBy[l.Owner] = p.Key
		e.running[l.Owner].Decision = l.Lent
	}
	n := len(e.events)
	e.book(p, d, started)
	e.events = e.events[:n]
	return nil
}

// lowered is d with every share at most floor MiB.
func lowered(d placement.Decision, floor int32) placement.Decision {
	out := d
	out.Grant.Shares = slices.Clone(d.Grant.Shares)
	for i := range out.Grant.Shares {
		s := &out.Grant.Shares[i]
		if s.MemMiB > floor {
			s.MemMiB = floor
		}
	}
	return out
}

// swap replaces a reservation on the cluster.
func (e *Engine) swap(from, to placement.Decision) error {
	if err := e.cluster.Release(from); err != nil {
		return err
	}
	if err := e.cluster.Reserve(to); err != nil {
		_ = e.cluster.Reserve(from)
		return err
	}
	return nil
}

// lenders are the running owners p may borrow from: not lending already, not
// themselves borrowers, at least as urgent as p, with memory above their floors.
func (e *Engine) lenders(p *Pod) []*Running {
	var out []*Running
	for key, floor := range e.balloons.floors {
		r := e.running[key]
		if r == nil || e.balloons.lentBy[key] != "" || e.balloons.loans[key] != nil || r.Pod.Class > p.Class {
			continue
		}
		if memOf(lowered(r.Decision, floor)) < memOf(r.Decision) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *Running) int { return cmp.Compare(a.Pod.Key, b.Pod.Key) })
	return out
}

func memOf(d placement.Decision) int64 {
	var n int64
	for _, s := range d.Grant.Shares {
		n += int64(s.MemMiB)
	}
	return n
}

// placeOnBalloons places p on reclaimable memory; false (and nothing changed) when
// even every floor would not make room.
func (e *Engine) placeOnBalloons(p *Pod, now time.Time) bool {
	if len(e.balloons.floors) == 0 {
		return false
	}
	owners := e.lenders(p)
	if len(owners) == 0 {
		return false
	}
	for _, r := range owners {
		if e.swap(r.Decision, lowered(r.Decision, e.balloons.floors[r.Pod.Key])) != nil {
			e.restore(owners, r)
			return false
		}
	}
	d, ok := e.sched.Find(&p.Request)
	e.restore(owners, nil)
	if !ok {
		return false
	}
	loans, ok := e.lend(d, owners, e.floorOf)
	if !ok {
		return false
	}
	if err := e.cluster.Reserve(d); err != nil {
		e.unlend(loans)
		return false
	}
	p.Preemptible = true // a borrower is preemptible by definition
	e.balloons.loans[p.Key] = loans
	for _, l := range loans {
		e.balloons.lentBy[l.Owner] = p.Key
		e.running[l.Owner].Decision = l.Lent
	}
	e.exhausted.pendingDel(e.keyOf(p), e.placer.gen)
	e.book(p, d, now)
	return true
}

// restore puts owners back at their decisions, up to (not including) stop.
func (e *Engine) restore(owners []*Running, stop *Running) {
	for _, r := range owners {
		if r == stop {
			return
		}
		_ = e.swap(lowered(r.Decision, e.balloons.floors[r.Pod.Key]), r.Decision)
	}
}

// lend lowers, per GPU of d, the owners there (largest reclaim first) by what the
// GPU lacks for d's share, no further: memory an owner lends is the borrower's, and
// none is freed for anyone else. False, with nothing changed, if it cannot.
func (e *Engine) lend(d placement.Decision, owners []*Running, floor func(*Running) int32) ([]Loan, bool) {
	node := &e.cluster.Nodes[d.Node]
	take := map[string]map[int]int32{} // owner → GPU → MiB
	for _, s := range d.Grant.Shares {
		need := s.MemMiB - node.GPUs[s.GPU].FreeMemMiB
		cands := onGPU(owners, d.Node, s.GPU)
		slices.SortFunc(cands, func(a, b *Running) int {
			return cmp.Compare(reclaimOn(b, s.GPU, floor(b)), reclaimOn(a, s.GPU, floor(a)))
		})
		for _, r := range cands {
			if need <= 0 {
				break
			}
			n := min(need, reclaimOn(r, s.GPU, floor(r)))
			if take[r.Pod.Key] == nil {
				take[r.Pod.Key] = map[int]int32{}
			}
			take[r.Pod.Key][s.GPU] = n
			need -= n
		}
		if need > 0 {
			return nil, false
		}
	}
	var loans []Loan
	for _, r := range owners {
		t := take[r.Pod.Key]
		if t == nil {
			continue
		}
		l := Loan{Owner: r.Pod.Key, Original: r.Decision, Lent: r.Decision}
		l.Lent.Grant.Shares = slices.Clone(r.Decision.Grant.Shares)
		for i := range l.Lent.Grant.Shares {
			l.Lent.Grant.Shares[i].MemMiB -= t[l.Lent.Grant.Shares[i].GPU]
		}
		if e.swap(l.Original, l.Lent) != nil {
			e.unlend(loans)
			return nil, false
		}
		loans = append(loans, l)
	}
	return loans, true
}

func (e *Engine) unlend(loans []Loan) {
	for _, l := range loans {
		_ = e.swap(l.Lent, l.Original)
	}
}

func (e *Engine) floorOf(r *Running) int32 { return e.balloons.floors[r.Pod.Key] }

// reclaimOn is what owner r can lend on GPU g down to floor.
func reclaimOn(r *Running, g int, floor int32) int32 {
	for _, s := range r.Decision.Grant.Shares {
		if s.GPU == g && s.MemMiB > floor {
			return s.MemMiB - floor
		}
	}
	return 0
}

func onGPU(owners []*Running, node, gpu int) []*Running {
	var out []*Running
	for _, r := range owners {
		if r.Decision.Node != node {
			continue
		}
		if slices.ContainsFunc(r.Decision.Grant.Shares, func(s partition.Share) bool { return s.GPU == gpu }) {
			out = append(out, r)
		}
	}
	return out
}

// returnLoans gives a borrower's loans back when it stops (completes, is deleted,
// is preempted or reclaimed): the owners are raised to their original decisions.
func (e *Engine) returnLoans(borrower string) {
	loans := e.balloons.loans[borrower]
	delete(e.balloons.loans, borrower)
	for _, l := range loans {
		delete(e.balloons.lentBy, l.Owner)
		r := e.running[l.Owner]
		if r == nil {
			continue // the owner ended first: its lowered decision went with it
		}
		if e.swap(l.Lent, l.Original) == nil {
			r.Decision = l.Original
		}
	}
}

// ReclaimFor evicts the borrower holding owner's memory (the node agent saw the
// owner grow back), returning it; the owner gets its original decision. The
// borrower is reported Preempted with reason "balloon reclaim".
func (e *Engine) ReclaimFor(owner string, now time.Time) (string, bool) {
	b := e.balloons.lentBy[owner]
	r, o := e.running[b], e.running[owner]
	if b == "" || r == nil || o == nil {
		return "", false
	}
	e.stop(r)
	e.emit(Event{Kind: Preempted, Time: now, Pod: r.Pod, Decision: r.Decision, By: o.Pod, Ran: now.Sub(r.Started), Reason: "balloon reclaim"})
	return b, true
}

// lenderEnded forgets the loan of an owner that stopped while lent: its lowered
// decision went with it, and its key may come back as a new pod, which must not be
// "raised back" into the old owner's decision when the borrower ends. The borrower
// stays a borrower (preemptible) on what it holds.
func (e *Engine) lenderEnded(owner string) {
	b, ok := e.balloons.lentBy[owner]
	if !ok {
		return
	}
	delete(e.balloons.lentBy, owner)
	if loans, ok := e.balloons.loans[b]; ok {
		e.balloons.loans[b] = slices.DeleteFunc(loans, func(l Loan) bool { return l.Owner == owner })
	}
}
