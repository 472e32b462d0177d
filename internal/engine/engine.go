package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/preempt"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/queue"
)

// Config tunes the engine.
type Config struct {
	Queue queue.Config
	// ReserveAfter is the wait after which a pod that does not fit gets a
	// capacity reservation (0: never); MaxReservations bounds how many
	// exist at once.
	ReserveAfter    time.Duration
	MaxReservations int
	// Preemption lets a pod that fits nowhere evict less urgent ones.
	Preemption bool
	// GangTimeout releases a pod group not complete this long after its
	// first member arrived (0: 5 minutes).
	GangTimeout time.Duration
	// Cooldown protects a pod evicted once from being evicted again for
	// this long, so a long training job is not killed over and over.
	Cooldown time.Duration
	// PreemptionSearches bounds the victim searches per cycle (0: no
	// bound). A search visits every node; on a full cluster with a long
	// queue most fail, and the queue order already gives the searches to
	// the most urgent pods first.
	PreemptionSearches int
	// RequeuePreempted puts evicted pods back in the queue in their old
	// place (the simulator); the Kubernetes side deletes them instead and
	// their controller submits new ones.
	RequeuePreempted bool
	// ProtectAged: a pod that starts while ageing (or escalation) has
	// raised it above its class runs at the class it reached — only a more
	// urgent class may preempt it. Otherwise the classes it overtook evict
	// it as soon as its minimum run time is over and the wait that earned
	// it the start is thrown away with the work (docs/scheduler.md).
	ProtectAged bool
}

// Validate rejects settings the engine cannot run with.
func (c Config) Validate() error {
	if err := c.Queue.Validate(); err != nil {
		return err
	}
	if c.ReserveAfter < 0 || c.MaxReservations < 0 || c.Cooldown < 0 {
		return fmt.Errorf("engine: reserveAfter %v, maxReservations %d, cooldown %v: none may be negative", c.ReserveAfter, c.MaxReservations, c.Cooldown)
	}
	return nil
}

// Engine runs scheduling cycles over one cluster.
type Engine struct {
	cfg     Config
	cluster *placement.Cluster
	sched   *placement.Scheduler
	q       *queue.Queue[*Pod]
	admit   Admission
	placer  *placer
	res     *reservations
	running map[string]*Running
	onNode  [][]*Running
	events  []Event
	// preemptible counts running preemptible pods per class; noPlan
	// remembers shapes no victim set makes room for (preemption.go).
	preemptible [priority.NumClasses]int
	// preemptibleMilli is, per node and class, the GPU compute preemptible
	// pods hold: a node whose free compute plus that of the classes a pod
	// may evict is too small is skipped without looking at its pods.
	preemptibleMilli [][priority.NumClasses]int64
	noPlan           map[planKey]planStamp
	exhausted        *exhaustion
	searches         int // victim searches in this cycle
	preemptor        *preempt.Preemptor
	gangs            *gangs
	candBuf          []preempt.Running
	// balloons: owners' floors and borrowers' loans (balloon.go).
	balloons balloonState
	// onPlacement hears every pod that starts or stops holding a placement.
	onPlacement func(p *Pod, node int, placed bool)
	// onTrial hears gang members placed on trial while their group is
	// reserved, and taken back.
	onTrial func(p *Pod, node int, held bool)
}

// OnPlacement sets fn to be told, at once, of every pod that starts
// holding a placement (placed, adopted, started with its group) and every
// one that stops (completed, preempted): rules that read which pods run
// where (inter-pod affinity) then see a pod placed earlier in the same
// cycle.
func (e *Engine) OnPlacement(fn func(p *Pod, node int, placed bool)) { e.onPlacement = fn }

// OnTrial sets fn to be told, at once, of every gang member placed on
// trial while its group is reserved (held) and of every trial taken back
// (the group did not fit whole, timed out, or lost the member): a node
// filter that reads which pods run where (inter-pod anti-affinity, affinity,
// topology spread) must count a member before the next one is placed, or a
// "one worker per node" group could stack its members. A trial that is
// kept is then heard again by OnPlacement, when the member starts where it
// was held; one taken back never is.
func (e *Engine) OnTrial(fn func(p *Pod, node int, held bool)) { e.onTrial = fn }

// memberHeld passes the gang tracker's trials to OnTrial's listener.
func (e *Engine) memberHeld(group, key string, d placement.Decision, held bool) {
	if e.onTrial == nil {
		return
	}
	p := e.gangs.pending[group][key]
	if p == nil && !held {
		p = &Pod{Key: key} // forgotten before its capacity went back (a missed deadline): the key is what goes
	}
	if p != nil {
		e.onTrial(p, d.Node, held)
	}
}

// New builds an engine over the scheduler's cluster. admit may be nil (no
// quotas).
func New(cfg Config, s *placement.Scheduler, admit Admission) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q, err := queue.New[*Pod](cfg.Queue)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, cluster: s.Cluster(), sched: s, q: q, admit: admit,
		placer: newPlacer(s), res: newReservations(cfg.ReserveAfter, cfg.MaxReservations),
		running: map[string]*Running{}, noPlan: map[planKey]planStamp{}, exhausted: newExhaustion(), onNode: make([][]*Running, len(s.Cluster().Nodes)),
		preemptibleMilli: make([][priority.NumClasses]int64, len(s.Cluster().Nodes))}
	// Pods opt out of preemption one by one (Pod.Preemptible); the class
	// policy lets every class be a victim of a more urgent one.
	timeout := cfg.GangTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	e.gangs = newGangs(s, timeout)
	e.gangs.tracker.OnMember(e.memberHeld)
	e.preemptor = preempt.New(s, preempt.Policy{Cooldown: cfg.Cooldown, Preemptible: []bool{true, true, true, true}})
	s.Cluster().Watch(func(int) {}, func(n int) {
		for len(e.onNode) < n {
			e.onNode = append(e.onNode, nil)
			e.preemptibleMilli = append(e.preemptibleMilli, [priority.NumClasses]int64{})
		}
	})
	q.OnDrop = func(en *queue.Entry[*Pod], why queue.Reason, now time.Time) {
		e.dropReservation(en.Key)
		e.exhausted.pendingDel(e.keyOf(en.Pod), e.placer.gen)
		ev := Event{Kind: Dropped, Time: now, Pod: en.Pod, Reason: string(why)}
		if why == queue.ReasonDeadline {
			ev.Deadline = en.Pod.Deadline
		}
		e.emit(ev)
	}
	q.OnEscalate = func(en *queue.Entry[*Pod], now time.Time) {
		e.emit(Event{Kind: Escalated, Time: now, Pod: en.Pod})
	}
	return e, nil
}

// ErrKnown is returned for a pod key the engine already holds.
var ErrKnown = errors.New("pod is already pending or running")

// Submit queues a pod. Its request is checked here, so a bad pod is refused
// with the reason and nothing else is affected.
func (e *Engine) Submit(p *Pod) error { return e.submit(p, p.Submitted) }

// Resubmit queues again, at now, a pod the engine let go (dropped with its
// timed-out group, or whose placement the caller rolled back): it keeps its
// place by submission time, but a gang member's group assembles anew from
// now — a group clock started at the members' old submission would run out
// before the group could be tried.
func (e *Engine) Resubmit(p *Pod, now time.Time) error { return e.submit(p, now) }

// submit queues p; a gang member's group counts its timeout from arrived.
func (e *Engine) submit(p *Pod, arrived time.Time) error {
	if err := p.Request.Validate(); err != nil {
		return fmt.Errorf("pod %s: %w", p.Key, err)
	}
	if _, ok := e.running[p.Key]; ok {
		return fmt.Errorf("pod %s: %w", p.Key, ErrKnown)
	}
	if _, ok := e.q.Get(p.Key); ok {
		return fmt.Errorf("pod %s: %w", p.Key, ErrKnown)
	}
	if !p.Class.Valid() {
		return fmt.Errorf("pod %s: class %v is not P0..P3", p.Key, p.Class)
	}
	if p.Gang != nil {
		return e.submitMember(p, arrived)
	}
	return e.enqueue(p)
}

// enqueue puts a pod in the queue and counts it pending.
func (e *Engine) enqueue(p *Pod) error {
	if err := e.q.Push(e.entry(p)); err != nil {
		return err
	}
	e.exhausted.pendingAdd(e.keyOf(p))
	return nil
}

func (e *Engine) entry(p *Pod) *queue.Entry[*Pod] {
	return &queue.Entry[*Pod]{Key: p.Key, Class: p.Class, Submitted: p.Submitted, Deadline: p.Deadline, MaxWait: p.MaxWait, Pod: p}
}

// Delete forgets a pending pod (deleted before it ran).
func (e *Engine) Delete(key string) bool {
	for name, m := range e.gangs.pending {
		if _, ok := m[key]; ok {
			e.dropReservation(key)
			_ = e.gangs.tracker.RemoveMember(name, key)
			delete(m, key)
			if len(m) == 0 {
				e.forgetGroup(name)
			}
			e.syncToken(name) // the group may no longer be Ready, or of its class
			return true
		}
	}
	e.dropReservation(key)
	en, ok := e.q.Get(key)
	if ok {
		e.q.Remove(key)
		e.exhausted.pendingDel(e.keyOf(en.Pod), e.placer.gen)
	}
	return ok
}

// Complete ends a running pod and frees what it held.
func (e *Engine) Complete(key string) error {
	r, ok := e.running[key]
	if !ok {
		return fmt.Errorf("complete %s: pod is not running", key)
	}
	e.stop(r)
	return nil
}

// stop releases a running pod's placement and quota.
func (e *Engine) stop(r *Running) {
	if err := e.cluster.Release(r.Decision); err != nil {
		panic("engine: a running pod's placement cannot be released: " + err.Error())
	}
	e.unbook(r)
}

// unbook forgets a running pod whose placement is already released.
func (e *Engine) unbook(r *Running) {
	if e.onPlacement != nil {
		e.onPlacement(r.Pod, r.Decision.Node, false)
	}
	if e.admit != nil {
		e.admit.Uncharge(r.Pod, r)
	}
	list := e.onNode[r.Decision.Node]
	last := len(list) - 1
	list[r.slot] = list[last]
	list[r.slot].slot = r.slot
	e.onNode[r.Decision.Node] = list[:last]
	delete(e.running, r.Pod.Key)
	if g := r.Pod.Gang; g != nil {
		e.gangs.running[g.Name] = slices.DeleteFunc(e.gangs.running[g.Name], func(x *Running) bool { return x == r })
		if len(e.gangs.running[g.Name]) == 0 {
			delete(e.gangs.running, g.Name)
		}
	}
	if r.Pod.Preemptible {
		e.preemptible[r.Class]--
		e.preemptibleMilli[r.Decision.Node][r.Class] -= grantMilli(r)
	}
	e.placer.capacityFreed()
	if e.balloons.floors != nil {
		e.returnLoans(r.Pod.Key)
		e.lenderEnded(r.Pod.Key)
		delete(e.balloons.floors, r.Pod.Key)
	}
}

// start reserves d for p and books it.
func (e *Engine) start(p *Pod, d placement.Decision, now time.Time) error {
	if err := e.cluster.Reserve(d); err != nil {
		return err
	}
	e.exhausted.pendingDel(e.keyOf(p), e.placer.gen)
	e.book(p, d, now)
	return nil
}

// book records p as running on d, already reserved on the cluster.
func (e *Engine) book(p *Pod, d placement.Decision, now time.Time) {
	r := &Running{Pod: p, Decision: d, Started: now, Class: p.Class, slot: len(e.onNode[d.Node])}
	if c := e.effective(p, now); e.cfg.ProtectAged && c.Above(p.Class) {
		r.Class = c
	}
	e.onNode[d.Node] = append(e.onNode[d.Node], r)
	e.running[p.Key] = r
	if p.Preemptible {
		e.preemptible[r.Class]++
		e.preemptibleMilli[d.Node][r.Class] += grantMilli(r)
	}
	if e.admit != nil {
		e.admit.Charge(p, r)
	}
	if p.Gang != nil {
		e.gangs.running[p.Gang.Name] = append(e.gangs.running[p.Gang.Name], r)
	}
	e.emit(Event{Kind: Placed, Time: now, Pod: p, Decision: d})
	if e.onPlacement != nil {
		e.onPlacement(p, d.Node, true)
	}
}

func (e *Engine) emit(ev Event) { e.events = append(e.events, ev) }

// Events returns what happened since the last call and forgets it.
func (e *Engine) Events() []Event {
	out := e.events
	e.events = nil
	return out
}

// Cycle tries every pod that is ready at now once, in queue order: the
// scheduling cycle of the whole queue. With quotas (FairSharing), pods that
// would borrow wait until the other pods of their effective class were
// tried, and are then tried by their queues' shares, lowest first
// (fairshare.go); Step keeps plain queue order. Pods that fail sit out
// their backoff (they are requeued after the pass, so none is tried
// twice). It returns how many pods it tried.
func (e *Engine) Cycle(now time.Time) int {
	e.q.Advance(now) // deadlines and escalations even when nothing is tried
	e.searches = 0
	e.gangClock(now)
	e.refreshReservations(now)
	var failed []*queue.Entry[*Pod]
	fair := e.fairSharing()
	var later borrowers // of the class being popped
	tried := 0
	try := func(en *queue.Entry[*Pod]) {
		tried++
		if !e.attempt(en.Pod, now) {
			failed = append(failed, en)
		}
	}
	flush := func() {
		for en := later.next(e, fair, now); en != nil; en = later.next(e, fair, now) {
			try(en)
		}
	}
	for !e.exhausted.done(e.placer.gen, now) {
		en := e.q.Pop(now)
		if en == nil {
			break
		}
		if fair != nil {
			c := e.effective(en.Pod, now)
			if later.waiting() && later.class.Above(c) {
				flush() // the class's borrowers before any less urgent pod
			}
			if en.Pod.group == "" && fair.Borrows(en.Pod) {
				later.add(fair.Queue(en.Pod), en, c) // after the class's guarantees, by share
				continue
			}
		}
		try(en)
	}
	flush()
	for _, en := range failed {
		_ = e.q.Requeue(en, now) // the key left the queue with Pop: no duplicate
	}
	return tried
}

// Step tries the next ready pod, if any: pop, admit, fit, place or fail and
// requeue. It reports whether a pod was ready.
func (e *Engine) Step(now time.Time) bool {
	e.gangClock(now)
	en := e.q.Pop(now)
	if en == nil {
		return false
	}
	if !e.attempt(en.Pod, now) {
		_ = e.q.Requeue(en, now)
	}
	return true
}

// attempt runs the stages for one popped pod (or group); true when it was
// placed.
func (e *Engine) attempt(p *Pod, now time.Time) bool {
	if p.group != "" {
		return e.attemptGang(p, now)
	}
	if !e.admitted(p, now) {
		return false
	}
	if r := e.res.byPod[p.Key]; r != nil {
		// The pod's own reservation is capacity it may use.
		e.unhold(r)
		if d, ok := e.sched.Find(&p.Request); ok && e.start(p, d, now) == nil {
			e.dropReservation(p.Key)
			return true
		}
		// Still unheld: a victim search counts the reservation as room
		// the pod has (held again below if no plan is carried out).
	} else if d, ok := e.placer.find(&p.Request); ok {
		return e.start(p, d, now) == nil
	}
	if e.placeThroughReservations(p, now) {
		e.dropReservation(p.Key)
		return true
	}
	if e.placeOnBalloons(p, now) {
		e.dropReservation(p.Key)
		return true // reclaimable memory before anyone is preempted
	}
	budget := e.searches
	if e.cfg.Preemption {
		if pl, ok := e.planPreemption(p, now); ok {
			if e.preempt(p, pl, now) {
				e.dropReservation(p.Key)
				return true
			}
		}
	}
	if r := e.res.byPod[p.Key]; r != nil {
		e.hold(r)
	}
	e.reserve(p, now)
	searchSkipped := e.cfg.Preemption && e.cfg.PreemptionSearches > 0 && budget >= e.cfg.PreemptionSearches
	if e.res.byPod[p.Key] == nil && !searchSkipped {
		// A pod with a reservation is not interchangeable with others of
		// its triple (it may use capacity they may not), nor is one whose
		// victim search this cycle's budget did not allow.
		e.exhausted.fail(e.keyOf(p), e.placer.gen, now)
	}
	return false
}

func (e *Engine) admitted(p *Pod, now time.Time) bool {
	if e.admit == nil || e.admit.Admit(p, now) == nil {
		return true
	}
	e.exhausted.fail(e.keyOf(p), e.placer.gen, now)
	return false
}

// Pending is how many pods wait (a Ready group's queue entry is not a pod:
// its members are counted).
func (e *Engine) Pending() int {
	n := e.q.Len() + e.gangPending()
	for _, tok := range e.gangs.tokens {
		if _, queued := e.q.Get(tok.Key); queued {
			n--
		}
	}
	return n
}

// RunningCount is how many pods hold a placement.
func (e *Engine) RunningCount() int { return len(e.running) }

// Running returns a running pod by key.
func (e *Engine) Running(key string) (*Running, bool) {
	r, ok := e.running[key]
	return r, ok
}

// NextEvent is when the queue or a pending gang next changes by itself (a
// backoff ends, a deadline or maximum wait passes); zero when never.
func (e *Engine) NextEvent() time.Time {
	q, g := e.q.NextEvent(), e.nextGangEvent()
	if q.IsZero() || (!g.IsZero() && g.Before(q)) {
		return g
	}
	return q
}

// Reservations lists the nodes held for waiting pods, by pod key.
func (e *Engine) Reservations() map[string]int {
	out := map[string]int{}
	for _, r := range e.res.order {
		out[r.pod.Key] = r.node
	}
	return out
}

// HeldGrants lists every grant the engine holds on the cluster: running
// pods' and reservations' placeholders. A property test adds them up
// against the nodes.
func (e *Engine) HeldGrants() []placement.Decision {
	var out []placement.Decision
	for _, r := range e.running {
		out = append(out, r.Decision)
	}
	for _, r := range e.res.order {
		if r.on {
			out = append(out, r.held)
		}
	}
	slices.SortFunc(out, func(a, b placement.Decision) int { return a.Node - b.Node })
	return out
}

// EachPending calls fn for every pending pod, in no particular order.
func (e *Engine) EachPending(fn func(p *Pod)) {
	e.q.Each(func(en *queue.Entry[*Pod]) {
		if en.Pod.group == "" { // a group's entry: its members follow
			fn(en.Pod)
		}
	})
	for _, m := range e.gangs.pending {
		for _, p := range m {
			fn(p)
		}
	}
}
