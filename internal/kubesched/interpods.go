package kubesched

import (
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/kubesched/interpod"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
)

// Inter-pod affinity, anti-affinity and topology spread
// (internal/kubesched/interpod) in the scheduling loop: every pod's labels
// and terms are read once (describe); the index learns each placement as
// the engine makes it (placementChanged), so pods placed in one cycle see
// each other, and the constraint keys whose answers moved are refiltered.

// describe reads a pod's inter-pod terms and keeps them by pod key for the
// index. A pod whose terms select other pods registers them: pods already
// waiting that they select are read again, since their key did not carry
// their labels.
func (s *Scheduler) describe(p *corev1.Pod) (*interpod.Pod, error) {
	d, err := interpod.Describe(p)
	if err != nil {
		return nil, err
	}
	key := translate.Key(p)
	s.descs[key] = d
	if s.affinity.Target(termsSig(p), d) {
		s.rekeySelectedBy(d, key)
	}
	return d, nil
}

// podsKey extends a pod's node-constraint key with what the inter-pod
// rules read of it: namespace, labels and terms. Pods equal in all of it
// (a Deployment's replicas) share one key and one state.
func podsKey(nodeKey string, p *corev1.Pod) string {
	k := struct {
		Node      string                            `json:"n"`
		Namespace string                            `json:"ns"`
		Labels    map[string]string                 `json:"l,omitempty"`
		Affinity  *corev1.PodAffinity               `json:"a,omitempty"`
		Anti      *corev1.PodAntiAffinity           `json:"x,omitempty"`
		Spread    []corev1.TopologySpreadConstraint `json:"s,omitempty"`
	}{Node: nodeKey, Namespace: p.Namespace, Labels: p.Labels, Spread: p.Spec.TopologySpreadConstraints}
	if a := p.Spec.Affinity; a != nil {
		k.Affinity, k.Anti = a.PodAffinity, a.PodAntiAffinity
	}
	b, err := json.Marshal(k) // map keys sorted: canonical
	if err != nil {
		return fmt.Sprintf("pods:%#v", k) // API types always marshal; never reached
	}
	return "pods:" + string(b)
}

// termsSig is equal for pods whose terms select the same pods.
func termsSig(p *corev1.Pod) string {
	if p.Spec.Affinity == nil {
		return ""
	}
	b, _ := json.Marshal(struct {
		Namespace string
		A         *corev1.PodAffinity
		X         *corev1.PodAntiAffinity
	}{p.Namespace, p.Spec.Affinity.PodAffinity, p.Spec.Affinity.PodAntiAffinity})
	return string(b)
}

// rekeySelectedBy reads again the waiting pods (other than self) that
// terms of d select and whose key ignores other pods: they are queued
// again under a key that carries their labels.
func (s *Scheduler) rekeySelectedBy(d *interpod.Pod, self string) {
	for key, e := range s.podState {
		if key == self || e.pod == nil || (e.phase != pending && e.phase != held) {
			continue
		}
		if f := s.fits[e.pod.Request.NodeConstraint]; f != nil && f.pods != nil {
			continue // its state reads every placed pod's terms already
		}
		od := s.descs[key]
		if od == nil || !od.TargetedBy(d, view{s}.NamespaceLabels) {
			continue
		}
		p := s.podFor(key)
		if p == nil || p.UID != e.uid {
			continue
		}
		s.rekey(p, e)
	}
}

// rekey queues a waiting pod (pending or held) again under the key its
// constraints give it now.
func (s *Scheduler) rekey(p *corev1.Pod, e *podEntry) {
	nk, err := s.constrain(p)
	if err != nil || nk == e.pod.Request.NodeConstraint {
		return
	}
	if e.phase == held {
		e.pod.Request.NodeConstraint = nk // submitted with it when its backoff ends
		return
	}
	s.eng.Delete(e.key)
	e.pod.Request.NodeConstraint = nk
	if err := s.eng.Submit(s.alone(e.pod)); err != nil {
		s.log.Warn("requeue under inter-pod rules failed", "pod", e.key, "err", err)
	}
}

// relabelled reads a known pod's labels again when they changed (they are
// mutable; its terms are not), or when it started terminating: where it
// is placed it counts by what it is now, and a waiting pod is queued
// under a key carrying its new labels.
func (s *Scheduler) relabelled(p *corev1.Pod, e *podEntry) {
	d := s.descs[e.key]
	if d == nil || (maps.Equal(map[string]string(d.Labels), p.Labels) && d.Terminating == (p.DeletionTimestamp != nil)) {
		return
	}
	if e.pod != nil && (e.phase == pending || e.phase == held) {
		s.rekey(p, e) // describes it again
		return
	}
	nd, err := s.describe(p)
	if err != nil {
		return
	}
	s.refilterPods(s.affinity.Replace(nd))
}

// collectKeys drops the inter-pod keys and terms of pods that are gone,
// once they outnumber the known pods (Jobs' pods carry labels of their
// own, so each Job brings a key and terms; kept, they would grow without
// bound and every pod without terms would be asked against them all). A
// key any known pod still uses stays; node-constraint keys are few and
// stay.
func (s *Scheduler) collectKeys() {
	known := len(s.podState) + collectSlack
	if len(s.fits) < 2*known && s.affinity.Targets() < 2*known {
		return
	}
	used := map[string]bool{}
	for _, e := range s.podState {
		if e.pod != nil {
			used[e.pod.Request.NodeConstraint] = true
		}
	}
	for key, f := range s.fits {
		if (f.pods != nil || f.volumes != nil) && !used[key] {
			delete(s.fits, key)
			if f.pods != nil {
				s.affinity.Forget(key)
			}
			if s.cluster != nil {
				s.cluster.RefilterConstraint(key) // its memoised answers go too
			}
		}
	}
	sigs := map[string]bool{}
	for key := range s.podState {
		if p := s.podFor(key); p != nil {
			sigs[termsSig(p)] = true
		}
	}
	s.affinity.KeepTargets(func(sig string) bool { return sigs[sig] })
}

// collectSlack keeps small clusters from collecting at every pod's end.
const collectSlack = 64

// placementChanged is the engine's OnPlacement: the index counts the pod
// where it now runs (or no longer), and the keys whose answers moved are
// refiltered; a change may let waiting pods in (affinity found, a spread
// domain filled), so the engine tries again.
func (s *Scheduler) placementChanged(p *engine.Pod, node int, placed bool) {
	var changed []string
	if placed {
		d := s.descs[p.Key]
		if d == nil || node < 0 || node >= len(s.byIndex) || s.byIndex[node] == nil {
			return
		}
		changed = s.affinity.Place(d, s.byIndex[node].name)
		// A gang member starting where its trial put it is counted
		// already; what its trial moved may now let waiting pods in.
		changed = append(changed, s.trials[p.Key]...)
	} else {
		changed = s.affinity.Unplace(p.Key)
	}
	delete(s.trials, p.Key)
	s.refilterPods(changed)
}

// memberTrial is the engine's OnTrial: a gang member placed on trial while
// its group is reserved is counted by the index at once, and the keys it
// moves refiltered, so the next member is filtered beside it (a group with
// anti-affinity on its own label is spread); taken back, it is forgotten.
// Neither wakes the queue: a trial taken back leaves the rules as they
// were, and one kept does so when the member starts (placementChanged).
// A member without terms that no pod's terms select moves no key.
func (s *Scheduler) memberTrial(p *engine.Pod, node int, held bool) {
	var changed []string
	if held {
		d := s.descs[p.Key]
		if d == nil || node < 0 || node >= len(s.byIndex) || s.byIndex[node] == nil {
			return
		}
		changed = s.affinity.Place(d, s.byIndex[node].name)
		if len(changed) > 0 {
			s.trials[p.Key] = append(s.trials[p.Key], changed...)
		}
	} else {
		changed = s.affinity.Unplace(p.Key)
		delete(s.trials, p.Key)
	}
	for _, k := range changed {
		s.cluster.RefilterConstraint(k)
	}
}

func (s *Scheduler) refilterPods(keys []string) {
	for _, k := range keys {
		s.cluster.RefilterConstraint(k)
	}
	if len(keys) > 0 {
		s.eng.ClusterChanged()
	}
}

// topologyChanged: nodes' labels or namespaces' labels moved, so domains
// and namespace selections may have: every inter-pod state is rebuilt.
func (s *Scheduler) topologyChanged() {
	s.refilterPods(s.affinity.Reset())
}

// view is interpod.Cluster over the loop's nodes and the informers'
// caches.
type view struct{ s *Scheduler }

func (v view) Node(name string) *corev1.Node {
	s := v.s
	if e := s.nodeState[name]; e != nil && e.obj != nil {
		return e.obj
	}
	n, err := s.nodes.Get(name)
	if err != nil {
		return nil
	}
	return n
}

func (v view) Candidates() []*corev1.Node {
	out := make([]*corev1.Node, 0, len(v.s.byIndex))
	for _, e := range v.s.byIndex {
		if e != nil && e.obj != nil {
			out = append(out, e.obj)
		}
	}
	return out
}

func (v view) NamespaceLabels(ns string) labels.Set {
	n, err := v.s.namespaces.Get(ns)
	if err != nil {
		return nil
	}
	return n.Labels
}
