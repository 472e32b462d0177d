package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/preempt"
)

type preemptRunning = preempt.Running

// The gang stage is glue around internal/gang: members of a pod group do
// not enter the priority queue one by one; the group assembles in the
// tracker, and each cycle every group with min-member members present is
// reserved all or nothing (internal/gang.Reserve places the members with
// the placement pipeline, honouring node or NVLink-island locality, and
// releases what it took if any member does not fit). A complete group's
// members start together. A group that is not complete timeout after its
// first member arrived releases what it holds and its members are dropped
// with the tracker's reason. Preemption takes a running gang whole or not
// at all (internal/preempt; the engine hands it every running member of a
// gang that has one on a candidate node); a ready group that does not fit
// may itself preempt, all members or none (gangpreempt.go).
type gangs struct {
	tracker *gang.Tracker
	pending map[string]map[string]*Pod // group → member key → pod
	running map[string][]*Running      // group → running members
	// escalated holds the pending groups past a member's maximum wait.
	escalated map[string]bool
}

func newGangs(s *placement.Scheduler, timeout time.Duration) *gangs {
	return &gangs{tracker: gang.NewTracker(s, timeout), pending: map[string]map[string]*Pod{}, running: map[string][]*Running{}, escalated: map[string]bool{}}
}

// submitMember registers a gang member with the tracker.
func (e *Engine) submitMember(p *Pod, now time.Time) error {
	if err := e.gangs.tracker.Add(*p.Gang, gang.Member{Name: p.Key, Request: p.Request}, now); err != nil {
		return fmt.Errorf("pod %s: %w", p.Key, err)
	}
	if e.gangs.pending[p.Gang.Name] == nil {
		e.gangs.pending[p.Gang.Name] = map[string]*Pod{}
	}
	e.gangs.pending[p.Gang.Name][p.Key] = p
	return nil
}

// cycleGangs expires groups past their timeout or a member's deadline,
// escalates those past a member's maximum wait (gangtime.go) and reserves
// the ready ones, most urgent class first (then oldest, then by name).
func (e *Engine) cycleGangs(now time.Time) {
	for _, x := range e.gangs.tracker.Expire(now) {
		e.dropGangReservations(sortedKeys(e.gangs.pending[x.Name])...)
		for _, key := range x.Members {
			if p := e.gangs.pending[x.Name][key]; p != nil {
				e.emit(Event{Kind: Dropped, Time: now, Pod: p, Reason: x.Err.Error()})
			}
		}
		delete(e.gangs.pending, x.Name)
		delete(e.gangs.escalated, x.Name)
	}
	e.expireGangDeadlines(now)
	e.escalateGangs(now)
	for _, name := range e.gangOrder(now) {
		if !e.gangs.tracker.Ready(name) {
			continue
		}
		if e.admit != nil && !e.admitGang(name, now) {
			continue
		}
		held := e.unholdGang(name) // what was held for the group is its own room (gangreserve.go)
		got, err := e.gangs.tracker.Reserve(name)
		if err != nil && e.cfg.Preemption {
			if g, ok := e.preemptForGang(name, now); ok { // gangpreempt.go
				got, err = g, nil
			}
		}
		if err != nil {
			e.reholdGang(held)
			e.reserveGang(name, now)
			continue // all or nothing: nothing was kept; the group waits
		}
		e.dropGangReservations(sortedKeys(e.gangs.pending[name])...)
		if st, _ := e.gangs.tracker.Status(name); !st.Complete {
			continue
		}
		// On success Reserve holds every present member that fits with the
		// others — all of them, or (elastic groups) the first min-member
		// when all do not fit: those start; the rest assemble anew.
		e.startGang(name, got, now)
	}
}

// groupAdmission is an Admission that can admit pods together: each
// against the books with the ones before it already counted. Without it
// each member is asked alone, which cannot see that the members together
// exceed what their queue may hold.
type groupAdmission interface {
	AdmitAll(pods []*Pod, now time.Time) error
}

// admitGang asks admission for every member; the group waits unless all
// are admitted together.
func (e *Engine) admitGang(name string, now time.Time) bool {
	if ga, ok := e.admit.(groupAdmission); ok {
		keys := make([]string, 0, len(e.gangs.pending[name]))
		for k := range e.gangs.pending[name] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pods := make([]*Pod, len(keys))
		for i, k := range keys {
			pods[i] = e.gangs.pending[name][k]
		}
		return ga.AdmitAll(pods, now) == nil
	}
	for _, p := range e.gangs.pending[name] {
		if e.admit.Admit(p, now) != nil {
			return false
		}
	}
	return true
}

// startGang books the members the tracker reserved as running pods.
func (e *Engine) startGang(name string, decisions map[string]placement.Decision, now time.Time) {
	e.gangs.tracker.Done(name)
	keys := make([]string, 0, len(decisions))
	for k := range decisions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := e.gangs.pending[name][k]
		delete(e.gangs.pending[name], k)
		e.book(p, decisions[k], now)
	}
	// Members Reserve did not take (more than min-member arrived and not
	// all fitted) assemble a new group of their own.
	rest := e.gangs.pending[name]
	delete(e.gangs.pending, name)
	delete(e.gangs.escalated, name)
	for _, p := range rest {
		_ = e.submitMember(p, now)
	}
}

// gangMembers appends the running members of the gangs in out that out
// does not hold yet: preempt takes a gang whole, so it must see all of it.
func (e *Engine) gangMembers(out []preemptRunning, convert func(*Running) preemptRunning) []preemptRunning {
	// Only gang members are looked up: a full cluster lists 100,000
	// candidates, a map of them all cost more than the victim search.
	var gangs map[string]bool
	var seen map[string]bool
	for _, r := range out {
		if r.Gang == "" {
			continue
		}
		if gangs == nil {
			gangs, seen = map[string]bool{}, map[string]bool{}
		}
		gangs[r.Gang] = true
		seen[r.ID] = true
	}
	for g := range gangs {
		for _, r := range e.gangs.running[g] {
			if !seen[r.Pod.Key] {
				out = append(out, convert(r))
			}
		}
	}
	return out
}

func (e *Engine) gangPending() int {
	n := 0
	for _, m := range e.gangs.pending {
		n += len(m)
	}
	return n
}
