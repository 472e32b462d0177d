// Package queue holds pending pods in scheduling order: by effective class
// (base class P0..P3 raised by ageing), then first in, first out by
// submission. It also drops pods whose deadline passed, escalates pods that
// waited longer than their maximum wait, and keeps pods that failed to
// schedule aside for a backoff before they compete again.
//
// Order without sorting: one heap per class, ordered by submission. Ageing
// is a monotone function of the wait, so within one heap an older pod is
// never in a less urgent effective class than a younger one: each heap is
// sorted by (effective class, submission) at every instant, and the next pod
// is the best of the four heads. Push, Pop and Requeue are O(log n).
package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/tessera-gpu/tessera/internal/priority"
)

// Config tunes a queue.
type Config struct {
	Ageing priority.Ageing
	// EscalateTo is the class a pod competes in once it has waited its
	// MaxWait (when that is more urgent than its own).
	EscalateTo priority.Class
	// BackoffInitial and BackoffMax bound the wait after a failed attempt:
	// it doubles from the initial value per consecutive failure.
	BackoffInitial, BackoffMax time.Duration
}

// DefaultConfig ages one class per 30 minutes up to P1, escalates to P1, and
// backs off 1 s doubling to 10 s (kube-scheduler's defaults).
func DefaultConfig() Config {
	return Config{
		Ageing:         priority.Ageing{Step: 30 * time.Minute, Ceiling: priority.P1},
		EscalateTo:     priority.P1,
		BackoffInitial: time.Second, BackoffMax: 10 * time.Second,
	}
}

// Validate rejects a config the queue cannot run with.
func (c Config) Validate() error {
	if err := c.Ageing.Validate(); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if !c.EscalateTo.Valid() {
		return fmt.Errorf("queue: escalateTo %v is not P0..P3", c.EscalateTo)
	}
	if c.BackoffInitial < 0 || c.BackoffMax < c.BackoffInitial {
		return fmt.Errorf("queue: backoff %v..%v: want 0 <= initial <= max", c.BackoffInitial, c.BackoffMax)
	}
	return nil
}

// Entry is one pending pod. Key, Class, Submitted, Deadline, MaxWait and
// Pod are set by the caller before Push; the rest is the queue's.
type Entry[T any] struct {
	Key       string
	Class     priority.Class // base class
	Submitted time.Time
	// Deadline, when not zero, drops the pod if it is still pending then.
	Deadline time.Time
	// MaxWait, when positive, escalates the pod after that wait.
	MaxWait time.Duration
	Pod     T

	seq       uint64
	queued    priority.Class // heap the entry sits in (its class, or EscalateTo)
	escalated bool
	attempts  int
	readyAt   time.Time
	inBackoff bool
	pos, dl   int // indices in the class/backoff heap and the deadline heap
	esc       int
}

// Escalated reports whether the pod passed its maximum wait.
func (e *Entry[T]) Escalated() bool { return e.escalated }

// Attempts is how many times the pod failed to schedule.
func (e *Entry[T]) Attempts() int { return e.attempts }

// Reason why a pod left the queue without being scheduled.
type Reason string

// ReasonDeadline: the pod's deadline passed while it waited.
const ReasonDeadline Reason = "deadline passed"

// Queue is the pending pods. Not safe for concurrent use.
type Queue[T any] struct {
	cfg      Config
	byKey    map[string]*Entry[T]
	classes  [priority.NumClasses]indexedHeap[T]
	backoff  indexedHeap[T]
	deadline indexedHeap[T]
	escalate indexedHeap[T]
	seq      uint64
	// OnDrop is told about every pod dropped (deadline), OnEscalate about
	// every pod escalated; either may be nil.
	OnDrop     func(e *Entry[T], why Reason, now time.Time)
	OnEscalate func(e *Entry[T], now time.Time)
}

// New builds an empty queue.
func New[T any](cfg Config) (*Queue[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := &Queue[T]{cfg: cfg, byKey: map[string]*Entry[T]{}}
	fifo := func(a, b *Entry[T]) bool {
		if !a.Submitted.Equal(b.Submitted) {
			return a.Submitted.Before(b.Submitted)
		}
		return a.seq < b.seq
	}
	pos := func(e *Entry[T]) *int { return &e.pos }
	for i := range q.classes {
		q.classes[i] = indexedHeap[T]{less: fifo, slot: pos}
	}
	q.backoff = indexedHeap[T]{less: func(a, b *Entry[T]) bool {
		if !a.readyAt.Equal(b.readyAt) {
			return a.readyAt.Before(b.readyAt)
		}
		return fifo(a, b)
	}, slot: pos}
	q.deadline = indexedHeap[T]{less: func(a, b *Entry[T]) bool { return a.Deadline.Before(b.Deadline) }, slot: func(e *Entry[T]) *int { return &e.dl }}
	q.escalate = indexedHeap[T]{less: func(a, b *Entry[T]) bool { return a.escalateAt().Before(b.escalateAt()) }, slot: func(e *Entry[T]) *int { return &e.esc }}
	return q, nil
}

func (e *Entry[T]) escalateAt() time.Time { return e.Submitted.Add(e.MaxWait) }

// Config is the queue's configuration.
func (q *Queue[T]) Config() Config { return q.cfg }

// Len is the number of pending pods, in backoff or not.
func (q *Queue[T]) Len() int { return len(q.byKey) }

// Get finds a pending pod by key.
func (q *Queue[T]) Get(key string) (*Entry[T], bool) {
	e, ok := q.byKey[key]
	return e, ok
}

// ErrDuplicate is returned when a key is pushed twice.
var ErrDuplicate = errors.New("pod is already queued")

// Push adds a pod. Its position among pods of its class follows Submitted
// (then push order), so a pod requeued after preemption with its original
// submission time gets its place back.
func (q *Queue[T]) Push(e *Entry[T]) error {
	if !e.Class.Valid() {
		return fmt.Errorf("queue: pod %s: class %v is not P0..P3", e.Key, e.Class)
	}
	if _, dup := q.byKey[e.Key]; dup {
		return fmt.Errorf("queue: pod %s: %w", e.Key, ErrDuplicate)
	}
	q.seq++
	e.seq, e.queued, e.escalated, e.attempts, e.inBackoff = q.seq, e.Class, false, 0, false
	e.pos, e.dl, e.esc = -1, -1, -1
	q.byKey[e.Key] = e
	if !e.Deadline.IsZero() {
		q.deadline.push(e)
	}
	if e.MaxWait > 0 && q.cfg.EscalateTo.Above(e.Class) {
		q.escalate.push(e)
	}
	q.classes[e.queued].push(e)
	return nil
}

// Remove takes a pod out (it was deleted, or scheduled elsewhere).
func (q *Queue[T]) Remove(key string) bool {
	e, ok := q.byKey[key]
	if !ok {
		return false
	}
	q.detach(e)
	return true
}

func (q *Queue[T]) detach(e *Entry[T]) {
	if e.inBackoff {
		q.backoff.remove(e)
	} else {
		q.classes[e.queued].remove(e)
	}
	if e.dl >= 0 {
		q.deadline.remove(e)
	}
	if e.esc >= 0 {
		q.escalate.remove(e)
	}
	delete(q.byKey, e.Key)
}

// Advance applies what time does: pods whose backoff ended compete again,
// pods past their deadline are dropped, pods past their maximum wait are
// escalated. Pop calls it; a caller may too (e.g. to drop promptly).
func (q *Queue[T]) Advance(now time.Time) {
	for e := q.deadline.peek(); e != nil && !e.Deadline.After(now); e = q.deadline.peek() {
		q.detach(e)
		if q.OnDrop != nil {
			q.OnDrop(e, ReasonDeadline, now)
		}
	}
	for e := q.escalate.peek(); e != nil && !e.escalateAt().After(now); e = q.escalate.peek() {
		q.escalate.remove(e)
		if !e.inBackoff {
			q.classes[e.queued].remove(e)
		}
		e.escalated, e.queued = true, q.cfg.EscalateTo
		if !e.inBackoff {
			q.classes[e.queued].push(e)
		}
		if q.OnEscalate != nil {
			q.OnEscalate(e, now)
		}
	}
	for e := q.backoff.peek(); e != nil && !e.readyAt.After(now); e = q.backoff.peek() {
		q.backoff.pop()
		e.inBackoff = false
		q.classes[e.queued].push(e)
	}
}

// Effective is the class a pending pod competes in at now.
func (q *Queue[T]) Effective(e *Entry[T], now time.Time) priority.Class {
	return q.cfg.Ageing.Effective(e.queued, now.Sub(e.Submitted))
}

// Peek returns the next pod without removing it, or nil when no pod is
// ready (all pending pods are in backoff, or none is pending).
func (q *Queue[T]) Peek(now time.Time) *Entry[T] {
	q.Advance(now)
	var best *Entry[T]
	var bestClass priority.Class
	for i := range q.classes {
		h := q.classes[i].peek()
		if h == nil {
			continue
		}
		c := q.Effective(h, now)
		if best == nil || c.Above(bestClass) || (c == bestClass && q.before(h, best, c)) {
			best, bestClass = h, c
		}
	}
	return best
}

// before orders two heads of effective class c: under JoinAhead aged pods
// first; then by the time each reached c (its submission unless ageing
// joins at reach), then submission order. Each per-class heap stays sorted
// by this key: within one base class an older pod is in the same or a more
// urgent effective class, and at the same class it aged exactly when a
// younger one did.
func (q *Queue[T]) before(a, b *Entry[T], c priority.Class) bool {
	if q.cfg.Ageing.Join == priority.JoinAhead {
		if aa, ba := priority.Aged(a.queued, c), priority.Aged(b.queued, c); aa != ba {
			return aa
		}
	}
	ra, rb := q.cfg.Ageing.Reached(a.queued, c, a.Submitted), q.cfg.Ageing.Reached(b.queued, c, b.Submitted)
	if !ra.Equal(rb) {
		return ra.Before(rb)
	}
	return q.classes[0].less(a, b)
}

// Pop removes and returns the next pod, or nil when none is ready. The pod
// stays known to the queue's deadline and escalation timers only until it
// is requeued or done with: call Requeue for a pod that failed, Done for one
// that was scheduled.
func (q *Queue[T]) Pop(now time.Time) *Entry[T] {
	e := q.Peek(now)
	if e == nil {
		return nil
	}
	q.detach(e)
	return e
}

// Requeue puts back a pod that Pop returned and that could not be
// scheduled: it sits out a backoff that doubles per consecutive failure,
// then competes again in its old place (its submission time is kept).
func (q *Queue[T]) Requeue(e *Entry[T], now time.Time) error {
	if _, dup := q.byKey[e.Key]; dup {
		return fmt.Errorf("queue: requeue pod %s: %w", e.Key, ErrDuplicate)
	}
	e.attempts++
	q.byKey[e.Key] = e
	if !e.Deadline.IsZero() {
		if !e.Deadline.After(now) {
			delete(q.byKey, e.Key)
			if q.OnDrop != nil {
				q.OnDrop(e, ReasonDeadline, now)
			}
			return nil
		}
		q.deadline.push(e)
	}
	if e.MaxWait > 0 && !e.escalated && q.cfg.EscalateTo.Above(e.Class) {
		q.escalate.push(e)
	}
	if b := q.backoffFor(e.attempts); b > 0 {
		e.readyAt, e.inBackoff = now.Add(b), true
		q.backoff.push(e)
		return nil
	}
	q.classes[e.queued].push(e)
	return nil
}

func (q *Queue[T]) backoffFor(attempts int) time.Duration {
	b := q.cfg.BackoffInitial
	for i := 1; i < attempts && b < q.cfg.BackoffMax; i++ {
		b *= 2
	}
	return min(b, q.cfg.BackoffMax)
}

// NextEvent is the earliest time something changes by itself (a backoff
// ends, a deadline or maximum wait passes), or zero when nothing will.
func (q *Queue[T]) NextEvent() time.Time {
	var t time.Time
	take := func(c time.Time) {
		if t.IsZero() || c.Before(t) {
			t = c
		}
	}
	if e := q.backoff.peek(); e != nil {
		take(e.readyAt)
	}
	if e := q.deadline.peek(); e != nil {
		take(e.Deadline)
	}
	if e := q.escalate.peek(); e != nil {
		take(e.escalateAt())
	}
	return t
}

// Ready counts pods not in backoff.
func (q *Queue[T]) Ready() int { return len(q.byKey) - q.backoff.Len() }

// Each calls fn for every pending pod, in no particular order.
func (q *Queue[T]) Each(fn func(e *Entry[T])) {
	for _, e := range q.byKey {
		fn(e)
	}
}

// Activate ends every backoff now: the cluster changed (a pod ended, a
// node joined or was uncordoned), so pods that failed may fit — what
// kube-scheduler does when it moves unschedulable pods back on a cluster
// event. Attempts are kept, so a pod that fails again backs off longer.
func (q *Queue[T]) Activate() {
	for e := q.backoff.pop(); e != nil; e = q.backoff.pop() {
		e.inBackoff = false
		q.classes[e.queued].push(e)
	}
}
