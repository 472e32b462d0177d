// Package interpod decides, by kube-scheduler's InterPodAffinity and
// PodTopologySpread rules, where a pod may run and which nodes it prefers
// given the pods already placed: required pod affinity and anti-affinity
// (the incoming pod's, and existing pods' anti-affinity against it) and
// topology spread constraints with whenUnsatisfiable: DoNotSchedule are
// feasibility; preferred terms and ScheduleAnyway constraints rank nodes.
// Refusals are worded as kube-scheduler words them in FailedScheduling.
//
// Nothing here imports k8s.io/kubernetes: the rules are re-stated over
// k8s.io/apimachinery's label selectors, following the upstream plugins
// (pkg/scheduler/framework/plugins/interpodaffinity and podtopologyspread).
package interpod

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Reasons a node refuses a pod, as kube-scheduler's filters word them.
const (
	AffinityMismatch     = "node(s) didn't match pod affinity rules"
	AntiAffinityMismatch = "node(s) didn't match pod anti-affinity rules"
	ExistingAntiAffinity = "node(s) didn't satisfy existing pods anti-affinity rules"
	SpreadMismatch       = "node(s) didn't match pod topology spread constraints"
	SpreadMissingLabel   = SpreadMismatch + " (missing required label)"
)

// hardPodAffinityWeight is kube-scheduler's default weight of an existing
// pod's required affinity term that matches the incoming pod, in scoring.
const hardPodAffinityWeight = 1

// Pod is what the rules read of one pod: where it lives, its labels, and
// its own terms (parsed once).
type Pod struct {
	Key       string // namespace/name
	Namespace string
	Labels    labels.Set
	// Terminating: the pod has a deletionTimestamp (its grace period
	// runs); topology spread does not count it, as kube-scheduler's
	// PodTopologySpread does not (kubernetes#87621).
	Terminating bool
	// Required terms, then preferred ones (kube-scheduler's naming).
	affinity, antiAffinity         []term
	prefAffinity, prefAntiAffinity []weighted
	spread                         []constraint
}

// term is one pod (anti-)affinity term: pods it selects and the topology
// over which it counts them.
type term struct {
	topologyKey string
	selector    labels.Selector
	namespaces  map[string]bool
	nsSelector  labels.Selector // nil without namespaceSelector
}

type weighted struct {
	term
	weight int64
}

// constraint is one topology spread constraint.
type constraint struct {
	maxSkew     int32
	minDomains  int32
	topologyKey string
	hard        bool // whenUnsatisfiable: DoNotSchedule
	selector    labels.Selector
	// nodeAffinityPolicy Honor (default) and nodeTaintsPolicy Honor
	// (default Ignore): whether the pod's node affinity and tolerations
	// decide which nodes' pods and domains count.
	honorAffinity, honorTaints bool
}

// Describe reads a pod's inter-pod terms. A selector that does not parse
// (the API server validates them, so only a client bypassing validation
// writes one) is an error naming the field.
func Describe(p *corev1.Pod) (*Pod, error) {
	d := &Pod{Key: p.Namespace + "/" + p.Name, Namespace: p.Namespace, Labels: labels.Set(p.Labels), Terminating: p.DeletionTimestamp != nil}
	a := p.Spec.Affinity
	var err error
	if a != nil && a.PodAffinity != nil {
		if d.affinity, err = terms(p, "podAffinity.requiredDuringSchedulingIgnoredDuringExecution", a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, err
		}
		if d.prefAffinity, err = weightedTerms(p, "podAffinity", a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, err
		}
	}
	if a != nil && a.PodAntiAffinity != nil {
		if d.antiAffinity, err = terms(p, "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution", a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, err
		}
		if d.prefAntiAffinity, err = weightedTerms(p, "podAntiAffinity", a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, err
		}
	}
	for i, c := range p.Spec.TopologySpreadConstraints {
		sc, err := spreadConstraint(p, c)
		if err != nil {
			return nil, fmt.Errorf("pod %s: spec.topologySpreadConstraints[%d]: %w", d.Key, i, err)
		}
		d.spread = append(d.spread, sc)
	}
	return d, nil
}

// HasTerms reports whether the pod carries any inter-pod term of its own.
func (p *Pod) HasTerms() bool {
	return len(p.affinity)+len(p.antiAffinity)+len(p.prefAffinity)+len(p.prefAntiAffinity)+len(p.spread) > 0
}

// targetsOthers reports whether the pod has terms that weigh on where
// other pods go (kube-scheduler's symmetric rules: its required
// anti-affinity refuses them, its preferred terms and required affinity
// rank nodes for them).
func (p *Pod) targetsOthers() bool {
	return len(p.antiAffinity)+len(p.affinity)+len(p.prefAffinity)+len(p.prefAntiAffinity) > 0
}

// TargetedBy reports whether one of o's terms that weigh on other pods
// selects p (p's placement must then consider o).
func (p *Pod) TargetedBy(o *Pod, nsLabels func(string) labels.Set) bool {
	for _, t := range o.antiAffinity {
		if t.matches(p, nsLabels) {
			return true
		}
	}
	for _, t := range o.affinity {
		if t.matches(p, nsLabels) {
			return true
		}
	}
	for _, t := range o.prefAffinity {
		if t.matches(p, nsLabels) {
			return true
		}
	}
	for _, t := range o.prefAntiAffinity {
		if t.matches(p, nsLabels) {
			return true
		}
	}
	return false
}

func terms(p *corev1.Pod, field string, in []corev1.PodAffinityTerm) ([]term, error) {
	out := make([]term, 0, len(in))
	for i, t := range in {
		pt, err := newTerm(p, t)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: spec.affinity.%s[%d]: %w", p.Namespace, p.Name, field, i, err)
		}
		out = append(out, pt)
	}
	return out, nil
}

func weightedTerms(p *corev1.Pod, field string, in []corev1.WeightedPodAffinityTerm) ([]weighted, error) {
	out := make([]weighted, 0, len(in))
	for i, t := range in {
		pt, err := newTerm(p, t.PodAffinityTerm)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: spec.affinity.%s.preferredDuringSchedulingIgnoredDuringExecution[%d]: %w", p.Namespace, p.Name, field, i, err)
		}
		out = append(out, weighted{term: pt, weight: int64(t.Weight)})
	}
	return out, nil
}

// newTerm parses a term as kube-scheduler does: no namespaces and no
// namespaceSelector mean the pod's own namespace; an empty
// namespaceSelector selects every namespace; a missing labelSelector
// selects no pod. (matchLabelKeys and mismatchLabelKeys are merged into
// labelSelector by the API server when the pod is created.)
func newTerm(p *corev1.Pod, t corev1.PodAffinityTerm) (term, error) {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		return term{}, fmt.Errorf("labelSelector: %w", err)
	}
	out := term{topologyKey: t.TopologyKey, selector: sel, namespaces: map[string]bool{}}
	for _, ns := range t.Namespaces {
		out.namespaces[ns] = true
	}
	if t.NamespaceSelector != nil {
		if out.nsSelector, err = metav1.LabelSelectorAsSelector(t.NamespaceSelector); err != nil {
			return term{}, fmt.Errorf("namespaceSelector: %w", err)
		}
	} else if len(t.Namespaces) == 0 {
		out.namespaces[p.Namespace] = true
	}
	return out, nil
}

// matches reports whether the term selects pod o.
func (t *term) matches(o *Pod, nsLabels func(string) labels.Set) bool {
	if !t.namespaces[o.Namespace] && (t.nsSelector == nil || !t.nsSelector.Matches(nsLabels(o.Namespace))) {
		return false
	}
	return t.selector.Matches(o.Labels)
}

// spreadConstraint parses one constraint; matchLabelKeys adds the pod's
// own values of those keys to the selector, as kube-scheduler does.
func spreadConstraint(p *corev1.Pod, c corev1.TopologySpreadConstraint) (constraint, error) {
	sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
	if err != nil {
		return constraint{}, fmt.Errorf("labelSelector: %w", err)
	}
	if len(c.MatchLabelKeys) > 0 && c.LabelSelector != nil {
		for _, k := range c.MatchLabelKeys {
			v, ok := p.Labels[k]
			if !ok {
				continue
			}
			r, err := labels.NewRequirement(k, selection.In, []string{v})
			if err != nil {
				return constraint{}, fmt.Errorf("matchLabelKeys %q: %w", k, err)
			}
			sel = sel.Add(*r)
		}
	}
	out := constraint{maxSkew: c.MaxSkew, topologyKey: c.TopologyKey, hard: c.WhenUnsatisfiable == corev1.DoNotSchedule,
		selector: sel, honorAffinity: true}
	if c.MinDomains != nil {
		out.minDomains = *c.MinDomains
	}
	if c.NodeAffinityPolicy != nil && *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyIgnore {
		out.honorAffinity = false
	}
	if c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
		out.honorTaints = true
	}
	if out.maxSkew < 1 {
		return constraint{}, fmt.Errorf("maxSkew %d: must be at least 1", c.MaxSkew)
	}
	return out, nil
}

// spreadWeight is kube-scheduler's weight of a soft constraint in
// scoring: topologies with more domains weigh more.
func spreadWeight(domains int) float64 { return math.Log(float64(domains + 2)) }
