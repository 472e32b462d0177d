// Package nodefit decides, by Kubernetes' own rules, whether a pod may run
// on a node apart from capacity: spec.unschedulable (unless the pod
// tolerates node.kubernetes.io/unschedulable), NoSchedule and NoExecute
// taints against the pod's tolerations, and nodeSelector with required
// node affinity, and host ports another pod on the node already binds;
// preferred node affinity is a preference. The rules are
// k8s.io/component-helpers' (what kube-scheduler's NodeUnschedulable,
// TaintToleration and NodeAffinity plugins call) and NodePorts' (its
// HostPortInfo lives in k8s.io/kube-scheduler/framework, a package that
// pulls in dynamic resource allocation and CEL, so its twenty lines are
// restated in hostports.go), checked in kube-scheduler's filter order, and
// a refusal is worded as kube-scheduler words it in FailedScheduling.
package nodefit

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Reasons a node refuses a pod, as kube-scheduler's filters word them
// (the taint reason names the taint, as kube-scheduler did before v1.27:
// the operator then knows which toleration is missing).
const (
	Unschedulable    = "node(s) were unschedulable"
	AffinityMismatch = "node(s) didn't match Pod's node affinity/selector"
	untoleratedTaint = "node(s) had untolerated taint {%s: %s}"
)

// Constraints are one pod's node constraints.
type Constraints struct {
	key         string
	required    nodeaffinity.RequiredNodeAffinity
	preferred   *nodeaffinity.PreferredSchedulingTerms
	tolerations []corev1.Toleration
	ports       []HostPort
}

// keyed is what decides where a pod may run; pods equal in it are
// interchangeable to the filter.
type keyed struct {
	NodeSelector map[string]string    `json:"s,omitempty"`
	Affinity     *corev1.NodeAffinity `json:"a,omitempty"`
	Tolerations  []corev1.Toleration  `json:"t,omitempty"`
	Ports        []HostPort           `json:"p,omitempty"`
}

// Key is the canonical text of a pod's node constraints: equal for pods
// the filter treats alike, "" for a pod with none (a node's taints and
// cordon still refuse it).
func Key(p *corev1.Pod) string {
	return key(p, HostPorts(p))
}

func key(p *corev1.Pod, ports []HostPort) string {
	k := keyed{NodeSelector: p.Spec.NodeSelector, Tolerations: p.Spec.Tolerations, Ports: ports}
	if p.Spec.Affinity != nil {
		k.Affinity = p.Spec.Affinity.NodeAffinity
	}
	if len(k.NodeSelector) == 0 && k.Affinity == nil && len(k.Tolerations) == 0 && len(k.Ports) == 0 {
		return ""
	}
	b, err := json.Marshal(k) // map keys sorted: canonical
	if err != nil {
		return fmt.Sprintf("%#v", k)
	}
	return string(b)
}

// For reads a pod's constraints. A preferred term that does not parse
// (the API server validates them, so only a client bypassing validation
// writes one) is an error naming it.
func For(p *corev1.Pod) (*Constraints, error) {
	ports := HostPorts(p)
	c := &Constraints{key: key(p, ports), required: nodeaffinity.GetRequiredNodeAffinity(p), tolerations: p.Spec.Tolerations, ports: ports}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
		terms, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution: %w", p.Namespace, p.Name, err)
		}
		c.preferred = terms
	}
	return c, nil
}

// Key is the constraints' key (Key of the pod they were read from).
func (c *Constraints) Key() string { return c.key }

// Ports are the host ports the pod binds (HostPorts).
func (c *Constraints) Ports() []HostPort { return c.ports }

// Refusal is why node n, whose pods bind the host ports used, refuses the
// pod, in kube-scheduler's words; "" when it admits it.
func (c *Constraints) Refusal(n *corev1.Node, used UsedPorts) string {
	logger := klog.Background()
	if n.Spec.Unschedulable && !v1helper.TolerationsTolerateTaint(logger, c.tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, true) {
		return Unschedulable
	}
	if t, untolerated := v1helper.FindMatchingUntoleratedTaint(logger, n.Spec.Taints, c.tolerations, refusesScheduling, true); untolerated {
		return fmt.Sprintf(untoleratedTaint, t.Key, t.Value)
	}
	if ok, err := c.required.Match(n); err != nil || !ok {
		return AffinityMismatch
	}
	if used.Conflicts(c.ports) {
		return FreePorts
	}
	return ""
}

// MatchesAffinity reports whether node n passes the pod's nodeSelector and
// required node affinity (topology spread's nodeAffinityPolicy: Honor).
func (c *Constraints) MatchesAffinity(n *corev1.Node) bool {
	ok, err := c.required.Match(n)
	return err == nil && ok
}

// ToleratesTaints reports whether the pod tolerates node n's NoSchedule
// and NoExecute taints (topology spread's nodeTaintsPolicy: Honor).
func (c *Constraints) ToleratesTaints(n *corev1.Node) bool {
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, c.tolerations, refusesScheduling, true)
	return !untolerated
}

// Preference is the summed weight of the pod's preferred node affinity
// terms that node n matches (0 without any).
func (c *Constraints) Preference(n *corev1.Node) int64 {
	if c.preferred == nil {
		return 0
	}
	return c.preferred.Score(n)
}

// refusesScheduling selects the taints that keep new pods off a node
// (PreferNoSchedule only weighs against it).
func refusesScheduling(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}
