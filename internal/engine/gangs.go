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

// The gang stage is glue around internal/gang: members of a pod group
// assemble in the tracker, not in the priority queue. Once min-member
// members are present the group is Ready and takes its place in the queue
// as one entry, its token: of the group's most urgent member class (the
// queue's escalation class once a member passed its maximum wait), aged
// from its first member's submission, first in first out with single pods
// of its effective class — a group goes neither before nor after single
// pods because it is a group. When the token's turn comes the group is
// reserved all or nothing (internal/gang.Reserve places the members with
// the placement pipeline, honouring node, NVLink-island or NUMA locality,
// and releases what it took if any member does not fit); failing, the token
// backs off and is requeued like a pod, gets a reservation once the group
// has waited ReserveAfter (gangreserve.go), and may preempt (all members or
// none, gangpreempt.go). A complete group's members start together. A
// group that is not complete timeout after its first member arrived
// releases what it holds and its members are dropped with the tracker's
// reason. Preemption takes a running gang whole or not at all
// (internal/preempt; the engine hands it every running member of a gang
// that has one on a candidate node).
type gangs struct {
	tracker *gang.Tracker
	pending map[string]map[string]*Pod // group → member key → pod
	running map[string][]*Running      // group → running members
	// escalated holds the pending groups past a member's maximum wait.
	escalated map[string]bool
	// tokens holds each Ready group's queue entry (a Pod whose group field
	// names it), queued or popped by the cycle in progress.
	tokens map[string]*Pod
}

func newGangs(s *placement.Scheduler, timeout time.Duration) *gangs {
	return &gangs{tracker: gang.NewTracker(s, timeout), pending: map[string]map[string]*Pod{}, running: map[string][]*Running{},
		escalated: map[string]bool{}, tokens: map[string]*Pod{}}
}

// tokenKey is a group's key in the queue; no pod key starts with NUL.
func tokenKey(group string) string { return "\x00gang/" + group }

// submitMember registers a gang member with the tracker.
func (e *Engine) submitMember(p *Pod, now time.Time) error {
	if err := e.gangs.tracker.Add(*p.Gang, gang.Member{Name: p.Key, Request: p.Request}, now); err != nil {
		return fmt.Errorf("pod %s: %w", p.Key, err)
	}
	if e.gangs.pending[p.Gang.Name] == nil {
		e.gangs.pending[p.Gang.Name] = map[string]*Pod{}
	}
	e.gangs.pending[p.Gang.Name][p.Key] = p
	e.syncToken(p.Gang.Name)
	return nil
}

// syncToken makes the group's queue entry match the group: none unless
// it is Ready; else one of the group's class (escalation included) and
// first submission, pushed anew when either changed. A token popped by
// the cycle in progress is left alone: the cycle requeues it.
func (e *Engine) syncToken(name string) {
	if !e.gangs.tracker.Ready(name) || len(e.gangs.pending[name]) == 0 {
		e.removeToken(name)
		return
	}
	class, first := e.gangBaseClass(name), e.gangSubmitted(name)
	if to := e.cfg.Queue.EscalateTo; e.gangs.escalated[name] && to.Above(class) {
		class = to
	}
	if tok := e.gangs.tokens[name]; tok != nil {
		if _, queued := e.q.Get(tok.Key); !queued || (tok.Class == class && tok.Submitted.Equal(first)) {
			return
		}
		e.removeToken(name)
	}
	tok := &Pod{Key: tokenKey(name), Class: class, Submitted: first, group: name}
	if err := e.q.Push(e.entry(tok)); err != nil {
		panic("engine: a group's queue entry was refused: " + err.Error())
	}
	e.gangs.tokens[name] = tok
	e.exhausted.pendingAdd(e.keyOf(tok))
}

// removeToken takes the group's entry out of the queue (when queued) and
// forgets it.
func (e *Engine) removeToken(name string) {
	tok := e.gangs.tokens[name]
	if tok == nil {
		return
	}
	e.q.Remove(tok.Key)
	e.exhausted.pendingDel(e.keyOf(tok), e.placer.gen)
	delete(e.gangs.tokens, name)
}

// forgetGroup drops a pending group's books: token, members, escalation
// and the reservations its members hold.
func (e *Engine) forgetGroup(name string) {
	e.dropGangReservations(sortedKeys(e.gangs.pending[name])...)
	e.removeToken(name)
	delete(e.gangs.pending, name)
	delete(e.gangs.escalated, name)
}

// gangClock applies time to the pending groups at the start of a cycle:
// groups past their timeout or a member's deadline are dropped, those
// past a member's maximum wait escalated (gangtime.go).
func (e *Engine) gangClock(now time.Time) {
	for _, x := range e.gangs.tracker.Expire(now) {
		pending := e.gangs.pending[x.Name]
		e.forgetGroup(x.Name)
		for _, key := range x.Members {
			if p := pending[key]; p != nil {
				e.emit(Event{Kind: Dropped, Time: now, Pod: p, Reason: x.Err.Error(), Err: x.Err})
			}
		}
	}
	e.expireGangDeadlines(now)
	e.escalateGangs(now)
}

// attemptGang runs the stages for a group whose token was popped: quota
// for all members together, the group's own reservations let go, the
// tracker's all-or-nothing reservation, then capacity held for less
// urgent pods, then preemption; failing all, what was held for the group
// is held again (or first held, once it waited ReserveAfter). True when
// the group started.
func (e *Engine) attemptGang(tok *Pod, now time.Time) bool {
	name := tok.group
	if e.gangs.tokens[name] != tok || !e.gangs.tracker.Ready(name) {
		return true // a stale token: the group started, was dropped or shrank
	}
	if e.admit != nil && !e.admitGang(name, now) {
		e.exhausted.fail(e.keyOf(tok), e.placer.gen, now)
		return false
	}
	held := e.unholdGang(name) // what was held for the group is its own room (gangreserve.go)
	got, err := e.gangs.tracker.Reserve(name)
	if err != nil {
		got, err = e.reserveGangThroughReservations(name, now)
	}
	budget := e.searches
	if err != nil && e.cfg.Preemption {
		if g, ok := e.preemptForGang(name, now); ok { // gangpreempt.go
			got, err = g, nil
		}
	}
	if err != nil {
		e.reholdGang(held)
		e.reserveGang(name, now)
		if !(e.cfg.Preemption && e.cfg.PreemptionSearches > 0 && budget >= e.cfg.PreemptionSearches) {
			e.exhausted.fail(e.keyOf(tok), e.placer.gen, now)
		}
		return false // all or nothing: nothing was kept; the group waits
	}
	e.dropGangReservations(sortedKeys(e.gangs.pending[name])...)
	// On success Reserve holds every present member that fits with the
	// others — all of them, or (elastic groups) the first min-member when
	// all do not fit: those start; the rest assemble anew.
	e.removeToken(name)
	e.startGang(name, got, now)
	return true
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
		e.book(e.gangs.pending[name][k], decisions[k], now) // at the group's class while it is pending
	}
	for _, k := range keys {
		delete(e.gangs.pending[name], k)
	}
	// Members Reserve did not take (more than min-member arrived and not
	// all fitted) assemble a new group of their own.
	rest := e.gangs.pending[name]
	delete(e.gangs.pending, name)
	delete(e.gangs.escalated, name)
	for _, key := range sortedKeys(rest) {
		_ = e.submitMember(rest[key], now)
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
