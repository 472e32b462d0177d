package engine

import (
	"slices"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

func memPod(key string, class priority.Class, milli, memMiB int32, sub int) *Pod {
	return &Pod{Key: key, Class: class, Submitted: at(sub),
		Request: placement.Request{Name: key, CPUMilli: 1000, MemMiB: 1024, NumGPU: 1, GPUMilli: milli, GPUMemMiB: memMiB}}
}

func freeMem(e *Engine) int32 { return e.cluster.Nodes[0].GPUs[0].FreeMemMiB }

// TestBorrowReclaimableBeforePreempting: a pod that fits nowhere rides on an owner's
// reclaimable memory instead of preempting; it is preemptible, borrows only what it
// needs from an owner it does not outrank, never from one already lent, and the
// owner gets its memory back when the borrower ends or is reclaimed.
func TestBorrowReclaimableBeforePreempting(t *testing.T) {
	cfg := baseConfig()
	cfg.Preemption = true
	e := newEngine(t, cfg, gpuNode("n0", 1))
	owner := memPod("owner", priority.P1, 500, 30000, 0)
	if err := e.Submit(owner); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(1))
	placed(e)
	victim := memPod("low", priority.P3, 100, 4000, 1)
	victim.Preemptible = true
	_ = e.Submit(victim)
	e.Cycle(at(2))
	placed(e)
	if free := freeMem(e); free != 40960-34000 {
		t.Fatalf("free %d MiB", free)
	}
	b := memPod("borrower", priority.P2, 300, 20000, 3)
	_ = e.Submit(b)
	e.Cycle(at(4))
	if ev := placed(e); len(ev) != 0 {
		t.Fatalf("without reclaimable memory: %v (a P2 pod may preempt the P3 one only if that makes room; it does not)", ev)
	}
	if err := e.SetReclaimable("owner", 16000); err != nil {
		t.Fatal(err)
	}
	e.Cycle(at(5))
	if ev := placed(e); !slices.Equal(ev, []string{"borrower@n0"}) {
		t.Fatalf("events %v, want the borrower placed and nobody preempted", ev)
	}
	loans := e.Loans("borrower")
	// The GPU lacked 20000 − 6960 = 13040 MiB: exactly that is lent, no more.
	if len(loans) != 1 || loans[0].Owner != "owner" || loans[0].Lent.Grant.Shares[0].MemMiB != 30000-13040 || loans[0].Original.Grant.Shares[0].MemMiB != 30000 {
		t.Fatalf("loans %+v", loans)
	}
	if !b.Preemptible {
		t.Error("a borrower is not preemptible")
	}
	if free := freeMem(e); free != 0 {
		t.Fatalf("free %d MiB after lending", free)
	}
	// Lent once: another pod cannot borrow the same owner's memory.
	_ = e.Submit(memPod("second", priority.P2, 100, 8000, 6)) // more than preempting the P3 pod frees
	e.Cycle(at(7))
	if ev := placed(e); len(ev) != 0 {
		t.Fatalf("lent twice: %v", ev)
	}
	// The borrower ends: the owner is raised back.
	if err := e.Complete("borrower"); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.Running("owner"); r.Decision.Grant.Shares[0].MemMiB != 30000 || e.Loans("borrower") != nil {
		t.Fatalf("owner not raised back: %+v", r.Decision)
	}
	e.Cycle(at(8)) // the waiting pod now borrows the 1040 MiB it lacks
	if ev := placed(e); !slices.Equal(ev, []string{"second@n0"}) {
		t.Fatalf("after the borrower ended: %v", ev)
	}
	if l := e.Loans("second"); len(l) != 1 || l[0].Lent.Grant.Shares[0].MemMiB != 30000-1040 {
		t.Fatalf("loans of second: %+v", l)
	}
	if err := e.Complete("second"); err != nil {
		t.Fatal(err)
	}
	// Borrow again, then the owner grows: the borrower is reclaimed.
	b2 := memPod("b2", priority.P2, 300, 20000, 9)
	_ = e.Submit(b2)
	e.Cycle(at(10))
	if ev := placed(e); !slices.Contains(ev, "b2@n0") {
		t.Fatalf("second borrow: %v", ev)
	}
	who, ok := e.ReclaimFor("owner", at(11))
	if !ok || who != "b2" {
		t.Fatalf("reclaim: %q %v", who, ok)
	}
	evs := e.Events()
	if len(evs) != 1 || evs[0].Kind != Preempted || evs[0].Reason != "balloon reclaim" || evs[0].Pod.Key != "b2" {
		t.Fatalf("reclaim events %+v", evs)
	}
	if r, _ := e.Running("owner"); r.Decision.Grant.Shares[0].MemMiB != 30000 {
		t.Fatalf("owner not raised after the reclaim: %+v", r.Decision)
	}
}

// TestBorrowerNeverOutranksOwner: a pod more urgent than every owner borrows
// nothing (it may preempt instead, by the usual rules).
func TestBorrowerNeverOutranksOwner(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n0", 1))
	_ = e.Submit(memPod("owner", priority.P2, 500, 30000, 0))
	e.Cycle(at(1))
	placed(e)
	if err := e.SetReclaimable("owner", 10000); err != nil {
		t.Fatal(err)
	}
	_ = e.Submit(memPod("urgent", priority.P0, 300, 20000, 2))
	e.Cycle(at(3))
	if ev := placed(e); len(ev) != 0 {
		t.Fatalf("a P0 pod borrowed from a P2 owner: %v", ev)
	}
	if err := e.SetReclaimable("ghost", 1); err == nil {
		t.Error("a pod that does not run accepted as an owner")
	}
}

// TestOwnerThatEndsWhileLent: the owner completes while its memory is lent. A
// later ReclaimFor for it finds nothing to reclaim (no panic), a new pod reusing its
// key does not evict the old owner's borrower, and when the borrower ends, a new pod that reuses the owner's key is not "raised back" into
// the old owner's decision (the cluster's books would release memory it never
// held).
func TestOwnerThatEndsWhileLent(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n0", 1))
	_ = e.Submit(memPod("owner", priority.P1, 500, 30000, 0))
	e.Cycle(at(1))
	placed(e)
	if err := e.SetReclaimable("owner", 16000); err != nil {
		t.Fatal(err)
	}
	_ = e.Submit(memPod("borrower", priority.P2, 300, 20000, 2))
	e.Cycle(at(3))
	if ev := placed(e); !slices.Equal(ev, []string{"borrower@n0"}) {
		t.Fatalf("borrow: %v", ev)
	}
	if err := e.Complete("owner"); err != nil {
		t.Fatal(err)
	}
	if who, ok := e.ReclaimFor("owner", at(4)); ok {
		t.Fatalf("reclaimed %q for an owner that ended", who)
	}
	_ = e.Submit(memPod("owner", priority.P1, 500, 8000, 5)) // same key, a new pod
	e.Cycle(at(6))
	if ev := placed(e); !slices.Equal(ev, []string{"owner@n0"}) {
		t.Fatalf("new pod with the owner's key: %v", ev)
	}
	if who, ok := e.ReclaimFor("owner", at(7)); ok {
		t.Fatalf("evicted %q for a new pod that lent it nothing", who)
	}
	if err := e.Complete("borrower"); err != nil {
		t.Fatal(err)
	}
	r, _ := e.Running("owner")
	if r.Decision.Grant.Shares[0].MemMiB != 8000 {
		t.Fatalf("the new pod was given the old owner's decision: %+v", r.Decision.Grant.Shares)
	}
	if free := freeMem(e); free != 40960-8000 {
		t.Fatalf("free %d MiB, want %d: the books are off", free, 40960-8000)
	}
}

// lentPair places an owner (P1, 30000 MiB, 400m), a plain P3 pod (4000 MiB, 200m)
// and a P2 borrower (20000 MiB, 300m) that borrows the 13040 MiB the GPU lacks.
func lentPair(t *testing.T) *Engine {
	t.Helper()
	cfg := baseConfig()
	cfg.Preemption = true
	e := newEngine(t, cfg, gpuNode("n0", 1))
	_ = e.Submit(memPod("owner", priority.P1, 400, 30000, 0))
	e.Cycle(at(1))
	plain := memPod("plain", priority.P3, 200, 4000, 1)
	plain.Preemptible = true
	_ = e.Submit(plain)
	e.Cycle(at(2))
	if err := e.SetReclaimable("owner", 16000); err != nil {
		t.Fatal(err)
	}
	_ = e.Submit(memPod("borrower", priority.P2, 300, 20000, 3))
	e.Cycle(at(5))
	if ev := placed(e); !slices.Equal(ev, []string{"owner@n0", "plain@n0", "borrower@n0"}) {
		t.Fatalf("setup: %v", ev)
	}
	return e
}

// TestBorrowersArePreemptedFirst: a P0 pod that fits after evicting either the
// plain P3 pod (less work lost) or the P2 borrower evicts the borrower, and the
// borrower's owner gets its memory back.
func TestBorrowersArePreemptedFirst(t *testing.T) {
	e := lentPair(t)
	_ = e.Submit(memPod("urgent", priority.P0, 300, 4000, 1000))
	e.Cycle(at(1000))
	if ev := placed(e); !slices.Equal(ev, []string{"evict:borrower", "urgent@n0"}) {
		t.Fatalf("events %v, want the borrower evicted (not the plain pod, which loses less work)", ev)
	}
	if r, _ := e.Running("owner"); r.Decision.Grant.Shares[0].MemMiB != 30000 {
		t.Fatalf("owner not raised back: %+v", r.Decision.Grant.Shares)
	}
}

// TestLentMemoryIsNotCountedAsFreed: evicting the borrower frees 20000 MiB on the
// node, but 13040 of it is its owner's: a P0 pod that needs 15000 MiB must not
// be placed on it (the plan would not hold); the plain pod is no help either, so
// nobody is evicted.
func TestLentMemoryIsNotCountedAsFreed(t *testing.T) {
	e := lentPair(t)
	_ = e.Submit(memPod("big", priority.P0, 300, 15000, 1000))
	e.Cycle(at(1000)) // would panic ("preemption plan did not make room") if lent memory counted
	if ev := placed(e); len(ev) != 0 {
		t.Fatalf("events %v, want nothing: no eviction makes 15000 MiB", ev)
	}
	if r, _ := e.Running("owner"); r.Decision.Grant.Shares[0].MemMiB != 30000-13040 || !e.Borrower("borrower") {
		t.Fatalf("the books changed: owner %+v", r.Decision.Grant.Shares)
	}
}

// TestAdoptBorrowerLendsAgain: a rebuilt engine reads the owner and then the
// borrower back; the borrower's record names the owner, which lends again what the
// GPU lacks (its current floor does not limit what was lent). A record naming no
// owner, or only owners the borrower outranks, is refused with nothing changed.
func TestAdoptBorrowerLendsAgain(t *testing.T) {
	e := newEngine(t, baseConfig(), gpuNode("n0", 1))
	owner := memPod("owner", priority.P1, 400, 30000, 0)
	d := func(mem int32, milli int32) placement.Decision {
		return placement.Decision{Node: 0, NodeName: "n0", Grant: partition.Grant{CPU: 1000, MemMiB: 1024,
			Shares: []partition.Share{{GPU: 0, Milli: milli, MemMiB: mem}}}}
	}
	if err := e.Adopt(owner, d(30000, 400), at(0)); err != nil {
		t.Fatal(err)
	}
	b := memPod("borrower", priority.P2, 300, 20000, 1)
	if err := e.AdoptBorrower(b, d(20000, 300), at(1), nil); err == nil {
		t.Fatal("adopted a borrower whose record names no owner")
	}
	if err := e.AdoptBorrower(memPod("borrower", priority.P0, 300, 20000, 1), d(20000, 300), at(1), []string{"owner"}); err == nil {
		t.Fatal("adopted a borrower that outranks its owner")
	}
	if free := freeMem(e); free != 40960-30000 || e.Borrower("borrower") {
		t.Fatalf("a refused adoption changed the books: free %d", free)
	}
	if err := e.SetReclaimable("owner", 25000); err != nil { // grew since: floor above what it lent
		t.Fatal(err)
	}
	if err := e.AdoptBorrower(b, d(20000, 300), at(1), []string{"owner"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.Running("owner"); r.Decision.Grant.Shares[0].MemMiB != 30000-9040 || !b.Preemptible || !e.Borrower("borrower") {
		t.Fatalf("owner %+v, borrower preemptible %v", r.Decision.Grant.Shares, b.Preemptible)
	}
	if len(e.Events()) != 0 {
		t.Error("adoption emitted events")
	}
	if who, ok := e.ReclaimFor("owner", at(2)); !ok || who != "borrower" {
		t.Fatalf("reclaim after adoption: %q %v", who, ok)
	}
}
