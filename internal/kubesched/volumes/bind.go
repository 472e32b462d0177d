package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/storage/volume"
)

// Wait bounds Plan.Bind's wait for the PV controller.
type Wait struct {
	// Timeout: how long the claims may take to be bound.
	Timeout time.Duration
	// Poll: how often the caches are read meanwhile.
	Poll time.Duration
	// PodGone reports that the pod went (its bind is then pointless); nil
	// never.
	PodGone func() bool
}

// ErrTimeout is wrapped by Bind's error when the claims were not bound in
// time.
var ErrTimeout = errors.New("timed out waiting for the PV controller")

// Bind writes the plan to the API server (each chosen volume's claimRef, as
// kube-scheduler's binder sets it; each provisioned claim's selected node)
// and waits until the PV controller has bound every claim. It reads the
// informers' caches only (never the assumptions) and may run on any
// goroutine. An error means the pod must not be bound: the caller releases
// the placement and queues the pod again.
func (p *Plan) Bind(ctx context.Context, client kubernetes.Interface, w Wait) error {
	// The loop keeps reading p (Forget): work on a copy.
	q := *p
	q.Static, q.Provision = slices.Clone(p.Static), slices.Clone(p.Provision)
	return q.bind(ctx, client, w)
}

func (p *Plan) bind(ctx context.Context, client kubernetes.Interface, w Wait) error {
	for i := range p.Static {
		s := &p.Static[i]
		if !s.write {
			continue
		}
		pv, err := client.CoreV1().PersistentVolumes().Update(ctx, s.PV, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("binding volumes: persistentvolume %q to claim %s/%s: %w", s.PV.Name, s.PVC.Namespace, s.PVC.Name, err)
		}
		s.PV = pv // the version to wait past
	}
	for i := range p.Provision {
		v := &p.Provision[i]
		if !v.write {
			continue
		}
		pvc, err := client.CoreV1().PersistentVolumeClaims(v.PVC.Namespace).Update(ctx, v.PVC, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("binding volumes: selecting node %s for persistentvolumeclaim %s/%s: %w", p.Node, v.PVC.Namespace, v.PVC.Name, err)
		}
		v.PVC = pvc
	}
	poll := w.Poll
	if poll <= 0 {
		poll = time.Second
	}
	deadline := time.NewTimer(w.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		done, waiting, err := p.check()
		if err != nil {
			return fmt.Errorf("binding volumes: %w", err)
		}
		if done {
			return nil
		}
		if w.PodGone != nil && w.PodGone() {
			return errors.New("binding volumes: the pod does not exist any more")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("binding volumes: %w", ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("binding volumes: persistentvolumeclaim(s) %s not bound within %s: %w", strings.Join(waiting, ", "), w.Timeout, ErrTimeout)
		case <-tick.C:
		}
	}
}

// check is kube-scheduler's checkBindings over the caches: whether every
// claim of the plan is bound, which are not yet, or why binding failed (a
// claimRef the PV controller dropped, a provisioning it gave up, a volume
// whose node affinity does not admit the node).
func (p *Plan) check() (bool, []string, error) {
	var waiting []string
	for _, s := range p.Static {
		pv, err := p.b.volumes.Get(s.PV.Name)
		if err != nil {
			return false, nil, fmt.Errorf("failed to check binding: %w", err)
		}
		pvc, err := p.b.claims.PersistentVolumeClaims(s.PVC.Namespace).Get(s.PVC.Name)
		if err != nil {
			return false, nil, fmt.Errorf("failed to check binding: %w", err)
		}
		key := s.PVC.Namespace + "/" + s.PVC.Name
		if older(pv, s.PV) {
			waiting = append(waiting, key) // our write has not reached the cache yet
			continue
		}
		if err := volume.CheckNodeAffinity(pv, p.labels); err != nil {
			return false, nil, fmt.Errorf("pv %q node affinity doesn't match node %q: %w", pv.Name, p.Node, err)
		}
		if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
			return false, nil, fmt.Errorf("ClaimRef got reset for pv %q", pv.Name)
		}
		if !FullyBound(pvc) {
			waiting = append(waiting, key)
		}
	}
	for _, v := range p.Provision {
		key := v.PVC.Namespace + "/" + v.PVC.Name
		pvc, err := p.b.claims.PersistentVolumeClaims(v.PVC.Namespace).Get(v.PVC.Name)
		if err != nil {
			return false, nil, fmt.Errorf("failed to check provisioning pvc: %w", err)
		}
		if older(pvc, v.PVC) {
			waiting = append(waiting, key)
			continue
		}
		if pvc.Annotations[volume.AnnSelectedNode] != p.Node {
			// The provisioner removes the annotation when it cannot
			// provision there: choose again.
			return false, nil, fmt.Errorf("provisioning failed for PVC %q", pvc.Name)
		}
		if pvc.Spec.VolumeName != "" {
			pv, err := p.b.volumes.Get(pvc.Spec.VolumeName)
			if apierrors.IsNotFound(err) {
				waiting = append(waiting, key) // not in the cache yet
				continue
			}
			if err != nil {
				return false, nil, fmt.Errorf("failed to get pv %q from cache: %w", pvc.Spec.VolumeName, err)
			}
			if err := volume.CheckNodeAffinity(pv, p.labels); err != nil {
				return false, nil, fmt.Errorf("pv %q node affinity doesn't match node %q: %w", pv.Name, p.Node, err)
			}
		}
		if !FullyBound(pvc) {
			waiting = append(waiting, key)
		}
	}
	return len(waiting) == 0, waiting, nil
}

// older reports whether the cached object is older than the one written.
func older(cached, written metav1.Object) bool {
	c, err := resourceversion.CompareResourceVersion(cached.GetResourceVersion(), written.GetResourceVersion())
	return err == nil && c < 0
}

// Claims names the plan's claims (for messages).
func (p *Plan) Claims() []string {
	var out []string
	for _, s := range p.Static {
		out = append(out, s.PVC.Namespace+"/"+s.PVC.Name)
	}
	for _, v := range p.Provision {
		out = append(out, v.PVC.Namespace+"/"+v.PVC.Name)
	}
	return out
}
