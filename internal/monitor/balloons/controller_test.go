package balloons

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	apiv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/balloon"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/monitor/metrics"
	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/internal/region/regiontest"
	"github.com/tessera-gpu/tessera/internal/statedir"
)

const (
	GiB  = 1 << 30
	gpuA = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
)

// fakeNode is a state directory with containers on one 40 GiB GPU, their pods and
// a fake API server side.
type fakeNode struct {
	t    *testing.T
	dir  string
	mu   sync.Mutex
	pods map[string]PodInfo // key → pod
	// fresh is what the API server says now where it differs from pods (what a
	// cache still answers): Confirm reads it.
	fresh   map[string]PodInfo
	evicted []string
	state   []apiv1.NodeBalloons
	clock   time.Time
	mono    uint64
}

func newFakeNode(t *testing.T) *fakeNode {
	return &fakeNode{t: t, dir: t.TempDir(), pods: map[string]PodInfo{}, clock: time.Unix(1_000_000, 0), mono: 1e12}
}

// add makes a memory allocation "mem-<name>" with a cap on gpuA and usage.
func (n *fakeNode) add(name string, capBytes, usage uint64, info PodInfo) {
	n.t.Helper()
	d := filepath.Join(statedir.Containers(n.dir), "mem-"+name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := region.WriteLimits(filepath.Join(d, statedir.LimitsFile), []region.DeviceLimit{{UUID: gpuA, MemLimitBytes: capBytes}}); err != nil {
		n.t.Fatal(err)
	}
	if err := region.CreateRegion(filepath.Join(d, statedir.RegionFile)); err != nil {
		n.t.Fatal(err)
	}
	n.pods["mem-"+name] = info
	n.use(name, usage)
}

func (n *fakeNode) path(name, file string) string {
	return filepath.Join(statedir.Containers(n.dir), "mem-"+name, file)
}

func (n *fakeNode) use(name string, usage uint64) {
	n.t.Helper()
	c := regiontest.Contents{Slots: []regiontest.Slot{{PID: 4242, StartTime: 1, UsedBytes: map[int]uint64{0: usage}}}}
	if err := regiontest.Write(n.path(name, statedir.RegionFile), c); err != nil {
		n.t.Fatal(err)
	}
}

func (n *fakeNode) remove(name string) {
	os.RemoveAll(filepath.Dir(n.path(name, statedir.RegionFile)))
	delete(n.pods, "mem-"+name)
}

func (n *fakeNode) limits(name string) (uint64, region.Balloon) {
	n.t.Helper()
	l, err := region.OpenLimits(n.path(name, statedir.LimitsFile))
	if err != nil {
		n.t.Fatal(err)
	}
	defer l.Close()
	b, _ := l.Balloon(gpuA)
	return l.Devices()[0].MemLimitBytes, b
}

func (n *fakeNode) Info(_ context.Context, o identity.Owner) (PodInfo, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.pods[o.Pod]
	if !ok {
		return PodInfo{}, errors.New("no such pod")
	}
	return p, nil
}

func (n *fakeNode) Confirm(ctx context.Context, o identity.Owner) (PodInfo, error) {
	n.mu.Lock()
	p, ok := n.fresh[o.Pod]
	n.mu.Unlock()
	if ok {
		return p, nil
	}
	return n.Info(ctx, o)
}

func (n *fakeNode) Evict(_ context.Context, o identity.Owner) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.evicted = append(n.evicted, o.Pod)
	return nil
}

func (n *fakeNode) Publish(_ context.Context, s apiv1.NodeBalloons) error {
	n.state = append(n.state, s)
	return nil
}

// controller is a fresh agent's controller (a restart is a new one).
func (n *fakeNode) controller(m *metrics.Balloon) *Controller {
	p := balloon.DefaultPolicy()
	p.WaitMS = 2000
	return &Controller{
		StateDir: n.dir, Policy: p, Pods: n, Evictor: n, Publisher: n, Metrics: m,
		Owner: func(key string) (identity.Owner, bool) {
			_, ok := n.pods[key]
			return identity.Owner{Namespace: "ns", Pod: key, Container: "main"}, ok
		},
		Physical:  func(uuid string) (uint64, bool) { return 40 * GiB, uuid == gpuA },
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:       func() time.Time { return n.clock },
		Monotonic: func() uint64 { return n.mono },
	}
}

func (n *fakeNode) step(c *Controller, advance time.Duration) {
	n.t.Helper()
	n.clock = n.clock.Add(advance)
	n.mono += uint64(advance)
	if err := c.Step(context.Background()); err != nil {
		n.t.Fatal(err)
	}
}

// TestInflateLendReclaimDeflate walks one owner through the whole cycle: not
// inflated before it settles, published as reclaimable once settled, inflated to
// its floor when a borrower makes the GPU over-promised, deflated from free memory
// when the borrower ends; inflated again, then on an owner wait the borrower is
// evicted and the owner raised once the borrower's memory is gone.
func TestInflateLendReclaimDeflate(t *testing.T) {
	n := newFakeNode(t)
	m := metrics.NewBalloon(nil, "n")
	c := n.controller(m)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.add("plain", 10*GiB, 9*GiB, PodInfo{Priority: 0}) // did not opt in
	n.step(c, 0)
	n.step(c, 5*time.Minute)
	if got := testutil.ToFloat64(m.Reclaimable.WithLabelValues(gpuA)); got != 0 {
		t.Fatalf("reclaimable %v before the owner settled", got)
	}
	n.step(c, 6*time.Minute)
	// Floor: peak 12 + 10 % of 30 = 15 GiB; 15 reclaimable.
	if got := testutil.ToFloat64(m.Reclaimable.WithLabelValues(gpuA)); got != 15*GiB {
		t.Fatalf("reclaimable %v GiB once settled, want 15", got/GiB)
	}
	if last := n.state[len(n.state)-1]; last.GPUs[0].ReclaimableMiB != 15*1024 || last.GPUs[0].Owners != 1 {
		t.Fatalf("published %+v", last)
	}
	// The scheduler is told who lends and down to what (the plain container is no lender).
	wantLender := apiv1.Lender{Owner: "ns/mem-owner/main", CeilingMiB: 30 * 1024, FloorMiB: 15 * 1024}
	if l := n.state[len(n.state)-1].GPUs[0].Lenders; len(l) != 1 || l[0] != wantLender {
		t.Fatalf("lenders %+v, want %+v", l, wantLender)
	}
	if capB, _ := n.limits("owner"); capB != 30*GiB {
		t.Fatalf("owner inflated with nobody to lend to: cap %d", capB)
	}

	n.add("borrower", 10*GiB, 0, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	capB, b := n.limits("owner") // the GPU is over by 10 GiB: lowered by that, not to the floor
	if capB != 20*GiB || b.CeilingBytes != 30*GiB || b.FloorBytes != 15*GiB || b.WaitMS != 2000 {
		t.Fatalf("after the borrower arrived: owner cap %d GiB, balloon %+v", capB/GiB, b)
	}
	if capP, bp := n.limits("plain"); capP != 10*GiB || bp.Inflated() {
		t.Fatalf("a container that did not opt in was lowered: %d %+v", capP, bp)
	}
	if got := testutil.ToFloat64(m.Inflations); got != 1 {
		t.Fatalf("inflations %v", got)
	}

	n.remove("borrower")
	n.step(c, time.Second)
	if capB, b := n.limits("owner"); capB != 30*GiB || b.Inflated() {
		t.Fatalf("borrower gone, owner not deflated: cap %d GiB %+v", capB/GiB, b)
	}

	// Again, and this time the owner needs its memory while the borrower is there.
	n.add("borrower2", 10*GiB, 9*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 20*GiB {
		t.Fatalf("not inflated again: %d GiB", capB/GiB)
	}
	if l := n.state[len(n.state)-1].GPUs[0].Lenders; len(l) != 1 || l[0].LentMiB != 10*1024 || l[0].WantsBackMiB != 0 {
		t.Fatalf("lenders while lent %+v", l)
	}
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 20*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(c, 100*time.Millisecond)
	if len(n.evicted) != 1 || n.evicted[0] != "mem-borrower2" {
		t.Fatalf("evicted %v, want the borrower", n.evicted)
	}
	// The scheduler learns that the owner wants back what is still lent (the
	// borrower's unused sliver was taken first; the scheduler evicts it too).
	if l := n.state[len(n.state)-1].GPUs[0].Lenders; len(l) != 1 || l[0].WantsBackMiB != l[0].LentMiB || l[0].LentMiB < 9*1024 || l[0].FloorMiB != 15*1024 {
		t.Fatalf("lenders while the owner waits %+v", l)
	}
	n.step(c, 100*time.Millisecond)
	if len(n.evicted) != 1 {
		t.Fatalf("the borrower was asked to leave twice: %v", n.evicted)
	}
	n.remove("borrower2") // its grace period passed, kubelet removed it
	n.step(c, 100*time.Millisecond)
	if capB, b := n.limits("owner"); capB != 30*GiB || b.Inflated() {
		t.Fatalf("owner not raised after the eviction: cap %d GiB %+v", capB/GiB, b)
	}
	if got := testutil.ToFloat64(m.Evictions); got != 1 {
		t.Fatalf("evictions %v", got)
	}
}

// TestBorrowerThatFreedMemoryIsShrunkNotEvicted: a borrower using less than its cap
// gives the difference back to a waiting owner without being evicted.
func TestBorrowerThatFreedMemoryIsShrunkNotEvicted(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 24*GiB, 2*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 16*GiB {
		t.Fatalf("owner cap %d GiB, want 16 (the GPU is over by 14)", capB/GiB)
	}
	n.use("owner", 15*GiB) // within half a margin of the lowered cap: reclaim now
	n.step(c, time.Second)
	if len(n.evicted) != 0 {
		t.Fatalf("evicted %v although the borrower uses 2 of its 24 GiB", n.evicted)
	}
	capB, _ := n.limits("owner")
	capBorrower, _ := n.limits("borrower")
	if capB != 30*GiB || capBorrower+capB > 40*GiB || capBorrower < 2*GiB {
		t.Fatalf("owner %d GiB, borrower %d: want the owner back at 30 and the GPU within 40", capB/GiB, capBorrower/GiB)
	}
}

// TestNeverLendsAboveTheOwnersRank: a borrower that outranks the only owner gets
// nothing from it.
func TestNeverLendsAboveTheOwnersRank(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 10})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 20*GiB, 0, PodInfo{Borrower: true, Priority: 1000})
	n.step(c, time.Second)
	if capB, b := n.limits("owner"); capB != 30*GiB || b.Inflated() {
		t.Fatalf("owner lowered for a borrower that outranks it: %d %+v", capB, b)
	}
}

// TestStateSurvivesAgentRestart: a new controller (empty memory) finds the lowered
// cap in the limits file, still deflates when the borrower leaves, and reclaims for
// a waiting owner; an orphaned wait request (its waiter was killed) is cleared.
func TestStateSurvivesAgentRestart(t *testing.T) {
	n := newFakeNode(t)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	c := n.controller(nil)
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated: %d", capB/GiB)
	}
	c.Close() // the old agent died: the kernel released its lock
	restarted := n.controller(nil)
	n.step(restarted, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("a restarted agent changed the owner's cap to %d GiB with nothing to do", capB/GiB)
	}
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 20*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(restarted, 10*time.Millisecond)
	if len(n.evicted) != 1 {
		t.Fatalf("restarted agent did not reclaim for the waiting owner: %v", n.evicted)
	}
	// The waiter dies; the request outlives every wait bound and is cleared.
	n.step(restarted, 5*time.Second)
	r, err := region.OpenRegion(n.path("owner", statedir.RegionFile))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if w := r.BalloonWait(0); w.Waiting() {
		t.Fatalf("stale request kept: %+v", w)
	}
}

// TestUnknownContainerStillCountsOnTheGPU: a container the agent cannot attribute yet
// keeps its cap in what the GPU is promised, so an owner is not raised into it.
func TestUnknownContainerStillCountsOnTheGPU(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 15*GiB, 1*GiB, PodInfo{Borrower: true})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated: %d", capB/GiB)
	}
	delete(n.pods, "mem-borrower") // its pod cannot be named this pass
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("owner raised to %d GiB into memory an unattributed container holds", capB/GiB)
	}
	if capB, _ := n.limits("borrower"); capB != 15*GiB || len(n.evicted) != 0 {
		t.Fatalf("an unattributed container was shrunk (%d GiB) or evicted (%v)", capB/GiB, n.evicted)
	}
}

// TestOptOutWhileInflatedGivesTheCapBack: an owner whose pod no longer opts in
// (annotation removed) must not stay lowered while its borrower runs: the agent
// reclaims for it as for a waiting owner.
func TestOptOutWhileInflatedGivesTheCapBack(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated: %d GiB", capB/GiB)
	}
	n.pods["mem-owner"] = PodInfo{Priority: 100} // tessera.io/balloon removed
	n.step(c, time.Second)
	if len(n.evicted) != 1 || n.evicted[0] != "mem-borrower" {
		t.Fatalf("evicted %v: an owner that opted out stays lowered for its borrower", n.evicted)
	}
	n.remove("borrower")
	n.step(c, time.Second)
	if capB, b := n.limits("owner"); capB != 30*GiB || b.Inflated() {
		t.Fatalf("opted-out owner not raised back: cap %d GiB %+v", capB/GiB, b)
	}
	// Not lowered again for the next borrower.
	n.add("borrower2", 15*GiB, 0, PodInfo{Borrower: true, Priority: 10})
	n.step(c, 11*time.Minute)
	if capB, _ := n.limits("owner"); capB != 30*GiB {
		t.Fatalf("opted-out owner lowered to %d GiB", capB/GiB)
	}
}

// TestInflationConfirmsTheOptInFresh: the pod cache may still say "opted in" for a
// minute after the annotation was removed; the cap is lowered only on the API
// server's current answer.
func TestInflationConfirmsTheOptInFresh(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.fresh = map[string]PodInfo{"mem-owner": {Priority: 100}} // opted out; the cache lags
	n.add("borrower", 15*GiB, 0, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, b := n.limits("owner"); capB != 30*GiB || b.Inflated() {
		t.Fatalf("lowered on a stale opt-in: cap %d GiB %+v", capB/GiB, b)
	}
	n.fresh = nil
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated once the opt-in is confirmed: %d GiB", capB/GiB)
	}
}

// TestUnattributedContainerHoldsInflationBack: a container the agent cannot name yet
// may be a borrower that outranks the owner; no owner is lowered for it until its
// pod is known.
func TestUnattributedContainerHoldsInflationBack(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 10})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("newcomer", 15*GiB, 0, PodInfo{Borrower: true, Priority: 1000})
	delete(n.pods, "mem-newcomer") // PodResources does not name it yet
	n.step(c, time.Second)
	if capB, b := n.limits("owner"); capB != 30*GiB || b.Inflated() {
		t.Fatalf("owner lowered to %d GiB for a container of unknown rank", capB/GiB)
	}
	n.pods["mem-newcomer"] = PodInfo{Borrower: true, Priority: 1000}
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 30*GiB {
		t.Fatalf("owner lowered to %d GiB for a borrower that outranks it", capB/GiB)
	}
	// A finished container's directory nobody names for minutes (it awaits the
	// plugin's collection) does not hold inflation back for good.
	n.remove("newcomer")
	n.add("leftover", 2*GiB, 0, PodInfo{})
	delete(n.pods, "mem-leftover")
	n.add("borrower", 10*GiB, 0, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 30*GiB {
		t.Fatalf("owner lowered to %d GiB while an unnamed container was new", capB/GiB)
	}
	n.step(c, 2*time.Minute)
	if capB, _ := n.limits("owner"); capB != 28*GiB {
		t.Fatalf("owner at %d GiB: an old unnamed directory held inflation back", capB/GiB)
	}
}

// TestLiveWaiterBehindAKilledOneIsServed: a waiter killed mid-wait leaves its old
// wait_since_ns; a live waiter that started after it keeps polling. The request is
// not orphaned (the latest poll is fresh): it must be served, not cleared.
func TestLiveWaiterBehindAKilledOneIsServed(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated: %d GiB", capB/GiB)
	}
	n.mono += uint64(30 * time.Second)
	path := n.path("owner", statedir.RegionFile)
	if err := regiontest.WriteBalloonWait(path, 0, 26*GiB, 2, n.mono-uint64(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := regiontest.WriteBalloonPoll(path, 0, n.mono-uint64(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n.step(c, 10*time.Millisecond)
	if len(n.evicted) != 1 || n.evicted[0] != "mem-borrower" {
		t.Fatalf("evicted %v: the live waiter's request was taken for orphaned", n.evicted)
	}
	// Its poll stops (it was killed too): now the request is orphaned and goes.
	n.step(c, 3*time.Second)
	r, err := region.OpenRegion(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if w := r.BalloonWait(0); w.Waiting() {
		t.Fatalf("orphaned request kept: %+v", w)
	}
}

// TestBalloonWordsAboveTheCeilingAreDropped: a limits file whose cap is above its
// ceiling (the plugin rewrote the cap for a new container in a directory whose
// words an earlier one left, or a corrupt file) is no lowered cap: nothing is
// reclaimed for it (ceiling - cap would wrap to 16 EiB and evict every borrower),
// nothing is published as lent, and the stale words are cleared.
func TestBalloonWordsAboveTheCeilingAreDropped(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("plain", 20*GiB, 5*GiB, PodInfo{Priority: 100})
	l, err := region.OpenLimits(n.path("plain", statedir.LimitsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBalloonCap(gpuA, 8*GiB, region.Balloon{CeilingBytes: 10 * GiB, FloorBytes: 8 * GiB}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetMemLimit(gpuA, 20*GiB); err != nil {
		t.Fatal(err)
	}
	l.Close()
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if len(n.evicted) != 0 {
		t.Fatalf("evicted %v for a cap above its ceiling", n.evicted)
	}
	if last := n.state[len(n.state)-1]; last.GPUs[0].LentMiB != 0 {
		t.Fatalf("published %d MiB lent", last.GPUs[0].LentMiB)
	}
	if capB, b := n.limits("plain"); capB != 20*GiB || b.Inflated() {
		t.Fatalf("after the pass: cap %d GiB, words %+v", capB/GiB, b)
	}
}

// TestGaugesOfAnEmptiedGPUGo: when the last container on a GPU goes, its
// reclaimable and lent series go too (a stale "10 GiB lent" would stay forever).
func TestGaugesOfAnEmptiedGPUGo(t *testing.T) {
	n := newFakeNode(t)
	m := metrics.NewBalloon(nil, "n")
	c := n.controller(m)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if got := testutil.ToFloat64(m.Lent.WithLabelValues(gpuA)); got != 5*GiB {
		t.Fatalf("lent %v GiB, want 5", got/GiB)
	}
	n.remove("owner")
	n.remove("borrower")
	n.step(c, time.Second)
	if k, l := testutil.CollectAndCount(m.Reclaimable), testutil.CollectAndCount(m.Lent); k != 0 || l != 0 {
		t.Fatalf("series of an empty GPU kept: reclaimable %d, lent %d", k, l)
	}
}

// TestBorrowerIsOnlyABorrowerWhereItBorrowed: a pod that borrowed on another GPU
// holds a plain allocation here; it is neither shrunk nor evicted for an owner on
// this GPU, the borrower that took the owner's memory is.
func TestBorrowerIsOnlyABorrowerWhereItBorrowed(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	elsewhere := &apiv1.Borrowed{Version: apiv1.Version, GPUs: []apiv1.BorrowedGPU{{UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", MemoryMiB: 1024}}}
	n.add("multi", 5*GiB, 1*GiB, PodInfo{Borrower: true, Loans: elsewhere, Priority: 0})
	n.add("borrower", 10*GiB, 9*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated: %d GiB", capB/GiB)
	}
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 27*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(c, 10*time.Millisecond)
	if capM, _ := n.limits("multi"); capM != 5*GiB {
		t.Fatalf("a plain allocation of a pod that borrowed elsewhere was shrunk to %d MiB", capM>>20)
	}
	if len(n.evicted) != 1 || n.evicted[0] != "mem-borrower" {
		t.Fatalf("evicted %v, want the borrower of this GPU", n.evicted)
	}
}

// TestOneControllerPerNode: during a DaemonSet update the old and the new agent run
// side by side for a while. Only one acts on the node's caps and evictions (the
// other has its own memory of whom it asked to leave and would ask again, or, told
// no by a PodDisruptionBudget, evict the next borrower); the other takes over once
// the first is gone.
func TestOneControllerPerNode(t *testing.T) {
	n := newFakeNode(t)
	old, surge := n.controller(nil), n.controller(nil)
	defer surge.Close()
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(old, 0)
	n.step(old, 11*time.Minute)
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(old, time.Second)
	if capB, _ := n.limits("owner"); capB != 25*GiB {
		t.Fatalf("not inflated: %d GiB", capB/GiB)
	}
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 27*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(old, 10*time.Millisecond)
	n.step(surge, 10*time.Millisecond)
	if len(n.evicted) != 1 {
		t.Fatalf("evictions %v: both agents acted", n.evicted)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	n.remove("borrower")
	n.step(surge, 10*time.Millisecond)
	if capB, _ := n.limits("owner"); capB != 30*GiB {
		t.Fatalf("the remaining agent did not take over: owner at %d GiB", capB/GiB)
	}
}

// TestMemoryOfEvictionsAndPodsIsBounded: the controller's record of whom it asked
// to leave, and the pod cache, forget entries past their use (an agent runs for
// months while thousands of pods come and go).
func TestMemoryOfEvictionsAndPodsIsBounded(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	n.add("borrower", 15*GiB, 14*GiB, PodInfo{Borrower: true, Priority: 10})
	n.step(c, time.Second)
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 27*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(c, 10*time.Millisecond)
	if len(c.evicted) != 1 {
		t.Fatalf("evicted record %v", c.evicted)
	}
	n.remove("borrower")
	n.step(c, time.Minute)
	if len(c.evicted) != 0 {
		t.Fatalf("evicted record kept past the retry time: %v", c.evicted)
	}

	f := &fakeAPI{pods: map[string]*corev1.Pod{}}
	pods := &KubePods{API: f, TTL: time.Minute}
	for i := range 3 * pruneEvery {
		name := fmt.Sprintf("p%d", i)
		f.pods["ns/"+name] = &corev1.Pod{}
		if _, err := pods.Info(context.Background(), identity.Owner{Namespace: "ns", Pod: name}); err != nil {
			t.Fatal(err)
		}
		if i%pruneEvery == 0 {
			pods.age(2 * time.Minute) // the earlier pods' entries expire
		}
	}
	if len(pods.cache) > 2*pruneEvery {
		t.Fatalf("pod cache holds %d entries", len(pods.cache))
	}
}

// TestYoungestBorrowerGoesFirstAfterARestart: among borrowers of one priority the
// youngest is evicted (least work lost). A restarted agent has watched them all for
// the same time; it must go by when the pods started, not by their names.
func TestYoungestBorrowerGoesFirstAfterARestart(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	started := n.clock
	n.add("a-old", 7*GiB, 7*GiB-100<<20, PodInfo{Borrower: true, Priority: 10, Started: started.Add(-time.Hour)})
	n.add("b-young", 7*GiB, 7*GiB-100<<20, PodInfo{Borrower: true, Priority: 10, Started: started})
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 26*GiB {
		t.Fatalf("not inflated: %d GiB", capB/GiB)
	}
	c.Close()
	restarted := n.controller(nil)
	defer restarted.Close()
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 29*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(restarted, 10*time.Millisecond)
	if len(n.evicted) != 1 || n.evicted[0] != "mem-b-young" {
		t.Fatalf("evicted %v, want the youngest borrower only", n.evicted)
	}
}

// TestOwnerWaitHistogramCountsEachWait: the waits the hook counted per lane since
// the last pass go into tessera_balloon_owner_wait_seconds as they are (each wait
// in its own bucket, not a mean), with their total time as the sum; expired ones
// are also owner OOMs. The first reading of a region is the baseline, and a lane
// that wrapped between passes counts what it went through.
func TestOwnerWaitHistogramCountsEachWait(t *testing.T) {
	n := newFakeNode(t)
	reg := prometheus.NewPedanticRegistry()
	m := metrics.NewBalloon(reg, "n")
	c := n.controller(m)
	n.add("owner", 30*GiB, 12*GiB, PodInfo{OptedIn: true, Priority: 100})
	path := n.path("owner", statedir.RegionFile)
	if err := regiontest.WriteBalloonEnded(path, 0, [region.BalloonWaitLanes]uint16{0: 65534, 7: 9}, 10, 9, 50e9); err != nil {
		t.Fatal(err)
	}
	n.step(c, 0) // baseline: waits before this agent are not its to count
	if got := m.OwnerWait.Count(); got != 0 {
		t.Fatalf("%d waits counted from the baseline", got)
	}
	// Since: 3 waits of ≤ 1 ms (the lane wrapped), one of 30 ms, one of 300 ms
	// admitted; one expired past 2.5 s. 4.2 s in all.
	if err := regiontest.WriteBalloonEnded(path, 0, [region.BalloonWaitLanes]uint16{0: 1, 2: 1, 4: 1, 7: 10}, 15, 10, 54.2e9); err != nil {
		t.Fatal(err)
	}
	n.step(c, 200*time.Millisecond)
	want := `
# HELP tessera_balloon_owner_wait_seconds How long owner allocations waited in the hook for reclaimed memory, per wait (the hook's histogram lanes; buckets are its lane bounds).
# TYPE tessera_balloon_owner_wait_seconds histogram
tessera_balloon_owner_wait_seconds_bucket{node="n",le="0.001"} 3
tessera_balloon_owner_wait_seconds_bucket{node="n",le="0.01"} 3
tessera_balloon_owner_wait_seconds_bucket{node="n",le="0.05"} 4
tessera_balloon_owner_wait_seconds_bucket{node="n",le="0.2"} 4
tessera_balloon_owner_wait_seconds_bucket{node="n",le="0.5"} 5
tessera_balloon_owner_wait_seconds_bucket{node="n",le="1"} 5
tessera_balloon_owner_wait_seconds_bucket{node="n",le="2.5"} 5
tessera_balloon_owner_wait_seconds_bucket{node="n",le="+Inf"} 6
tessera_balloon_owner_wait_seconds_sum{node="n"} 4.2
tessera_balloon_owner_wait_seconds_count{node="n"} 6
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tessera_balloon_owner_wait_seconds"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.OwnerOOMs); got != 1 {
		t.Fatalf("owner OOMs %v, want 1", got)
	}
}

// TestReclaimOrderIsPriorityThenYoungest: an owner that needs back what five
// borrowers of three priorities hold gets it by evicting them lowest priority
// first and, within a priority, youngest first; the highest-priority borrower,
// not needed, stays. Their names sort in neither order.
func TestReclaimOrderIsPriorityThenYoungest(t *testing.T) {
	n := newFakeNode(t)
	c := n.controller(nil)
	defer c.Close()
	n.add("owner", 34*GiB, 4*GiB, PodInfo{OptedIn: true, Priority: 100})
	n.step(c, 0)
	n.step(c, 11*time.Minute)
	now := n.clock
	// Each uses all but 100 MiB of its 5 GiB: shrinking frees next to nothing.
	for _, b := range []struct {
		name     string
		priority int32
		age      time.Duration
	}{
		{"a-high", 50, 2 * time.Hour},
		{"b-low-old", 5, 2 * time.Hour},
		{"c-mid-old", 20, time.Hour},
		{"d-low-young", 5, 10 * time.Minute},
		{"e-mid-young", 20, 5 * time.Minute},
	} {
		n.add(b.name, 5*GiB, 5*GiB-100<<20, PodInfo{Borrower: true, Priority: b.priority, Started: now.Add(-b.age)})
	}
	n.step(c, time.Second)
	if capB, _ := n.limits("owner"); capB != 15*GiB {
		t.Fatalf("owner at %d GiB, want 15 (34 + 25 on a 40 GiB GPU)", capB/GiB)
	}
	if err := regiontest.WriteBalloonWait(n.path("owner", statedir.RegionFile), 0, 33*GiB, 1, n.mono); err != nil {
		t.Fatal(err)
	}
	n.step(c, 10*time.Millisecond)
	want := []string{"mem-d-low-young", "mem-b-low-old", "mem-e-mid-young", "mem-c-mid-old"}
	if strings.Join(n.evicted, " ") != strings.Join(want, " ") {
		t.Fatalf("evicted %v, want %v (the P50 borrower is not needed)", n.evicted, want)
	}
}
