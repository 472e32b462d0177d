package engine

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Backfill reservations for gangs. A Ready group that has waited
// ReserveAfter (from its first member's submission) and still cannot be
// reserved gets a reservation for every pending member at once — each a
// placeholder, as for a single pod (backfill.go) — or none, when the
// reservations left under MaxReservations are too few: a part of a gang
// held is capacity nobody uses. Where the placeholders go follows the
// group's locality:
//
//   - anywhere: each member on its own node, chosen as for a single pod;
//   - node: every member on one node that could host the whole group when
//     empty, the one where most of the group's GPU need is free now;
//   - nvlink-island, numa-node: the same, and every member's GPUs pinned to
//     one NVLink island (NUMA node) of that node that has GPUs enough for
//     the whole group — the one with the most of the need free now — so
//     what frees there is held for the group until all of it fits together.
//
// Each time the group is tried the members' placeholders are let go just
// before, so the group can use what was held for it; when it starts the
// reservations end, when it fails they are held again with what the nodes
// have free by then.

// gangReservations lists the reservations the group's members hold, in
// the order they were made (the order they hold in).
func (e *Engine) gangReservations(name string) []*reservation {
	var out []*reservation
	for _, r := range e.res.order {
		if r.pod.Gang != nil && r.pod.Gang.Name == name {
			out = append(out, r)
		}
	}
	return out
}

// unholdGang lets the members' placeholders go before the group is tried.
func (e *Engine) unholdGang(name string) []*reservation {
	rs := e.gangReservations(name)
	for _, r := range rs {
		e.unhold(r)
	}
	return rs
}

// reholdGang takes the placeholders again after the group failed.
func (e *Engine) reholdGang(rs []*reservation) {
	for _, r := range rs {
		e.hold(r)
	}
}

// reserveGang gives every pending member of a Ready group that waited
// long enough a reservation, all or none.
func (e *Engine) reserveGang(name string, now time.Time) {
	rs := e.res
	members := e.gangs.pending[name]
	if !rs.enabled() || len(members) == 0 || now.Sub(e.gangSubmitted(name)) < rs.after {
		return
	}
	ms := e.membersLargestFirst(name)
	var missing []*Pod
	for _, p := range ms {
		if rs.byPod[p.Key] == nil {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return
	}
	loc := ms[0].Gang.Locality
	if loc != gang.Anywhere && len(missing) < len(ms) {
		// A member joined a group already held: hold the group anew, all
		// of it on one node.
		e.dropGangReservations(sortedKeys(members)...)
		missing = ms
	}
	if len(rs.order)+len(missing) > rs.max {
		return
	}
	var made []*reservation
	if loc == gang.Anywhere {
		made = e.reserveMembersApart(missing)
	} else {
		made = e.reserveMembersTogether(missing, loc)
	}
	for _, r := range made {
		e.emit(Event{Kind: Reserved, Time: now, Pod: r.pod, Node: r.node})
	}
}

// reserveMembersApart holds each member on its own node, all or none.
func (e *Engine) reserveMembersApart(ms []*Pod) []*reservation {
	var made []*reservation
	for _, p := range ms {
		node := e.chooseNode(p)
		if node < 0 {
			for _, r := range made {
				e.dropReservation(r.pod.Key)
			}
			return nil
		}
		made = append(made, e.addReservation(p, node, pin{}))
	}
	return made
}

// reserveMembersTogether holds every member on one node (and one island
// or NUMA node when the group asks for it), in the order given.
func (e *Engine) reserveMembersTogether(ms []*Pod, loc gang.Locality) []*reservation {
	node, where, ok := e.chooseGroupNode(ms, loc)
	if !ok {
		return nil
	}
	made := make([]*reservation, 0, len(ms))
	for _, p := range ms {
		made = append(made, e.addReservation(p, node, where))
	}
	return made
}

func (e *Engine) addReservation(p *Pod, node int, where pin) *reservation {
	r := &reservation{pod: p, node: node, pin: where}
	e.res.byPod[p.Key] = r
	e.res.order = append(e.res.order, r)
	e.hold(r)
	return r
}

// pin confines a reservation's GPUs to one NVLink island or host NUMA node
// of its node (by is SameIsland or SameNUMA); the zero pin admits every
// GPU.
type pin struct {
	by  gang.Locality
	key int8
}

func (p pin) admits(g *partition.GPU) bool {
	switch p.by {
	case gang.SameIsland:
		return g.Island == p.key
	case gang.SameNUMA:
		return g.NUMA == p.key
	}
	return true
}

// pinsOf lists the islands (NUMA nodes) of n with at least need GPUs not
// in MIG mode, or the zero pin when loc asks for no such group.
func pinsOf(n *partition.Node, loc gang.Locality, need int) []pin {
	if loc != gang.SameIsland && loc != gang.SameNUMA {
		return []pin{{}}
	}
	count := map[int8]int{}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.InMIGMode() {
			continue
		}
		k := g.Island
		if loc == gang.SameNUMA {
			k = g.NUMA
		}
		count[k]++
	}
	var out []pin
	for k, c := range count {
		if c >= need {
			out = append(out, pin{by: loc, key: k})
		}
	}
	slices.SortFunc(out, func(a, b pin) int { return cmp.Compare(a.key, b.key) })
	return out
}

// chooseGroupNode picks where a group with locality is held: among nodes
// that admit every member, carry no reservation yet and could host the
// whole group when empty, the node and pin where the most of the group's
// GPU need is free now (then the most CPU).
func (e *Engine) chooseGroupNode(ms []*Pod, loc gang.Locality) (int, pin, bool) {
	c := e.cluster
	sum, sumErr := gang.Sum(members(ms), loc)
	var need int64
	for _, p := range ms {
		need += int64(p.Request.NumGPU) * int64(p.Request.GPUMilli)
	}
	best, bestPin, bestGPU, bestCPU := -1, pin{}, int64(-1), int64(-1)
	var scratch partition.Node
	for i := range c.Nodes {
		if e.res.nodeReserved(i) || !e.admitsAll(i, ms) {
			continue
		}
		n := &c.Nodes[i]
		emptyNode(n, &scratch)
		switch {
		case loc == gang.SameNode && !fitsInTurn(&scratch, ms):
			continue
		case loc != gang.SameNode && (sumErr != nil || !c.FitsState(i, &scratch, &sum)):
			continue
		}
		for _, where := range pinsOf(n, loc, sum.NumGPU) {
			var free int64
			for g := range n.GPUs {
				if gpu := &n.GPUs[g]; !gpu.InMIGMode() && where.admits(gpu) {
					free += int64(gpu.FreeMilli)
				}
			}
			free = min(free, need)
			if free < bestGPU || (free == bestGPU && n.FreeCPU <= bestCPU) {
				continue
			}
			best, bestPin, bestGPU, bestCPU = i, where, free, n.FreeCPU
		}
	}
	return best, bestPin, best >= 0
}

func members(ps []*Pod) []gang.Member {
	out := make([]gang.Member, len(ps))
	for i, p := range ps {
		out[i] = gang.Member{Name: p.Key, Request: p.Request}
	}
	return out
}

func (e *Engine) admitsAll(i int, ms []*Pod) bool {
	for _, p := range ms {
		if !e.cluster.Admits(i, &p.Request) {
			return false
		}
	}
	return true
}

// fitsInTurn reports whether the members, taken in order, each find their
// whole request on n (a scratch copy, changed): a sufficient test that a
// node group fits a node, also when members take GPU shares that do not
// add up to one request.
func fitsInTurn(n *partition.Node, ms []*Pod) bool {
	for _, p := range ms {
		q := &p.Request
		g := heldGrant(n, q, pin{})
		if g.CPU != q.CPUMilli || g.MemMiB != q.MemMiB || len(g.Shares) != q.NumGPU || len(g.MIG) != q.NumMIG {
			return false
		}
		for _, s := range g.Shares {
			if s.Milli != q.GPUMilli || s.MemMiB != q.GPUMemMiB {
				return false
			}
		}
		if n.Reserve(g) != nil {
			return false
		}
	}
	return true
}

// errNothingLent: no reservation less urgent than the group is held.
var errNothingLent = errors.New("no less urgent reservation to use")

// reserveGangThroughReservations is placeThroughReservations for a group:
// the capacity held for pods less urgent in the queue's order is lent to
// it when nothing else fits it (a reservation keeps backfill off, not
// more urgent work), and held again at once with what is left.
func (e *Engine) reserveGangThroughReservations(name string, now time.Time) (map[string]placement.Decision, error) {
	class := e.gangClass(name, now)
	var lent []*reservation
	for _, r := range e.res.order {
		if r.on && class.Above(e.effective(r.pod, now)) {
			lent = append(lent, r)
		}
	}
	if len(lent) == 0 {
		return nil, errNothingLent
	}
	for _, r := range lent {
		e.unhold(r)
	}
	got, err := e.gangs.tracker.Reserve(name)
	for _, r := range lent {
		e.hold(r)
	}
	return got, err
}

// dropGangReservations ends the reservations of the given members (the
// group started, was dropped, or a member was deleted).
func (e *Engine) dropGangReservations(keys ...string) {
	for _, k := range keys {
		e.dropReservation(k)
	}
}
