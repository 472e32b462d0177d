package interpod

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Index is every placed pod (bound by any scheduler, or placed by this one
// and not bound yet) with its node, and the states of the incoming pods
// that read them. It is not safe for concurrent use: the scheduling loop
// owns it and tells it of every placement as the engine makes it, so two
// pods placed in one cycle see each other.
type Index struct {
	cluster Cluster
	placed  map[string]placed
	// nodes are the nodes placed pods are counted on, as they were when
	// counted: a pod is counted out with the labels it was counted in
	// with, though its node moved to another domain or went.
	nodes map[string]countedNode // by value: no allocation per placement
	// wanted are the incoming pods by constraint key; states are built
	// from them on first use and dropped when unused for a while.
	wanted map[string]wanted
	states map[string]*State
	// targeting are pods (one per distinct set of terms) whose terms weigh
	// on where other pods go.
	targeting map[string]*Pod
	clock     uint64
}

type placed struct {
	pod  *Pod
	node string
}

type countedNode struct {
	obj  *corev1.Node // nil: unknown, its pods count nowhere
	pods int
}

type wanted struct {
	pod   *Pod
	rules NodeRules
}

// idleStates is how many pod moves a state may go unread before it is
// dropped (it is rebuilt if read again).
const idleStates = 4096

// NewIndex is an empty index over cluster c.
func NewIndex(c Cluster) *Index {
	return &Index{cluster: c, placed: map[string]placed{}, nodes: map[string]countedNode{}, wanted: map[string]wanted{}, states: map[string]*State{}, targeting: map[string]*Pod{}}
}

// Want registers incoming pod p (its rules: its node constraints) under
// constraint key; the first pod registered under a key stands for all.
func (x *Index) Want(key string, p *Pod, rules NodeRules) {
	if _, ok := x.wanted[key]; !ok {
		x.wanted[key] = wanted{pod: p, rules: rules}
	}
}

// Target registers a pod whose terms weigh on other pods under sig (equal
// for pods of equal terms and namespace); true when sig is new: pods that
// did not consider such terms until now must be read again.
func (x *Index) Target(sig string, p *Pod) bool {
	if !p.targetsOthers() {
		return false
	}
	if _, ok := x.targeting[sig]; ok {
		return false
	}
	x.targeting[sig] = p
	return true
}

// Targeted reports whether any registered pod's terms select p.
func (x *Index) Targeted(p *Pod) bool {
	for _, o := range x.targeting {
		if p.TargetedBy(o, x.cluster.NamespaceLabels) {
			return true
		}
	}
	return false
}

// State is the state of the pods of constraint key (nil when none was
// registered), built on first use.
func (x *Index) State(key string) *State {
	s, ok := x.states[key]
	if ok {
		s.lastUsed = x.clock
		return s
	}
	w, ok := x.wanted[key]
	if !ok {
		return nil
	}
	s = newState(w.pod, w.rules, x.cluster)
	for _, pl := range x.placed {
		s.apply(pl.pod, x.nodes[pl.node].obj, 1)
	}
	s.lastUsed = x.clock
	x.states[key] = s
	return s
}

// Place records pod p on node and returns the constraint keys whose
// answers may have changed (their filter answers must be forgotten).
func (x *Index) Place(p *Pod, node string) []string {
	var out []string
	if old, ok := x.placed[p.Key]; ok {
		if old.node == node && old.pod == p {
			return nil
		}
		out = x.Unplace(p.Key)
	}
	x.placed[p.Key] = placed{pod: p, node: node}
	cn, ok := x.nodes[node]
	if !ok {
		cn.obj = x.cluster.Node(node)
	}
	cn.pods++
	x.nodes[node] = cn
	return x.moved(p, cn.obj, 1, out)
}

// Replace counts p (read again: its labels changed) where the pod of its
// key is placed, if it is, and returns the constraint keys whose answers
// may have changed.
func (x *Index) Replace(p *Pod) []string {
	old, ok := x.placed[p.Key]
	if !ok {
		return nil
	}
	return x.Place(p, old.node)
}

// Unplace forgets pod key's placement and returns the constraint keys
// whose answers may have changed.
func (x *Index) Unplace(key string) []string {
	pl, ok := x.placed[key]
	if !ok {
		return nil
	}
	delete(x.placed, key)
	cn := x.nodes[pl.node]
	if cn.pods--; cn.pods == 0 {
		delete(x.nodes, pl.node)
	} else {
		x.nodes[pl.node] = cn
	}
	return x.moved(pl.pod, cn.obj, -1, nil)
}

// NodeChanged returns the constraint keys whose answers may have changed
// when node name changed or went: if pods are counted on it and its labels
// moved, every state is dropped (Reset).
func (x *Index) NodeChanged(name string) []string {
	cn, ok := x.nodes[name]
	if !ok {
		return nil
	}
	n := x.cluster.Node(name)
	if (n == nil) == (cn.obj == nil) && (n == nil || maps.Equal(n.Labels, cn.obj.Labels)) {
		return nil
	}
	return x.Reset()
}

func (x *Index) moved(p *Pod, n *corev1.Node, sign int, out []string) []string {
	x.clock++
	if len(x.states) == 0 {
		return out
	}
	for key, s := range x.states {
		switch {
		case x.clock-s.lastUsed > idleStates:
			delete(x.states, key) // rebuilt when read again; its answers go now
			out = append(out, key)
		case s.apply(p, n, sign):
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Reset drops every state (nodes' labels or namespaces changed: topology
// domains may have moved) and returns their keys.
func (x *Index) Reset() []string {
	for name, cn := range x.nodes {
		cn.obj = x.cluster.Node(name)
		x.nodes[name] = cn
	}
	out := make([]string, 0, len(x.states))
	for key := range x.states {
		out = append(out, key)
	}
	clear(x.states)
	slices.Sort(out)
	return out
}

// Forget drops constraint key, which no pod uses any more: its state and
// the pod that stood for it.
func (x *Index) Forget(key string) {
	delete(x.wanted, key)
	delete(x.states, key)
}

// KeepTargets drops the registered terms whose sig keep refuses (no pod
// carries them any more): pods are no longer asked against them.
func (x *Index) KeepTargets(keep func(sig string) bool) {
	maps.DeleteFunc(x.targeting, func(sig string, _ *Pod) bool { return !keep(sig) })
}

// Targets is how many distinct terms that weigh on other pods are
// registered.
func (x *Index) Targets() int { return len(x.targeting) }

// States is how many incoming pods' states are built.
func (x *Index) States() int { return len(x.states) }

// Placed is how many pods the index holds.
func (x *Index) Placed() int { return len(x.placed) }
