package kubesched

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/bind"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// Memory balloons on the scheduler's side (docs/balloon.md). vgpu-monitor
// publishes, per GPU, the opted-in owners that lend or could lend
// (tessera.io/node-balloons: floor, lent, wanted back). The loop gives the
// engine each owner's floor (SetReclaimable); a pod that fits nowhere is then
// placed on reclaimable memory before anyone is preempted, and carries
// tessera.io/borrowed in its Binding. When an owner wants its memory back the
// engine names the borrower (ReclaimFor) and the loop evicts it through the same
// Eviction API path as a preemption victim, with Events on both pods. The node
// agent evicts it too; whichever comes first, the other finds it gone.

// reclaimReason is the engine's reason on a borrower's Preempted event.
const reclaimReason = "balloon reclaim"

// reclaimRetry is how long a refused reclaim eviction waits before it is asked
// again (the owner's need does not go away).
const reclaimRetry = 5 * time.Second

// readBalloons parses a node's tessera.io/node-balloons; nil when absent or
// unusable (reported once per distinct value: nothing is lent on that node).
func (s *Scheduler) readBalloons(n *corev1.Node, e *nodeEntry, previous string) {
	raw, ok := n.Annotations[annv1.NodeBalloonsKey]
	e.balloonsRaw, e.balloons = raw, nil
	if !ok {
		return
	}
	b, err := annv1.ParseNodeBalloons(raw)
	if err != nil {
		if raw != previous {
			s.log.Warn("node balloons unusable; nothing is lent on this node", "node", n.Name, "err", err)
			s.recorder.Event(n, corev1.EventTypeWarning, "TesseraBalloonsInvalid", err.Error()+"; tessera lends no memory on this node until it is fixed")
		}
		return
	}
	e.balloons = b
}

// lenderView is what the nodes say about one owner pod.
type lenderView struct {
	node     string
	floor    uint64          // the highest floor among its GPUs
	gpus     map[string]bool // GPUs it is named on
	wantBack bool
}

// lenders gathers, per owner pod, what the nodes' annotations say.
func (s *Scheduler) lenders() map[string]*lenderView {
	out := map[string]*lenderView{}
	for _, n := range s.nodeState {
		if n.balloons == nil || n.index < 0 {
			continue
		}
		for _, g := range n.balloons.GPUs {
			for _, l := range g.Lenders {
				v := out[l.Pod()]
				if v == nil {
					v = &lenderView{node: n.name, gpus: map[string]bool{}}
					out[l.Pod()] = v
				}
				if v.node != n.name {
					v.wantBack = true // named on two nodes: trust neither, lend nothing
				}
				v.gpus[g.UUID] = true
				v.floor = max(v.floor, l.FloorMiB)
				v.wantBack = v.wantBack || l.WantsBackMiB > 0
			}
		}
	}
	return out
}

// setFloors gives the engine every owner's floor: a pod that opted in, runs
// where the node names it, on every GPU it holds (one floor applies to all its
// shares), and does not want memory back. Floors no node names any more are
// withdrawn.
func (s *Scheduler) setFloors(views map[string]*lenderView) {
	want := map[string]int32{}
	for pod, v := range views {
		if f, ok := s.floorOf(pod, v); ok {
			want[pod] = f
		}
	}
	changed := false
	for pod := range s.floors {
		if _, ok := want[pod]; !ok {
			_ = s.eng.SetReclaimable(pod, 0)
			changed = true
		}
	}
	for pod, f := range want {
		if err := s.eng.SetReclaimable(pod, f); err != nil {
			delete(want, pod)
			continue
		}
		if old, ok := s.floors[pod]; !ok || f < old {
			changed = true // more to lend: pods that found no room may now
		}
	}
	s.floors = want
	if changed {
		s.eng.ClusterChanged()
	}
}

func (s *Scheduler) floorOf(pod string, v *lenderView) (int32, bool) {
	if v.wantBack || v.floor == 0 || v.floor > 1<<30 {
		return 0, false
	}
	e := s.podState[pod]
	r, running := s.eng.Running(pod)
	p := s.podFor(pod)
	if e == nil || !running || p == nil || p.UID != e.uid || !annv1.OptedIn(p.Annotations) || s.eng.Borrower(pod) {
		return 0, false
	}
	n := s.nodeState[r.Decision.NodeName]
	if n == nil || n.name != v.node || len(r.Decision.Grant.Shares) == 0 {
		return 0, false
	}
	for _, sh := range r.Decision.Grant.Shares {
		if !v.gpus[n.inv.UUIDs[sh.GPU]] {
			return 0, false
		}
	}
	return int32(v.floor), true
}

// syncBalloons applies the nodes' balloon state when nodes or pods changed: the
// floors, then a reclaim for every owner that wants its memory back.
func (s *Scheduler) syncBalloons(now time.Time) {
	if !s.balloonsDirty {
		return
	}
	s.balloonsDirty = false
	views := s.lenders()
	s.setFloors(views)
	owners := make([]string, 0, len(views))
	for pod, v := range views {
		if v.wantBack {
			owners = append(owners, pod)
		}
	}
	for _, owner := range s.eng.LentOwners() {
		if views[owner] == nil {
			owners = append(owners, owner) // its node no longer names it a lender
		}
	}
	slices.Sort(owners)
	for _, owner := range owners {
		if b, ok := s.eng.ReclaimFor(owner, now); ok {
			s.metrics.BalloonReclaims.Inc()
			s.log.Info("balloon reclaim: the owner wants its memory back", "owner", owner, "borrower", b)
		}
	}
}

// reclaim carries out a borrower's eviction for its owner (the engine already
// gave the owner its memory back).
func (s *Scheduler) reclaim(ctx context.Context, e *podEntry, owner string) {
	e.phase, e.preemptor, e.reclaimFor = evicting, owner, owner
	node := ""
	if p := s.podFor(e.key); p != nil {
		node = p.Spec.NodeName
	}
	s.event(e, corev1.EventTypeNormal, "BalloonReclaim", fmt.Sprintf("evicting: owner %s needs back the GPU memory this pod borrowed on node %s", owner, node))
	s.event(s.podState[owner], corev1.EventTypeNormal, "BalloonReclaim", fmt.Sprintf("borrower %s is evicted to give this pod its GPU memory back", e.key))
	s.submitReclaim(ctx, e)
}

func (s *Scheduler) submitReclaim(ctx context.Context, e *podEntry) {
	ns, name := splitRef(e.key)
	s.pool.Submit(ctx, &bind.Job{Kind: bind.Evict, For: e.reclaimFor, Reclaim: true, Victims: []bind.Victim{{Namespace: ns, Name: name, UID: e.uid}}})
}

// reclaimBlocked: the API server refused a reclaim eviction (a
// PodDisruptionBudget). The owner still needs its memory: ask again later.
func (s *Scheduler) reclaimBlocked(v *podEntry, err error) {
	v.retryAt = s.now().Add(reclaimRetry)
	s.reclaims[v.key] = v
	s.event(v, corev1.EventTypeWarning, "BalloonReclaimBlocked", fmt.Sprintf("eviction for owner %s refused (%v); asked again in %v", v.reclaimFor, err, reclaimRetry))
}

// retryReclaims asks again for refused reclaim evictions that are due.
func (s *Scheduler) retryReclaims(ctx context.Context) {
	now := s.now()
	for key, v := range s.reclaims {
		if s.podState[key] != v || v.phase != evicting {
			delete(s.reclaims, key)
			continue
		}
		if !now.Before(v.retryAt) {
			delete(s.reclaims, key)
			s.submitReclaim(ctx, v)
		}
	}
}

// borrowedRecord is the tessera.io/borrowed value for a borrower's loans: per GPU,
// the memory lent to it and the owners' containers ("" when it borrowed nothing).
func (s *Scheduler) borrowedRecord(loans []engine.Loan, inv *translate.Inventory) (string, error) {
	type gpu struct {
		mib  uint64
		from []string
	}
	per := map[int]*gpu{}
	for _, l := range loans {
		owner := l.Owner + "/"
		if o := s.podState[l.Owner]; o != nil {
			owner += lendingContainer(o.shape)
		}
		for i, sh := range l.Original.Grant.Shares {
			lent := sh.MemMiB - l.Lent.Grant.Shares[i].MemMiB
			if lent <= 0 {
				continue
			}
			g := per[sh.GPU]
			if g == nil {
				g = &gpu{}
				per[sh.GPU] = g
			}
			g.mib += uint64(lent)
			g.from = append(g.from, owner)
		}
	}
	if len(per) == 0 {
		return "", nil
	}
	rec := annv1.Borrowed{Version: annv1.Version}
	for i, g := range per {
		if i < 0 || i >= len(inv.UUIDs) {
			return "", fmt.Errorf("node %s has no GPU %d", inv.Spec.Name, i)
		}
		slices.Sort(g.from)
		rec.GPUs = append(rec.GPUs, annv1.BorrowedGPU{UUID: inv.UUIDs[i], MemoryMiB: g.mib, From: g.from})
	}
	slices.SortFunc(rec.GPUs, func(a, b annv1.BorrowedGPU) int { return cmp.Compare(a.UUID, b.UUID) })
	return annv1.Marshal(&rec)
}

// borrowedOwners reads the owner pods a bound borrower's record names; ok is
// false when the pod has no record.
func borrowedOwners(p *corev1.Pod) (owners []string, ok bool, err error) {
	raw, has := p.Annotations[annv1.BorrowedKey]
	if !has {
		return nil, false, nil
	}
	rec, err := annv1.ParseBorrowed(raw)
	if err != nil {
		return nil, true, err
	}
	for _, g := range rec.GPUs {
		for _, f := range g.From {
			l := annv1.Lender{Owner: f}
			if !slices.Contains(owners, l.Pod()) {
				owners = append(owners, l.Pod())
			}
		}
	}
	return owners, true, nil
}

// lendingContainer names the container an owner pod lends from in the
// borrowed record: its first app container with a GPU request (an owner
// has one in practice; the record is informational, the node agent decides
// which containers it lowers).
func lendingContainer(shape translate.Shape) string {
	for _, c := range shape.Containers {
		if !c.Init {
			return c.Name
		}
	}
	return ""
}
