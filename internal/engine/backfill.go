package engine

import (
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// reservations is the head-of-line stage. Backfill is the default: a pod
// that does not fit is skipped and the pods behind it are tried, so a large
// pod never blocks smaller ones. To keep the large pod from being starved
// by them, once it has waited ReserveAfter it gets a reservation on one
// node: whatever that node has free of what the pod needs is held (reserved
// in the cluster under a placeholder grant, so the placement index sees it
// as taken) and grows as the node frees more, until the pod fits there.
// Backfill may use only what the reservation cannot: the rest of that node
// and every other node. At most Max reservations exist at a time, so the
// capacity held back is bounded.
type reservations struct {
	after time.Duration
	max   int
	byPod map[string]*reservation
	order []*reservation
	// lendFailed remembers (shape, class) that did not fit even with the
	// less urgent reservations let go, at the placer's generation.
	lendFailed map[lendKey]uint64
}

type lendKey struct {
	shape placement.Shape
	class priority.Class
}

type reservation struct {
	pod  *Pod
	node int
	pin  pin                // the GPUs of node it may hold (a gang's island or NUMA node)
	held placement.Decision // the placeholder grant; no shares and no CPU when nothing is held
	on   bool
}

func newReservations(after time.Duration, max int) *reservations {
	return &reservations{after: after, max: max, byPod: map[string]*reservation{}, lendFailed: map[lendKey]uint64{}}
}

func (rs *reservations) enabled() bool { return rs.after > 0 && rs.max > 0 }

// nodeReserved reports whether node i already carries a reservation.
func (rs *reservations) nodeReserved(i int) bool {
	for _, r := range rs.order {
		if r.node == i {
			return true
		}
	}
	return false
}

// heldGrant is what to hold on node n for request q: of each resource the
// pod needs, what the node has free now. GPUs: the pod's GPU count of the
// node's emptiest GPUs that where admits, each up to the pod's per-GPU
// share; MIG devices: up to the pod's count of the free ones of its
// profile.
func heldGrant(n *partition.Node, q *placement.Request, where pin) partition.Grant {
	g := partition.Grant{CPU: min(q.CPUMilli, n.FreeCPU), MemMiB: min(q.MemMiB, n.FreeMemMiB)}
	if q.NumMIG > 0 {
		g.MIG = n.PickMIG(q.MIGProfile, min(q.NumMIG, n.FreeMIG(q.MIGProfile)))
	}
	if q.NumGPU == 0 {
		return g
	}
	idx := make([]int, 0, len(n.GPUs))
	for i := range n.GPUs {
		if !n.GPUs[i].InMIGMode() && n.GPUs[i].FreeMilli > 0 && where.admits(&n.GPUs[i]) {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return int(n.GPUs[b].FreeMilli - n.GPUs[a].FreeMilli) })
	for _, i := range idx[:min(len(idx), q.NumGPU)] {
		gpu := &n.GPUs[i]
		g.Shares = append(g.Shares, partition.Share{GPU: i, Milli: min(gpu.FreeMilli, q.GPUMilli), MemMiB: min(gpu.FreeMemMiB, q.GPUMemMiB)})
	}
	return g
}

func (g *reservation) empty() bool {
	return g.held.Grant.CPU == 0 && g.held.Grant.MemMiB == 0 && len(g.held.Grant.Shares) == 0 && len(g.held.Grant.MIG) == 0
}

// chooseNode picks the node to reserve for p: among nodes that could host it
// when empty and carry no reservation yet, the one where the most of its GPU
// need (then CPU) is free now, so it waits the least; -1 if none.
func (e *Engine) chooseNode(p *Pod) int {
	c := e.cluster
	best, bestGPU, bestCPU := -1, int64(-1), int64(-1)
	var scratch partition.Node
	for i := range c.Nodes {
		if !c.Admits(i, &p.Request) || e.res.nodeReserved(i) {
			continue
		}
		n := &c.Nodes[i]
		if len(n.GPUs) < p.Request.NumGPU || n.CPU < p.Request.CPUMilli || n.MemMiB < p.Request.MemMiB {
			continue
		}
		g := heldGrant(n, &p.Request, pin{})
		var gpu int64
		for _, s := range g.Shares {
			gpu += int64(s.Milli)
		}
		if gpu < bestGPU || (gpu == bestGPU && g.CPU <= bestCPU) {
			continue
		}
		emptyNode(n, &scratch)
		if !c.FitsState(i, &scratch, &p.Request) {
			continue // e.g. its NVLink islands are too small
		}
		best, bestGPU, bestCPU = i, gpu, g.CPU
	}
	return best
}

// emptyNode writes into out a copy of n with everything free.
func emptyNode(n *partition.Node, out *partition.Node) {
	gpus := out.GPUs[:0]
	*out = *n
	out.FreeCPU, out.FreeMemMiB = n.CPU, n.MemMiB
	out.MIGUsed = 0
	for _, g := range n.GPUs {
		g.FreeMilli, g.FreeMemMiB = partition.MilliPerGPU, g.MemMiB
		gpus = append(gpus, g)
	}
	out.GPUs = gpus
}

// hold takes what node r.node has free of the pod's need.
func (e *Engine) hold(r *reservation) {
	g := heldGrant(&e.cluster.Nodes[r.node], &r.pod.Request, r.pin)
	r.held = placement.Decision{Node: r.node, NodeName: e.cluster.Nodes[r.node].Name, Grant: g}
	r.on = false
	if r.empty() {
		return
	}
	if err := e.cluster.Reserve(r.held); err == nil {
		r.on = true
	}
}

// unhold gives the placeholder back (the pod is about to try the capacity).
func (e *Engine) unhold(r *reservation) {
	if r.on {
		if err := e.cluster.Release(r.held); err != nil {
			panic("engine: a reservation's placeholder cannot be released: " + err.Error())
		}
		r.on = false
	}
}

// placeThroughReservations places p on capacity held for pods less urgent
// in the queue's order (effective classes: an aged pod's reservation is
// not lent to the classes it has caught up with) when nothing else fits
// it. A reservation keeps backfill — the pods behind
// its pod in the queue — off its node, not the pods ahead of it: a more
// urgent pod takes held capacity before it evicts running work or waits
// (as kube-scheduler lets a higher-priority pod take a nominated pod's
// room). The reservations lent are held again at once, with what is left.
func (e *Engine) placeThroughReservations(p *Pod, now time.Time) bool {
	class := e.effective(p, now)
	var lent []*reservation
	for _, r := range e.res.order {
		if r.on && class.Above(e.effective(r.pod, now)) {
			lent = append(lent, r)
		}
	}
	if len(lent) == 0 {
		return false
	}
	key := lendKey{e.cluster.ShapeOf(&p.Request), class}
	if e.res.lendFailed[key] == e.placer.gen {
		return false
	}
	for _, r := range lent {
		e.unhold(r)
	}
	d, ok := e.sched.Find(&p.Request)
	placed := ok && e.start(p, d, now) == nil
	for _, r := range lent {
		e.hold(r)
	}
	if !placed {
		e.res.lendFailed[key] = e.placer.gen
	}
	return placed
}

// effective is the class p competes in at now in the queue: escalated
// after its maximum wait, then aged. (Queue order, not preemption rights.)
func (e *Engine) effective(p *Pod, now time.Time) priority.Class {
	if name := e.pendingGroup(p); name != "" {
		return e.gangClass(name, now) // a group competes as one
	}
	qc, base, wait := e.q.Config(), p.Class, now.Sub(p.Submitted)
	if p.MaxWait > 0 && wait >= p.MaxWait && qc.EscalateTo.Above(base) {
		base = qc.EscalateTo
	}
	return qc.Ageing.Effective(base, wait)
}

// reserve gives p a reservation if it has waited long enough and the bound
// allows one.
func (e *Engine) reserve(p *Pod, now time.Time) {
	rs := e.res
	if !rs.enabled() || now.Sub(p.Submitted) < rs.after || len(rs.order) >= rs.max || rs.byPod[p.Key] != nil {
		return
	}
	node := e.chooseNode(p)
	if node < 0 {
		return
	}
	r := &reservation{pod: p, node: node}
	rs.byPod[p.Key] = r
	rs.order = append(rs.order, r)
	e.hold(r)
	e.emit(Event{Kind: Reserved, Time: now, Pod: p, Node: node})
}

// dropReservation ends p's reservation (placed, dropped or deleted) and
// frees what it held.
func (e *Engine) dropReservation(key string) {
	r := e.res.byPod[key]
	if r == nil {
		return
	}
	// held is what the placeholder last took, also when the caller already
	// let it go to place the pod: what the pod did not take of it (all of
	// it when the pod landed on another node) is free again, so shapes
	// remembered as fitting nowhere while it was held may fit now.
	// Reservations are few: forgetting is cheap.
	held := r.on || !r.empty()
	e.unhold(r)
	delete(e.res.byPod, key)
	e.res.order = slices.DeleteFunc(e.res.order, func(x *reservation) bool { return x == r })
	if held {
		e.placer.capacityFreed()
	}
}

// refreshReservations runs at the start of every cycle: each reservation
// lets go of its placeholder, places its pod if the node can now host it,
// or holds again what the node has free (more than before when pods there
// ended). A reservation on a node that no longer admits the pod (cordoned)
// is dropped.
func (e *Engine) refreshReservations(now time.Time) {
	for _, r := range slices.Clone(e.res.order) {
		if e.res.byPod[r.pod.Key] != r {
			continue // dropped with its group in this loop
		}
		if !e.cluster.Admits(r.node, &r.pod.Request) {
			// The node was cordoned: what it holds serves nobody and the
			// pod would wait for it forever. Let go; the pod's next failed
			// attempt reserves a node that admits it. A gang member's
			// reservation is part of its group's: all go.
			if r.pod.Gang != nil {
				e.dropGangReservations(sortedKeys(e.gangs.pending[r.pod.Gang.Name])...)
			}
			e.dropReservation(r.pod.Key)
			continue
		}
		e.unhold(r)
		if r.pod.Gang != nil {
			e.hold(r) // a group starts whole, when its entry's turn comes
			continue
		}
		if d, ok := e.sched.ScheduleOn(r.node, &r.pod.Request); ok {
			if en, queued := e.q.Get(r.pod.Key); queued && e.admitted(en.Pod, now) {
				e.q.Remove(r.pod.Key)
				if e.start(en.Pod, d, now) == nil {
					e.dropReservation(r.pod.Key)
					continue
				}
				_ = e.q.Push(en) // back in its old place: Push keeps the submission time
			}
		}
		e.hold(r)
	}
}
