package kubesched

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/internal/kubesched/interpod"
	"github.com/tessera-gpu/tessera/internal/kubesched/nodefit"
)

// fit is what decides where pods of one constraint key may run: their
// node constraints, and (pods nil for pods that need none) the inter-pod
// rules that read the pods placed around them.
type fit struct {
	node *nodefit.Constraints
	pods *interpod.Pod
}

// constrain records a pod's constraints under their key before the engine
// sees a request naming it (the cluster memoises the filter's answers per
// key, so they must be known at the first question) and returns the key.
// A pod that carries inter-pod terms, or that another pod's terms select,
// gets a key of its own namespace, labels and terms; every other pod keeps
// its node constraints' key and pays nothing for inter-pod rules.
func (s *Scheduler) constrain(p *corev1.Pod) (string, error) {
	d, err := s.describe(p)
	if err != nil {
		return "", err
	}
	key := nodefit.Key(p)
	withPods := d.HasTerms() || s.affinity.Targeted(d)
	if withPods {
		key = podsKey(key, p)
	}
	if _, ok := s.fits[key]; ok {
		return key, nil
	}
	c, err := nodefit.For(p)
	if err != nil {
		return "", err
	}
	f := &fit{node: c}
	if withPods {
		f.pods = d
		s.affinity.Want(key, d, c)
	}
	s.fits[key] = f
	return key, nil
}

// fitOf is the fit of constraint key (a key never constrained is refused
// as a pod without tolerations would be).
func (s *Scheduler) fitOf(key string) *fit {
	if f := s.fits[key]; f != nil {
		return f
	}
	return s.fits[""]
}

// nodeFits is the cluster's placement.NodeFilter: whether engine node i
// admits pods of constraint key, and their preference for it.
func (s *Scheduler) nodeFits(key string, i int) (bool, int64) {
	if i < 0 || i >= len(s.byIndex) || s.byIndex[i] == nil || s.byIndex[i].obj == nil {
		return false, 0
	}
	f := s.fitOf(key)
	n := s.byIndex[i].obj
	if f.node.Refusal(n) != "" {
		return false, 0
	}
	pref := f.node.Preference(n)
	if st := s.podsState(f, key); st != nil {
		if st.Refusal(n) != "" {
			return false, 0
		}
		pref += st.Preference(n)
	}
	return true, pref
}

// refusal is why node n refuses pods of constraint key by their node
// constraints ("" when it admits them), in kube-scheduler's words.
func (s *Scheduler) refusal(key string, n *nodeEntry) string {
	if n.obj == nil {
		return ""
	}
	return s.fitOf(key).node.Refusal(n.obj)
}

// podRefusal is why node n refuses pods of constraint key by the pods
// placed around it ("" when it admits them): kube-scheduler runs these
// filters after the resource fit.
func (s *Scheduler) podRefusal(key string, n *nodeEntry) string {
	st := s.podsState(s.fitOf(key), key)
	if n.obj == nil || st == nil {
		return ""
	}
	return st.Refusal(n.obj)
}

// podsState is the inter-pod state of pods of constraint key; nil for
// pods the inter-pod rules leave alone.
func (s *Scheduler) podsState(f *fit, key string) *interpod.State {
	if f.pods == nil {
		return nil
	}
	return s.affinity.State(key)
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
