package kubesched

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

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
	s.volumes.Forget(e.volumes)
	e.volumes = nil
	f := s.fitOf(e.pod.Request.NodeConstraint)
	if f.volumes == nil || n.obj == nil {
		return false
	}
	plan, refused := s.volumes.Assume(e.key, f.volumes, n.obj)
	// Volumes it took, or a ReadWriteOncePod claim it now uses, change what
	// other pods are offered.
	defer s.refilterVolumes(false)
	if len(refused) > 0 {
		s.log.Info("volumes taken meanwhile; queued again", "pod", e.key, "node", n.name, "why", refused)
		_ = s.eng.Complete(e.key)
		e.phase, e.node, e.uuids = pending, "", nil
		if err := s.eng.Submit(s.alone(e.pod)); err != nil {
			s.log.Warn("requeue failed", "pod", e.key, "err", err)
		}
		return true
	}
	e.volumes = plan
	return false
}

// claimIndex indexes the pod cache by namespace/claim for pods bound to a
// node (ReadWriteOncePod: who uses a claim).
const claimIndex = "claim"

func boundClaims(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	v := volumes.For(p)
	if v == nil {
		return nil, nil
	}
	out := make([]string, 0, len(v.Claims))
	for _, c := range v.Claims {
		out = append(out, p.Namespace+"/"+c.Name)
	}
	return out, nil
}

// claimInUse is the binder's volumes.Users: a pod bound to a node, or one
// of ours placed, being bound or just bound, mounts the claim.
func (s *Scheduler) claimInUse(ns, claim string) bool {
	if s.claimPods != nil {
		if objs, _ := s.claimPods.ByIndex(claimIndex, ns+"/"+claim); len(objs) > 0 {
			return true
		}
	}
	for _, e := range s.podState {
		// bound: the informer may not show the bind yet.
		if (e.phase == assumed || e.phase == nominated || e.phase == bound) && e.pod != nil {
			if f := s.fits[e.pod.Request.NodeConstraint]; f != nil && f.volumes != nil && f.volumes.Namespace == ns && f.volumes.Uses(claim) {
				return true
			}
		}
	}
	return false
}

// claimHandler marks the volumes changed when a pod with claims is bound
// or goes (a ReadWriteOncePod claim it held is free again).
func (c *changeSet) claimHandler() cache.ResourceEventHandler {
	mark := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*corev1.Pod); !ok || volumes.For(p) == nil {
			return
		}
		c.mu.Lock()
		c.volumes = true
		c.mu.Unlock()
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{DeleteFunc: mark, UpdateFunc: func(o, n any) {
		if op, ok := o.(*corev1.Pod); ok && op.Spec.NodeName == "" {
			if np, ok := n.(*corev1.Pod); ok && np.Spec.NodeName != "" {
				mark(n)
			}
		}
	}}
}

// releaseVolumes releases the volumes held for e's placement, which is
// undone or gone: what it held (volumes, a ReadWriteOncePod claim) is
// offered again and waiting pods are tried again.
func (s *Scheduler) releaseVolumes(e *podEntry) {
	s.volumes.Forget(e.volumes)
	e.volumes = nil
	if e.pod != nil && s.fitOf(e.pod.Request.NodeConstraint).volumes != nil {
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
