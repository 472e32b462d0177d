package interpod

import "slices"

// Index is every placed pod (bound by any scheduler, or placed by this one
// and not bound yet) with its node, and the states of the incoming pods
// that read them. It is not safe for concurrent use: the scheduling loop
// owns it and tells it of every placement as the engine makes it, so two
// pods placed in one cycle see each other.
type Index struct {
	cluster Cluster
	placed  map[string]placed
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

type wanted struct {
	pod   *Pod
	rules NodeRules
}

// idleStates is how many pod moves a state may go unread before it is
// dropped (it is rebuilt if read again).
const idleStates = 4096

// NewIndex is an empty index over cluster c.
func NewIndex(c Cluster) *Index {
	return &Index{cluster: c, placed: map[string]placed{}, wanted: map[string]wanted{}, states: map[string]*State{}, targeting: map[string]*Pod{}}
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
		s.apply(pl.pod, x.cluster.Node(pl.node), 1)
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
	return x.moved(p, node, 1, out)
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
	return x.moved(pl.pod, pl.node, -1, nil)
}

func (x *Index) moved(p *Pod, node string, sign int, out []string) []string {
	x.clock++
	if len(x.states) == 0 {
		return out
	}
	n := x.cluster.Node(node)
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
	out := make([]string, 0, len(x.states))
	for key := range x.states {
		out = append(out, key)
	}
	clear(x.states)
	slices.Sort(out)
	return out
}

// States is how many incoming pods' states are built.
func (x *Index) States() int { return len(x.states) }

// Placed is how many pods the index holds.
func (x *Index) Placed() int { return len(x.placed) }
