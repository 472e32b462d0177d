package engine

import (
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
)

// Backfill reservations for gangs. A ready group that has waited
// ReserveAfter (from its first member's submission) and still cannot be
// reserved gets a reservation for every pending member at once — each a
// placeholder on its own node, as for a single pod (backfill.go) — or
// none, when the reservations left under MaxReservations are too few: a
// part of a gang held is capacity nobody uses. Each cycle the members'
// placeholders are let go just before the group is tried, so the group
// can use what was held for it; when it starts the reservations end, when
// it fails they are held again with what the nodes have free by then.
// Only groups without locality are held this way: a node or NVLink-island
// group needs its capacity together on one node, which per-member
// placeholders on different nodes do not give (docs/scheduler.md).

// gangReservations lists the reservations the group's members hold.
func (e *Engine) gangReservations(name string) []*reservation {
	var out []*reservation
	for _, key := range sortedKeys(e.gangs.pending[name]) {
		if r := e.res.byPod[key]; r != nil {
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

// reserveGang gives every pending member of a ready group that waited
// long enough a reservation, all or none.
func (e *Engine) reserveGang(name string, now time.Time) {
	rs := e.res
	members := e.gangs.pending[name]
	if !rs.enabled() || len(members) == 0 || now.Sub(e.gangSubmitted(name)) < rs.after {
		return
	}
	var spec gang.Spec
	var missing []*Pod
	for _, key := range sortedKeys(members) {
		p := members[key]
		spec = *p.Gang
		if rs.byPod[key] == nil {
			missing = append(missing, p)
		}
	}
	if spec.Locality != gang.Anywhere || len(missing) == 0 || len(rs.order)+len(missing) > rs.max {
		return
	}
	var made []*reservation
	for _, p := range missing {
		node := e.chooseNode(p)
		if node < 0 {
			for _, r := range made {
				e.dropReservation(r.pod.Key)
			}
			return
		}
		r := &reservation{pod: p, node: node}
		rs.byPod[p.Key] = r
		rs.order = append(rs.order, r)
		e.hold(r)
		made = append(made, r)
	}
	for _, r := range made {
		e.emit(Event{Kind: Reserved, Time: now, Pod: r.pod, Node: r.node})
	}
}

// dropGangReservations ends the reservations of the given members (the
// group started, was dropped, or a member was deleted).
func (e *Engine) dropGangReservations(keys ...string) {
	for _, k := range keys {
		e.dropReservation(k)
	}
}
