package kubesched

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/internal/kubesched/nodefit"
)

// constrain records a pod's node constraints under their key before the
// engine sees a request naming it: the cluster memoises the filter's
// answers per key, so the constraints must be known at the first
// question.
func (s *Scheduler) constrain(p *corev1.Pod) error {
	key := nodefit.Key(p)
	if _, ok := s.fits[key]; ok {
		return nil
	}
	c, err := nodefit.For(p)
	if err != nil {
		return err
	}
	s.fits[key] = c
	return nil
}

// nodeFits is the cluster's placement.NodeFilter: whether engine node i
// admits pods of constraint key, and their preference for it.
func (s *Scheduler) nodeFits(key string, i int) (bool, int64) {
	if i < 0 || i >= len(s.byIndex) || s.byIndex[i] == nil || s.byIndex[i].obj == nil {
		return false, 0
	}
	c := s.fits[key]
	if c == nil {
		c = s.fits[""] // never asked before constrain; refuse as for a pod without tolerations
	}
	n := s.byIndex[i].obj
	if c.Refusal(n) != "" {
		return false, 0
	}
	return true, c.Preference(n)
}

// refusal is why node n refuses pods of constraint key ("" when it admits
// them), in kube-scheduler's words.
func (s *Scheduler) refusal(key string, n *nodeEntry) string {
	c := s.fits[key]
	if c == nil {
		c = s.fits[""]
	}
	if n.obj == nil {
		return ""
	}
	return c.Refusal(n.obj)
}

// constraintsChanged reports whether a node update changed what nodefit
// reads: labels, taints, cordon.
func constraintsChanged(old, n *corev1.Node) bool {
	if old == nil {
		return true
	}
	return old.Spec.Unschedulable != n.Spec.Unschedulable || !maps.Equal(old.Labels, n.Labels) ||
		!slices.EqualFunc(old.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value })
}
