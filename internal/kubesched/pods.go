package kubesched

import (
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/bind"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/kubesched/volumes"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// podPhase is where a pod stands as the loop sees it.
type podPhase int

const (
	pending   podPhase = iota // ours, unbound, in the engine's queue
	assumed                   // placed by the engine, bind in flight
	nominated                 // placed after a preemption, waiting for its victims to go
	bound                     // bound (ours or not), booked in the engine
	evicting                  // a victim: released in the engine, still on its node
	refused                   // ours, but its spec or annotations cannot be scheduled
	held                      // ours, dropped by the engine or waiting to be retried after a failed bind
	elsewhere                 // bound to a node that is not a GPU node we know
)

// podEntry is the loop's record of one pod.
type podEntry struct {
	key   string
	uid   types.UID
	phase podPhase
	pod   *engine.Pod
	shape translate.Shape
	// node and uuids are a placement promised but not bound (assumed,
	// nominated): what a rebuild re-reserves.
	node  string
	uuids []string
	// victims (nominated) the pod waits for; preemptor (evicting) is the
	// pod a victim makes room for.
	victims   map[string]bool
	preemptor string
	// reclaimFor (evicting) is the owner a borrower gives its memory back to.
	reclaimFor string
	// held: when to submit again and how often binds failed.
	retryAt  time.Time
	failures int
	// counted: its successful bind is in the metrics (the bind's outcome
	// and the informer's update come in either order).
	counted bool
	// reported is the last FailedScheduling message and when.
	reported   string
	reportedAt time.Time
	refusedRV  string // resourceVersion whose spec was refused
	// volumes (assumed, nominated) are the volumes chosen for its claims on
	// node, bound before the pod (volumes.go); nil when none need binding.
	volumes *volumes.Plan
	// preBinding (assumed) is the bind job whose PreBind is binding
	// volumes for this placement: only its outcome may send the Binding.
	preBinding *bind.Job
	created    time.Time
}

// syncPod brings the engine in line with the cached pod.
func (s *Scheduler) syncPod(key string) {
	p := s.podFor(key)
	e := s.podState[key]
	if p == nil || (e != nil && e.uid != p.UID) {
		if e != nil {
			s.forget(e)
		}
		if p == nil {
			return
		}
		e = nil
	}
	if e != nil {
		s.relabelled(p, e)
	}
	if p.Spec.NodeName != "" {
		s.syncBound(p, e)
		return
	}
	if !s.ours(p) {
		return
	}
	if e == nil {
		s.admitPending(p)
		return
	}
	if e.phase == refused && p.ResourceVersion != e.refusedRV {
		delete(s.podState, key) // annotations changed: read it again
		s.admitPending(p)
	}
}

// forget drops a pod that is gone (or replaced under its name): what it
// held is released, a preemptor waiting for it learns it went.
func (s *Scheduler) forget(e *podEntry) {
	delete(s.podState, e.key)
	s.releaseVolumes(e) // its claims are free for others (ReadWriteOncePod)
	switch e.phase {
	case pending:
		s.eng.Delete(e.key)
	case assumed, nominated, bound:
		if _, ok := s.eng.Running(e.key); ok {
			_ = s.eng.Complete(e.key)
			s.eng.ClusterChanged() // pods backing off may fit now
		}
		// Victims still terminating hold their capacity again: the
		// preemptor that held it for them is gone.
		for v := range e.victims {
			ve := s.podState[v]
			if ve == nil || ve.preemptor != e.key || ve.phase != evicting {
				continue
			}
			delete(s.podState, v)
			if p := s.podFor(v); p != nil && p.UID == ve.uid && p.Spec.NodeName != "" {
				s.adoptBound(p)
			}
		}
	case evicting:
		s.victimGone(e)
	case elsewhere:
		s.refilterPods(s.affinity.Unplace(e.key))
	}
	delete(s.descs, e.key)
	s.collectKeys()
}

// syncBound books a pod that runs on a node.
func (s *Scheduler) syncBound(p *corev1.Pod, e *podEntry) {
	if e != nil {
		switch e.phase {
		case bound, elsewhere, evicting:
			return
		case assumed:
			if p.Spec.NodeName == e.node {
				e.phase, e.node, e.uuids = bound, "", nil
				return
			}
			_ = s.eng.Complete(e.key) // someone else bound it elsewhere: theirs wins
		case nominated:
			_ = s.eng.Complete(e.key)
		case pending:
			s.eng.Delete(e.key)
		}
		delete(s.podState, e.key)
	}
	s.adoptBound(p)
}

// adoptBound books a bound pod in the engine from its annotations.
func (s *Scheduler) adoptBound(p *corev1.Pod) {
	key := translate.Key(p)
	n := s.nodeState[p.Spec.NodeName]
	e := &podEntry{key: key, uid: p.UID, phase: bound, created: p.CreationTimestamp.Time}
	s.podState[key] = e
	if n == nil || n.index < 0 {
		e.phase = elsewhere
		if d, err := s.describe(p); err == nil {
			// Not on a node tessera places on, but in a topology domain
			// (a zone) that may hold some.
			s.refilterPods(s.affinity.Place(d, p.Spec.NodeName))
		}
		return
	}
	ep, sh := s.boundEnginePod(p)
	e.pod, e.shape = ep, sh
	rec, known := translate.BoundDecision(p, &ep.Request, sh, n.inv, &s.cluster.Nodes[n.index], n.index)
	for _, err := range rec.Problems {
		s.warnPod(p, "TesseraAnnotationUnusable", err.Error())
	}
	if !known {
		if d, ok := s.sched.ScheduleOn(n.index, &ep.Request); ok {
			rec.Decision = d
			s.warnPod(p, "TesseraAnnotationUnusable", "neither "+annv1.AllocatedKey+" nor "+annv1.AssignmentKey+" says which GPUs this pod holds; counted on GPUs the scheduler chose")
		}
	}
	if err := s.eng.Adopt(ep, rec.Decision, p.CreationTimestamp.Time); err != nil {
		s.conflict(p, n, err)
		e.phase = elsewhere
		if d := s.descs[key]; d != nil {
			s.refilterPods(s.affinity.Place(d, p.Spec.NodeName)) // it runs there all the same
		}
	}
}

// adoptBorrower books a bound borrower: its record's owners lend again what its
// GPUs lack. A record that cannot be used, or owners that no longer cover it,
// leave the ordinary adoption (which reports a pod that does not fit).
func (s *Scheduler) adoptBorrower(p *corev1.Pod) {
	owners, _, err := borrowedOwners(p)
	n := s.nodeState[p.Spec.NodeName]
	if err != nil || n == nil || n.index < 0 {
		if err != nil {
			s.warnPod(p, "TesseraAnnotationUnusable", err.Error())
		}
		s.adoptBound(p)
		return
	}
	ep, sh := s.boundEnginePod(p)
	rec, known := translate.BoundDecision(p, &ep.Request, sh, n.inv, &s.cluster.Nodes[n.index], n.index)
	if !known || len(rec.Problems) > 0 {
		s.adoptBound(p)
		return
	}
	if err := s.eng.AdoptBorrower(ep, rec.Decision, p.CreationTimestamp.Time, owners); err != nil {
		s.log.Warn("borrower not adopted on its loans", "pod", translate.Key(p), "err", err)
		s.adoptBound(p)
		return
	}
	s.podState[translate.Key(p)] = &podEntry{key: translate.Key(p), uid: p.UID, phase: bound, created: p.CreationTimestamp.Time, pod: ep, shape: sh}
}

// boundEnginePod is a bound pod as the engine sees it. A pod of another
// scheduler is never a preemption victim; a pod whose spec cannot be read
// as a request still counts its CPU and memory.
func (s *Scheduler) boundEnginePod(p *corev1.Pod) (*engine.Pod, translate.Shape) {
	key, err := s.constrain(p)
	if err != nil {
		s.warnPod(p, "TesseraRequestUnreadable", err.Error())
		p = p.DeepCopy() // counted as a pod without constraints: it is bound already
		p.Spec.NodeSelector, p.Spec.Affinity, p.Spec.Tolerations, p.Spec.TopologySpreadConstraints = nil, nil, nil, nil
		key, _ = s.constrain(p)
	}
	if q, ignored := withoutUnreadableTiming(p); ignored != "" {
		s.warnPod(p, "TesseraRequestUnreadable", ignored+"; ignored: the pod is bound")
		p = q
	}
	ep, sh, err := translate.EnginePod(p, s.engineCfg, s.memUnit())
	if err != nil {
		req, sh2, rerr := translate.PodRequest(p, s.memUnit())
		if rerr != nil {
			req = placement.Request{Name: translate.Key(p)}
			req.CPUMilli, req.MemMiB = 0, 0
			s.warnPod(p, "TesseraRequestUnreadable", rerr.Error()+"; its GPU use is not counted")
		}
		ep, sh = &engine.Pod{Key: translate.Key(p), Request: req, Class: priority.P0, Submitted: p.CreationTimestamp.Time}, sh2
	}
	if !s.ours(p) {
		ep.Preemptible = false
	}
	ep.Request.NodeConstraint = key
	return ep, sh
}

// withoutUnreadableTiming is p without a tessera.io/deadline or
// tessera.io/checkpoint-interval it cannot read, and why ("" and p itself
// when both read): a bound pod's deadline no longer matters, and its
// checkpoint interval only orders victims, so neither may make it a pod
// whose spec is unreadable (booked as P0, outside its queue, never a
// victim).
func withoutUnreadableTiming(p *corev1.Pod) (*corev1.Pod, string) {
	var why []string
	var drop []string
	if v, ok := p.Annotations[translate.DeadlineAnnotation]; ok {
		if _, err := translate.Deadline(v, p.CreationTimestamp.Time); err != nil {
			why, drop = append(why, err.Error()), append(drop, translate.DeadlineAnnotation)
		}
	}
	if v, ok := p.Annotations[translate.CheckpointAnnotation]; ok {
		if _, err := translate.CheckpointInterval(v); err != nil {
			why, drop = append(why, err.Error()), append(drop, translate.CheckpointAnnotation)
		}
	}
	if len(drop) == 0 {
		return p, ""
	}
	q := p.DeepCopy()
	for _, k := range drop {
		delete(q.Annotations, k)
	}
	return q, strings.Join(why, "; ")
}

// conflict reports a bound pod whose recorded GPUs do not fit beside the
// others on its node: the node's inventory lies or another writer double
// booked it. The node is cordoned for tessera until it is consistent
// again (a rebuild after the pods change); nothing else stops.
func (s *Scheduler) conflict(p *corev1.Pod, n *nodeEntry, err error) {
	s.metrics.OversubscribedFix.Inc()
	msg := "pod " + translate.Key(p) + " does not fit beside the pods already booked on node " + n.name + " (" + err.Error() + "); tessera places nothing more there until it does"
	s.log.Warn("conflicting placement", "pod", translate.Key(p), "node", n.name, "err", err)
	s.warnPod(p, "TesseraConflictingPlacement", msg)
	if n.obj != nil {
		s.recorder.Event(n.obj, corev1.EventTypeWarning, "TesseraConflictingPlacement", msg)
	}
	n.conflicts++
	s.cluster.Cordon(n.index, true)
}

// admitPending queues one of our unbound pods, or says why it cannot be.
func (s *Scheduler) admitPending(p *corev1.Pod) {
	key := translate.Key(p)
	e := &podEntry{key: key, uid: p.UID, phase: pending, created: p.CreationTimestamp.Time}
	s.podState[key] = e
	if raw, ok := p.Annotations[annv1.AssignmentKey]; ok {
		if _, err := annv1.ParseAssignment(raw); err != nil {
			s.warnPod(p, "TesseraAnnotationIgnored", err.Error()+"; the scheduler writes its own at bind")
		}
	}
	key, err := s.constrain(p)
	var ep *engine.Pod
	var sh translate.Shape
	if err == nil {
		ep, sh, err = translate.EnginePod(p, s.engineCfg, s.memUnit())
	}
	if err == nil {
		ep.Request.NodeConstraint = key
		e.pod, e.shape = ep, sh
		err = s.eng.Submit(s.alone(ep))
	}
	if err != nil {
		if errors.Is(err, engine.ErrKnown) {
			return
		}
		e.phase, e.refusedRV = refused, p.ResourceVersion
		s.metrics.InvalidPods.Inc()
		s.log.Warn("pod refused", "pod", key, "err", err)
		s.recorder.Event(p, corev1.EventTypeWarning, "FailedScheduling", err.Error())
		s.condition(e, "SchedulerError", err.Error())
	}
}

// warnPod posts a Warning event on a pod and logs it.
func (s *Scheduler) warnPod(p *corev1.Pod, reason, msg string) {
	s.log.Warn(msg, "pod", translate.Key(p), "reason", reason)
	s.recorder.Event(p, corev1.EventTypeWarning, reason, msg)
}
