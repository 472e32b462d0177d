package kubesched

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/kubesched/bind"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// apply carries a cycle's decisions out. A pod placed without victims is
// assumed and bound at once; a pod placed after a preemption is nominated
// (status.nominatedNodeName) and holds the freed capacity in the engine
// while its victims are evicted with their grace period; it is bound when
// the last of them is gone.
func (s *Scheduler) apply(ctx context.Context, events []engine.Event, now time.Time) {
	victimsOf := map[string][]*podEntry{}
	for _, ev := range events {
		if ev.Kind == engine.Preempted && ev.By != nil && ev.Reason != reclaimReason {
			if v := s.podState[ev.Pod.Key]; v != nil {
				victimsOf[ev.By.Key] = append(victimsOf[ev.By.Key], v)
				// A nominated pod evicted in turn passes on the victims it
				// waited for: their capacity is what the new pod holds.
				for k := range v.victims {
					if w := s.podState[k]; w != nil && w.phase == evicting {
						victimsOf[ev.By.Key] = append(victimsOf[ev.By.Key], w)
					}
				}
			}
		}
	}
	for _, ev := range events {
		e := s.podState[ev.Pod.Key]
		if e == nil {
			continue
		}
		switch ev.Kind {
		case engine.Placed:
			s.placed(ctx, e, ev, victimsOf[ev.Pod.Key], now)
		case engine.Preempted:
			if ev.Reason == reclaimReason && ev.By != nil {
				s.reclaim(ctx, e, ev.By.Key)
				continue
			}
			e.phase = evicting
			if ev.By != nil {
				e.preemptor = ev.By.Key
			}
		case engine.Dropped:
			e.phase = held
			e.retryAt = time.Time{} // never: the engine gave up on it
			s.dropped(e, ev)
		case engine.Escalated:
			s.event(e, corev1.EventTypeNormal, "Escalated", "waited past its maximum wait; now queued ahead of its class")
		case engine.Reserved:
			s.event(e, corev1.EventTypeNormal, "CapacityReserved", fmt.Sprintf("capacity on node %s is held for this pod (it waited past backfill.reserveAfter)", s.cluster.Nodes[ev.Node].Name))
		}
	}
}

func (s *Scheduler) placed(ctx context.Context, e *podEntry, ev engine.Event, victims []*podEntry, now time.Time) {
	n := s.nodeState[ev.Decision.NodeName]
	if s.portsTaken(e, n) || s.volumesTaken(e, n) {
		for _, v := range victims {
			s.victimStays(v) // released for this placement, which is undone
		}
		return
	}
	e.node, e.uuids = n.name, nil
	for _, sh := range ev.Decision.Grant.Shares {
		e.uuids = append(e.uuids, n.inv.UUIDs[sh.GPU])
	}
	s.metrics.QueueWait.WithLabelValues(className(e.pod.Class)).Observe(now.Sub(e.created).Seconds())
	if len(victims) == 0 {
		s.startBind(ctx, e)
		return
	}
	e.phase, e.victims = nominated, map[string]bool{}
	job := &bind.Job{Kind: bind.Evict, For: e.key}
	for _, v := range victims {
		e.victims[v.key] = true
		v.preemptor = e.key
		ns, name := splitRef(v.key)
		job.Victims = append(job.Victims, bind.Victim{Namespace: ns, Name: name, UID: v.uid})
	}
	ns, name := splitRef(e.key)
	s.pool.Submit(ctx, &bind.Job{Kind: bind.Patch, Namespace: ns, Name: name, SetNominated: true, Nominated: n.name})
	s.event(e, corev1.EventTypeNormal, "Preempting", fmt.Sprintf("evicting %d pod(s) on node %s to make room; the capacity is held for this pod", len(victims), n.name))
	s.pool.Submit(ctx, job)
}

// startBind writes the assignment and the node in one Binding.
func (s *Scheduler) startBind(ctx context.Context, e *podEntry) {
	e.phase = assumed
	n := s.nodeState[e.node]
	d, _ := s.eng.Running(e.key)
	ann := map[string]string{}
	if d != nil {
		mig, err := s.cluster.MIGDevices(d.Decision)
		if err != nil { // a bug: the engine granted a device the node lacks
			s.log.Error("assignment", "pod", e.key, "err", err)
			s.rollback(e, err.Error())
			return
		}
		value, err := translate.Assignment(d.Decision, e.shape, n.inv, mig)
		if err != nil { // a bug: the engine placed on a GPU the node lacks
			s.log.Error("assignment", "pod", e.key, "err", err)
			s.rollback(e, err.Error())
			return
		}
		if value != "" {
			ann[annv1.AssignmentKey] = value
		}
		if loans := s.eng.Loans(e.key); len(loans) > 0 {
			rec, err := s.borrowedRecord(loans, n.inv)
			if err != nil { // a bug: a loan on a GPU the node lacks
				s.log.Error("borrowed record", "pod", e.key, "err", err)
				s.rollback(e, err.Error())
				return
			}
			if rec != "" {
				ann[annv1.BorrowedKey] = rec
				s.metrics.BalloonBorrowers.Inc()
			}
		}
	}
	ns, name := splitRef(e.key)
	job := &bind.Job{Kind: bind.Bind, Namespace: ns, Name: name, UID: e.uid, Node: e.node, Annotations: ann, PreBind: s.preBind(e)}
	e.preBinding = nil
	if job.PreBind != nil {
		e.preBinding = job
	}
	s.pool.Submit(ctx, job)
}

// outcome applies what the API server said to a job.
func (s *Scheduler) outcome(o bind.Outcome) {
	j := o.Job
	switch j.Kind {
	case bind.Bind:
		s.bindOutcome(o)
	case bind.Evict:
		s.evictOutcome(o)
	case bind.Patch:
		if o.Err != nil {
			s.log.Warn("status patch failed", "pod", j.Key(), "err", o.Err)
		}
	}
}

func (s *Scheduler) bindOutcome(o bind.Outcome) {
	e := s.podState[o.Job.Key()]
	if o.PreBound || o.PreBindFailed {
		if e == nil || e.uid != o.Job.UID || e.phase != assumed || e.preBinding != o.Job {
			// The placement whose volumes it bound was undone meanwhile
			// (the pod went, a rebuild queued it again): no Binding for it.
			return
		}
		e.preBinding = nil
		if o.PreBound {
			e.volumes = nil // bound: a retried bind has none to bind again
			next := *o.Job
			next.PreBind = nil
			s.pool.Submit(context.Background(), &next)
			return
		}
	}
	if !o.PreBindFailed {
		// Bind calls only: a failed pre-bind waited (up to
		// volumeBindTimeout) for the PV controller, not for the API server.
		s.metrics.BindLatency.Observe(o.Took.Seconds())
	}
	if e == nil || e.uid != o.Job.UID {
		return // forgotten meanwhile (deleted, or replaced under its name)
	}
	if o.Err == nil && e.phase == bound && !e.counted {
		// The informer's update came first and booked it; count it here.
		s.bound(e, o)
		return
	}
	if e.phase != assumed {
		return // a rebuild queued it again, or it was chosen as a victim
	}
	if !o.PreBindFailed && o.Job.Node == e.node {
		// The Binding was sent: its volumes were bound before it, so a
		// retried bind (a gang member's) has none to bind again.
		e.volumes = nil
	}
	switch {
	case o.Err == nil:
		e.phase = bound
		s.bound(e, o)
	case o.PreBindFailed:
		// The volumes chosen on the node were not bound: the pod is
		// placed again, and its volumes chosen again, after a backoff.
		s.metrics.BindErrors.WithLabelValues("volumes").Inc()
		s.rollback(e, `running PreBind plugin "VolumeBinding": `+o.Err.Error())
	case o.Gone:
		s.metrics.BindErrors.WithLabelValues("gone").Inc()
		_ = s.eng.Complete(e.key)
		delete(s.podState, e.key)
	case o.AlreadyOn != "":
		// Bound elsewhere by another writer: its placement stands, ours
		// is released; the informer's update books it.
		s.metrics.BindErrors.WithLabelValues("conflict").Inc()
		_ = s.eng.Complete(e.key)
		delete(s.podState, e.key)
		s.syncPod(e.key)
	case e.pod != nil && e.pod.Gang != nil && e.failures < gangBindRetries:
		s.metrics.BindErrors.WithLabelValues(reasonOf(o.Err)).Inc()
		s.holdAndRebind(e, "binding rejected: "+o.Err.Error())
	default:
		s.metrics.BindErrors.WithLabelValues(reasonOf(o.Err)).Inc()
		s.rollback(e, "binding rejected: "+o.Err.Error())
	}
}

// gangBindRetries is how often a gang member's failed bind is retried on
// the capacity held for it before its placement is rolled back.
const gangBindRetries = 4

// holdAndRebind keeps a gang member's placement (its group was placed all
// at once; releasing one member's share would let another pod take it and
// leave the group short) and sends the same bind again after a backoff.
func (s *Scheduler) holdAndRebind(e *podEntry, why string) {
	e.failures++
	e.retryAt = s.now().Add(min(time.Second<<min(e.failures-1, 6), time.Minute))
	s.rebind[e.key] = e
	s.log.Warn("gang member's bind failed; its capacity stays held", "pod", e.key, "why", why, "retry", e.retryAt)
	s.event(e, corev1.EventTypeWarning, "FailedScheduling", fmt.Sprintf("%s; pod group %s: the capacity stays held and the bind is retried (%d of %d)", why, translate.GroupName(e.pod.Gang.Name), e.failures, gangBindRetries))
}

// bound counts a successful bind once: metrics and the Scheduled event.
func (s *Scheduler) bound(e *podEntry, o bind.Outcome) {
	e.counted = true
	s.metrics.Binds.Inc()
	s.metrics.PodSchedulingE2E.Observe(s.now().Sub(e.created).Seconds())
	s.event(e, corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s to %s", e.key, o.Job.Node))
}

func reasonOf(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return "rejected"
	}
	return "error"
}

// alone is a gang member as the engine is to queue it again: a member
// whose group already has members placed (bound, binding, nominated) is
// placed by itself — the group's all-or-nothing start has happened, and
// the tracker would otherwise wait for min-member new arrivals that never
// come.
func (s *Scheduler) alone(p *engine.Pod) *engine.Pod {
	if p == nil || p.Gang == nil {
		return p
	}
	for _, o := range s.podState {
		if o.key != p.Key && o.pod != nil && o.pod.Gang != nil && o.pod.Gang.Name == p.Gang.Name && (o.phase == bound || o.phase == assumed || o.phase == nominated) {
			q := *p
			q.Gang = nil
			return &q
		}
	}
	return p
}

// rollback releases an assumed placement that did not bind and holds the
// pod out for a backoff before it is queued again (in its old place: the
// engine keeps its submission time).
func (s *Scheduler) rollback(e *podEntry, why string) {
	s.releaseVolumes(e)
	_ = s.eng.Complete(e.key)
	e.phase, e.node, e.uuids = held, "", nil
	e.failures++
	e.retryAt = s.now().Add(min(time.Second<<min(e.failures-1, 6), time.Minute))
	s.held[e.key] = e
	s.log.Warn("placement rolled back", "pod", e.key, "why", why, "retry", e.retryAt)
	s.event(e, corev1.EventTypeWarning, "FailedScheduling", why+"; the placement was rolled back and the pod is queued again")
}

// retryDue queues held pods whose backoff has passed and sends again the
// binds of gang members held for a retry.
func (s *Scheduler) retryDue() {
	now := s.now()
	for key, e := range s.rebind {
		if s.podState[key] != e || e.phase != assumed {
			delete(s.rebind, key) // gone, bound meanwhile, or requeued by a rebuild
			continue
		}
		if !now.Before(e.retryAt) {
			delete(s.rebind, key)
			s.startBind(context.Background(), e)
		}
	}
	for key, e := range s.held {
		if s.podState[key] != e || e.phase != held {
			delete(s.held, key) // gone, or queued again by a rebuild
			continue
		}
		if !now.Before(e.retryAt) {
			delete(s.held, key)
			e.retryAt = time.Time{}
			if err := s.eng.Resubmit(s.alone(e.pod), now); err != nil {
				s.log.Warn("requeue failed", "pod", e.key, "err", err)
				continue
			}
			e.phase = pending
		}
	}
}

// evictOutcome: when every victim went, the preemptor is bound as soon as
// the last one is deleted (victimGone). A refusal (429: the eviction would
// violate a PodDisruptionBudget) undoes the preemption: the preemptor's
// placement is released, victims still present are booked again, and the
// preemptor goes back to the queue after a backoff (other victims, or
// later).
func (s *Scheduler) evictOutcome(o bind.Outcome) {
	s.metrics.Preemptions.Add(float64(len(o.Evicted)))
	if o.Blocked == nil {
		// Posted on the victims as the job named them: a victim already deleted
		// (its deletion seen before this outcome) is no longer in podState.
		for _, v := range o.Evicted {
			msg := "evicted to make room for " + o.Job.For
			if o.Job.Reclaim {
				msg = "evicted to give owner " + o.Job.For + " back the GPU memory it borrowed"
			}
			s.recorder.Event(&corev1.Pod{ObjectMeta: objectMeta(v.Namespace, v.Name, v.UID)}, corev1.EventTypeNormal, "Preempted", msg)
		}
		return
	}
	s.metrics.EvictionsBlocked.Inc()
	if o.Job.Reclaim {
		if v := s.podState[o.Blocked.Namespace+"/"+o.Blocked.Name]; v != nil && v.uid == o.Blocked.UID && v.phase == evicting {
			s.reclaimBlocked(v, o.Err)
		}
		return
	}
	pre := s.podState[o.Job.For]
	msg := fmt.Sprintf("preemption stopped: %v", o.Err)
	if apierrors.IsTooManyRequests(unwrapAPI(o.Err)) {
		msg = fmt.Sprintf("preemption stopped: evicting %s/%s would violate a PodDisruptionBudget (%v)", o.Blocked.Namespace, o.Blocked.Name, o.Err)
	}
	s.log.Warn("preemption rolled back", "pod", o.Job.For, "err", o.Err)
	if pre == nil || pre.phase != nominated {
		return
	}
	victims := pre.victims
	pre.victims = nil
	s.rollback(pre, msg)
	ns, name := splitRef(pre.key)
	s.pool.Submit(context.Background(), &bind.Job{Kind: bind.Patch, Namespace: ns, Name: name, SetNominated: true, Nominated: ""})
	for key := range victims {
		s.victimStays(s.podState[key])
	}
}

// victimStays books a victim of a preemption that was stopped again
// (still there: refused, not tried, or terminating, it holds its
// capacity).
func (s *Scheduler) victimStays(v *podEntry) {
	if v == nil || v.phase != evicting {
		return
	}
	delete(s.podState, v.key)
	if p := s.podFor(v.key); p != nil && p.UID == v.uid && p.Spec.NodeName != "" {
		s.adoptBound(p)
	}
}

func unwrapAPI(err error) error {
	for err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return err
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
	return nil
}

// victimGone: a victim was deleted; its preemptor binds once none is left.
func (s *Scheduler) victimGone(v *podEntry) {
	pre := s.podState[v.preemptor]
	if pre == nil || pre.phase != nominated {
		return
	}
	delete(pre.victims, v.key)
	if len(pre.victims) == 0 {
		if _, ok := s.eng.Running(pre.key); ok {
			s.startBind(context.Background(), pre)
		}
	}
}

// event posts an event on a pod the loop knows.
func (s *Scheduler) event(e *podEntry, kind, reason, msg string) {
	if e == nil {
		return
	}
	ns, name := splitRef(e.key)
	s.recorder.Event(&corev1.Pod{ObjectMeta: objectMeta(ns, name, e.uid)}, kind, reason, msg)
}

func className(c priority.Class) string { return c.String() }

// ReasonDeadlineExceeded is the event and PodScheduled condition reason of
// a pod dropped because its deadline passed. It is not Unschedulable: a
// cluster autoscaler scales up for Unschedulable pods, and this one will
// not be placed whatever nodes are added.
const ReasonDeadlineExceeded = "DeadlineExceeded"

// dropped reports a pod the engine gave up on. The pod is not deleted: it
// belongs to its owner (a controller would only create it again); it stays
// Pending with the reason until it is deleted or recreated.
func (s *Scheduler) dropped(e *podEntry, ev engine.Event) {
	if !ev.Deadline.IsZero() {
		msg := fmt.Sprintf("deadline %s passed while the pod waited (%s); tessera will not schedule it: delete it, or create it again with a later %s",
			ev.Deadline.UTC().Format(time.RFC3339), ev.Reason, translate.DeadlineAnnotation)
		s.event(e, corev1.EventTypeWarning, ReasonDeadlineExceeded, msg)
		s.condition(e, ReasonDeadlineExceeded, msg)
		return
	}
	msg := "dropped from the queue: " + ev.Reason
	if e.pod != nil && e.pod.Gang != nil && errors.Is(ev.Err, gang.ErrTimedOut) {
		g := e.pod.Gang
		name := translate.GroupName(g.Name)
		if n := s.groupPods(e.key, name); n < g.MinMember {
			msg = fmt.Sprintf("pod-group %s: min-member %d but only %d pods exist: create the missing pods or lower %s (%s)",
				name, g.MinMember, n, gang.MinMemberAnnotation, ev.Reason)
		}
		// The group may yet assemble (its pods are still being created):
		// the member is queued again after another timeout's wait, as
		// kube-scheduler's coscheduling plugin requeues a group it let go.
		e.retryAt = s.now().Add(s.gangTimeout())
		s.held[e.key] = e
	}
	s.event(e, corev1.EventTypeWarning, "FailedScheduling", msg)
	s.condition(e, corev1.PodReasonUnschedulable, msg)
}

// groupPods counts the pods of pod group group in the namespace of the pod
// named key that exist (not terminated, not being deleted), whichever
// scheduler they name: the group's size, which no annotation states.
func (s *Scheduler) groupPods(key, group string) int {
	ns, _ := splitRef(key)
	pods, err := s.pods.Pods(ns).List(labels.Everything())
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods {
		if p.Annotations[gang.GroupAnnotation] == group && p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n
}

// gangTimeout is how long a pod group may assemble (gang.timeout).
func (s *Scheduler) gangTimeout() time.Duration {
	if d := s.engineCfg.Gang.Timeout.Duration; d > 0 {
		return d
	}
	return 5 * time.Minute
}
