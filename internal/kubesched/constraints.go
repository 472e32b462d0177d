package kubesched

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tessera-gpu/tessera/internal/kubesched/interpod"
	"github.com/tessera-gpu/tessera/internal/kubesched/nodefit"
	"github.com/tessera-gpu/tessera/internal/kubesched/volumes"
)

// fit is what decides where pods of one constraint key may run: their
// node constraints, and (pods nil for pods that need none) the inter-pod
// rules that read the pods placed around them.
type fit struct {
	node    *nodefit.Constraints
	pods    *interpod.Pod
	volumes *volumes.Pod // nil for pods without PersistentVolumeClaims
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
	vols := volumes.For(p)
	if vols != nil {
		key = "volumes:" + vols.Key() + "|" + key
	}
	if _, ok := s.fits[key]; ok {
		return key, nil
	}
	c, err := nodefit.For(p)
	if err != nil {
		return "", err
	}
	f := &fit{node: c, volumes: vols}
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
	if f.node.Refusal(n, s.usedPorts(f.node, n.Name, "")) != "" {
		return false, 0
	}
	if f.volumes != nil && len(s.volumes.NodeRefusal(f.volumes, n)) > 0 {
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
	c := s.fitOf(key).node
	return c.Refusal(n.obj, s.usedPorts(c, n.name, ""))
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

// Host ports (kube-scheduler's NodePorts) are the one node constraint that
// depends on the node's pods rather than the node: a pod binding host
// ports is refused by a node where a pod bound there (by any scheduler) or
// one of ours promised there (bind in flight, nominated) binds a
// conflicting port. Pods binding the same ports share a constraint key,
// so the cluster's memoised answers stay per shape; a node's answers are
// forgotten when such a pod comes to it or leaves it (refilterPorts).
// Within one engine cycle the memo cannot see the cycle's own placements,
// so placed() checks a new placement against the node's ports once more
// and sends a pod that lost the race back to the queue (portsTaken).

// hostPortIndex indexes the pod cache by node for bound pods that bind
// host ports (the only pods whose ports matter; the index stays small).
const hostPortIndex = "hostPortNode"

func hostPortNode(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || len(nodefit.HostPorts(p)) == 0 {
		return nil, nil
	}
	return []string{p.Spec.NodeName}, nil
}

// usedPorts are the host ports taken on node, when c's pod binds any (nil
// otherwise: nothing to conflict with): bound pods' there and our promised
// pods' there, except the pod keyed except.
func (s *Scheduler) usedPorts(c *nodefit.Constraints, node, except string) nodefit.UsedPorts {
	if len(c.Ports()) == 0 {
		return nil
	}
	used := nodefit.UsedPorts{}
	if s.portPods != nil {
		objs, _ := s.portPods.ByIndex(hostPortIndex, node)
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok && p.Namespace+"/"+p.Name != except {
				used.Add(nodefit.HostPorts(p))
			}
		}
	}
	for key := range s.promisedPorts[node] {
		if e := s.podState[key]; key != except && promising(e, node) {
			if p := s.podFor(key); p != nil && p.UID == e.uid {
				used.Add(nodefit.HostPorts(p))
			}
		}
	}
	return used
}

// promising reports whether e holds a placement on node that the pod
// cache does not show yet: a bind in flight, a nomination, or a bind done
// whose update the informer has not delivered (syncBound then clears
// e.node, and the pod is in hostPortIndex).
func promising(e *podEntry, node string) bool {
	return e != nil && (e.phase == assumed || e.phase == nominated || e.phase == bound) && e.node == node
}

// portsOf are the host ports e's pod binds.
func (s *Scheduler) portsOf(e *podEntry) []nodefit.HostPort {
	if e.pod == nil || s.fits[e.pod.Request.NodeConstraint] == nil {
		return nil
	}
	return s.fits[e.pod.Request.NodeConstraint].node.Ports()
}

// portsTaken checks a placement the engine just made against the host
// ports in use on its node (including placements made earlier in the same
// cycle, which the memoised filter did not see). On a conflict the
// placement is released and the pod queued again at once; the node's
// answers are refreshed, so the next cycle places it elsewhere or says
// why. Without a conflict the pod's ports are promised on the node.
func (s *Scheduler) portsTaken(e *podEntry, n *nodeEntry) bool {
	ports := s.portsOf(e)
	if len(ports) == 0 {
		return false
	}
	c := s.fits[e.pod.Request.NodeConstraint].node
	if s.usedPorts(c, n.name, e.key).Conflicts(ports) {
		s.log.Info("host ports taken meanwhile; queued again", "pod", e.key, "node", n.name)
		_ = s.eng.Complete(e.key)
		e.phase, e.node, e.uuids = pending, "", nil
		if err := s.eng.Submit(s.alone(e.pod)); err != nil {
			s.log.Warn("requeue failed", "pod", e.key, "err", err)
		}
		s.refilterPorts(map[string]struct{}{n.name: {}}, false)
		return true
	}
	if s.promisedPorts[n.name] == nil {
		s.promisedPorts[n.name] = map[string]bool{}
	}
	s.promisedPorts[n.name][e.key] = true
	s.refilterPorts(map[string]struct{}{n.name: {}}, false)
	return false
}

// sweepPortPromises drops promises no longer held (bound, rolled back,
// gone, requeued by a rebuild) and refreshes their nodes' answers.
func (s *Scheduler) sweepPortPromises() {
	changed := map[string]struct{}{}
	for node, keys := range s.promisedPorts {
		for key := range keys {
			if !promising(s.podState[key], node) {
				delete(keys, key)
				changed[node] = struct{}{}
			}
		}
		if len(keys) == 0 {
			delete(s.promisedPorts, node)
		}
	}
	s.refilterPorts(changed, true)
}

// refilterPorts forgets the memoised answers of nodes whose host ports
// changed and, when ports may have been freed, retries waiting pods.
func (s *Scheduler) refilterPorts(nodes map[string]struct{}, freed bool) {
	changed := false
	for name := range nodes {
		if n := s.nodeState[name]; n != nil && n.index >= 0 && s.cluster != nil {
			s.cluster.RefilterNode(n.index)
			changed = true
		}
	}
	if changed && freed {
		s.eng.ClusterChanged()
	}
}

// portHandler marks the node of a bound pod that binds host ports when it
// comes to the node (created bound, or bound) or goes. Other updates
// (status) change nothing: a pod's ports are immutable.
func (c *changeSet) portHandler() cache.ResourceEventHandler {
	mark := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		nodes, _ := hostPortNode(obj)
		if len(nodes) == 0 {
			return
		}
		c.mu.Lock()
		c.portNodes[nodes[0]] = struct{}{}
		c.mu.Unlock()
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
	bound := func(obj any) bool {
		p, ok := obj.(*corev1.Pod)
		return ok && p.Spec.NodeName != ""
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: mark, DeleteFunc: mark, UpdateFunc: func(o, n any) {
		if !bound(o) {
			mark(n)
		}
	}}
}

func (c *changeSet) takePortNodes() map[string]struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.portNodes
	c.portNodes = map[string]struct{}{}
	return n
}
