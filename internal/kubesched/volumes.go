package kubesched

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/tessera-gpu/tessera/internal/kubesched/volumes"
)

// PersistentVolumeClaims (internal/kubesched/volumes) in the scheduling
// loop. A pod with claims gets a constraint key carrying them, so the
// cluster's memoised node answers are per claim set; every answer of such a
// key is forgotten when a claim, volume or class changes, or when volumes
// are chosen for a pod (they are then no longer offered to others), and
// waiting pods are tried again. The engine's placement is checked once more
// against the volumes (a placement made in the same cycle may have taken
// them: volumesTaken); the chosen volumes are bound before the pod, off the
// loop (bind.Job.PreBind), and a failure rolls the placement back.

// volumeRefusal is why node n refuses pods of constraint key by their
// claims (nil when it admits them or they have none).
func (s *Scheduler) volumeRefusal(key string, n *nodeEntry) []string {
	f := s.fitOf(key)
	if f.volumes == nil || n.obj == nil {
		return nil
	}
	return s.volumes.NodeRefusal(f.volumes, n.obj)
}

// refilterVolumes forgets the memoised answers of every key with claims;
// wake tries waiting pods again.
func (s *Scheduler) refilterVolumes(wake bool) {
	if s.cluster == nil {
		return
	}
	found := false
	for key, f := range s.fits {
		if f.volumes != nil {
			s.cluster.RefilterConstraint(key)
			found = true
		}
	}
	if found && wake {
		s.eng.ClusterChanged()
	}
}

// volumesTaken chooses the volumes of a pod the engine just placed on n
// and holds them for it. When n no longer admits the pod by its claims (a
// pod placed earlier in the cycle took the volume it was offered), the
// placement is released and the pod queued again at once, as portsTaken
// does.
func (s *Scheduler) volumesTaken(e *podEntry, n *nodeEntry) bool {
	s.forgetVolumes(e)
	f := s.fitOf(e.pod.Request.NodeConstraint)
	if f.volumes == nil || n.obj == nil {
		return false
	}
	plan, refused := s.volumes.Assume(e.key, f.volumes, n.obj)
	if len(refused) > 0 {
		s.log.Info("volumes taken meanwhile; queued again", "pod", e.key, "node", n.name, "why", refused)
		_ = s.eng.Complete(e.key)
		e.phase, e.node, e.uuids = pending, "", nil
		if err := s.eng.Submit(s.alone(e.pod)); err != nil {
			s.log.Warn("requeue failed", "pod", e.key, "err", err)
		}
		s.refilterVolumes(false)
		return true
	}
	e.volumes = plan
	if plan != nil {
		s.refilterVolumes(false)
	}
	return false
}

// forgetVolumes releases the volumes held for e's placement.
func (s *Scheduler) forgetVolumes(e *podEntry) {
	if e.volumes != nil {
		s.volumes.Forget(e.volumes)
		e.volumes = nil
		s.refilterVolumes(true)
	}
}

// sweepVolumes drops volumes held for pods that no longer hold a placement
// (gone, or queued again by a rebuild).
func (s *Scheduler) sweepVolumes() {
	if s.volumes.Assumed() == 0 {
		return
	}
	keep := func(owner string) bool {
		e := s.podState[owner]
		return e != nil && (e.phase == assumed || e.phase == nominated || e.phase == bound)
	}
	if s.volumes.Sweep(keep) {
		s.refilterVolumes(true)
	}
}

// preBind is the step that binds e's volumes before its Binding; nil when
// none need binding.
func (s *Scheduler) preBind(e *podEntry) func(context.Context) error {
	plan := e.volumes
	if plan == nil {
		return nil
	}
	ns, name := splitRef(e.key)
	uid, pods, client := e.uid, s.pods, s.client
	w := volumes.Wait{Timeout: s.cfg.VolumeBindTimeout.Duration, PodGone: func() bool {
		p, err := pods.Pods(ns).Get(name)
		return apierrors.IsNotFound(err) || (err == nil && p.UID != uid)
	}}
	return func(ctx context.Context) error { return plan.Bind(ctx, client, w) }
}
