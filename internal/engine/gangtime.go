package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// A pending group is one entry in the queue (its token, gangs.go) only
// once Ready, and its members' deadlines and maximum waits are theirs, not
// the token's, so the queue's clock is applied to a pending group here,
// with the same rules as for a single pod: a group cannot start without
// any of its members, so the first member deadline that passes drops the
// whole group; a member that waited its MaxWait escalates the group to the
// queue's EscalateTo (its token moves to that class); and the group ages
// like a pod from its first member's submission, up to the ageing ceiling
// (the queue ages the token).

// expireGangDeadlines drops, whole, every pending group one of whose
// members is past its deadline; every member is told why.
func (e *Engine) expireGangDeadlines(now time.Time) {
	for _, name := range e.gangNames() {
		late := e.lateMember(name, now)
		if late == nil {
			continue
		}
		reason := fmt.Sprintf("gang %s: member %s deadline %s passed", name, late.Key, late.Deadline.Format(time.RFC3339))
		pending := e.gangs.pending[name]
		e.forgetGroup(name)
		for _, key := range sortedKeys(pending) {
			_ = e.gangs.tracker.RemoveMember(name, key) // releases what it held
			e.emit(Event{Kind: Dropped, Time: now, Pod: pending[key], Reason: reason, Deadline: late.Deadline})
		}
	}
}

// lateMember is a member of the group past its deadline at now, or nil.
func (e *Engine) lateMember(name string, now time.Time) *Pod {
	for _, key := range sortedKeys(e.gangs.pending[name]) {
		p := e.gangs.pending[name][key]
		if !p.Deadline.IsZero() && !p.Deadline.After(now) {
			return p
		}
	}
	return nil
}

// escalateGangs marks every group with a member past its maximum wait as
// escalated (once) and reports each member Escalated, as the queue does
// for single pods.
func (e *Engine) escalateGangs(now time.Time) {
	to := e.cfg.Queue.EscalateTo
	for _, name := range e.gangNames() {
		if e.gangs.escalated[name] || !to.Above(e.gangBaseClass(name)) || !e.waitedMax(name, now) {
			continue
		}
		e.gangs.escalated[name] = true
		e.syncToken(name)
		for _, key := range sortedKeys(e.gangs.pending[name]) {
			e.emit(Event{Kind: Escalated, Time: now, Pod: e.gangs.pending[name][key]})
		}
	}
}

func (e *Engine) waitedMax(name string, now time.Time) bool {
	for _, p := range e.gangs.pending[name] {
		if p.MaxWait > 0 && !p.Submitted.Add(p.MaxWait).After(now) {
			return true
		}
	}
	return false
}

// gangBaseClass is the most urgent class among the group's members.
func (e *Engine) gangBaseClass(name string) priority.Class {
	c := priority.Lowest
	for _, p := range e.gangs.pending[name] {
		if p.Class.Above(c) {
			c = p.Class
		}
	}
	return c
}

// gangClass is the class a pending group competes in at now: its base
// class, or EscalateTo once escalated, aged from its first member's
// submission up to the ageing ceiling (priority.Ageing).
func (e *Engine) gangClass(name string, now time.Time) priority.Class {
	c := e.gangBaseClass(name)
	if to := e.cfg.Queue.EscalateTo; e.gangs.escalated[name] && to.Above(c) {
		c = to
	}
	return e.cfg.Queue.Ageing.Effective(c, now.Sub(e.gangSubmitted(name)))
}

// gangSubmitted is when the group's first member was submitted.
func (e *Engine) gangSubmitted(name string) time.Time {
	var first time.Time
	for _, p := range e.gangs.pending[name] {
		if first.IsZero() || p.Submitted.Before(first) {
			first = p.Submitted
		}
	}
	return first
}

// nextGangEvent is the earliest member deadline or maximum wait still to
// be applied to a pending group; zero when none.
func (e *Engine) nextGangEvent() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for name, m := range e.gangs.pending {
		for _, p := range m {
			if !p.Deadline.IsZero() {
				consider(p.Deadline)
			}
			if p.MaxWait > 0 && !e.gangs.escalated[name] && e.cfg.Queue.EscalateTo.Above(e.gangBaseClass(name)) {
				consider(p.Submitted.Add(p.MaxWait))
			}
		}
	}
	return next
}

func (e *Engine) gangNames() []string {
	names := make([]string, 0, len(e.gangs.pending))
	for name := range e.gangs.pending {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func sortedKeys(m map[string]*Pod) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// pendingGroup names the pending group p is the token or a pending member
// of; "" otherwise.
func (e *Engine) pendingGroup(p *Pod) string {
	switch {
	case p.group != "":
		return p.group
	case p.Gang != nil && e.gangs.pending[p.Gang.Name][p.Key] == p:
		return p.Gang.Name
	}
	return ""
}
