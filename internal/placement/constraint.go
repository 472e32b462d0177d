package placement

// NodeFilter answers, for the caller that knows nodes beyond their
// capacity (labels, taints), whether a pod whose node constraints are named
// key may run on node i, and how much it prefers that node (0 = no
// preference). key is Request.NodeConstraint; pods with equal constraints
// share it, so the answers are memoised per key and node until
// RefilterNode. It must be a pure function of the key and the node's
// state as last refiltered.
type NodeFilter func(key string, node int) (ok bool, preference int64)

// MaxPreference bounds a node preference: preferences rank nodes before the
// policy's score does (a preferred node that fits wins; the policy orders
// nodes of equal preference), so they sit above every policy score.
const MaxPreference = 255

// preferenceShift places a preference above every policy's node score
// (random's reach 2^53).
const preferenceShift = 54

// fit states memoised per constraint and node.
const (
	fitUnknown int16 = -1
	fitRefused int16 = -2
)

// SetNodeFilter installs f (nil: every node admits every pod) and forgets
// every memoised answer.
func (c *Cluster) SetNodeFilter(f NodeFilter) {
	c.nodeFilter = f
	for i := range c.fit {
		c.fit[i] = nil
	}
	for i := range c.Nodes {
		c.changed(i)
	}
}

// RefilterNode forgets node i's memoised answers (its labels or taints
// changed) and tells the score caches the node changed.
func (c *Cluster) RefilterNode(i int) {
	for _, row := range c.fit {
		if i < len(row) {
			row[i] = fitUnknown
		}
	}
	c.changed(i)
}

// RefilterConstraint forgets every memoised answer for pods of constraint
// key (what the filter reads about them changed on many nodes at once: the
// pods placed beside them) and tells the score caches that shapes of
// that constraint changed. Pods of other constraints keep theirs.
func (c *Cluster) RefilterConstraint(key string) {
	id, ok := c.constraintIDs[key]
	if !ok {
		return // never asked: nothing memoised
	}
	if int(id) < len(c.fit) {
		c.fit[id] = nil
	}
	for _, fn := range c.refilters {
		fn(id)
	}
}

// WatchConstraints registers fn to be told which constraint id was
// refiltered as a whole (RefilterConstraint).
func (c *Cluster) WatchConstraints(fn func(id uint32)) { c.refilters = append(c.refilters, fn) }

// constraintID interns a constraint key; 0 is the empty key.
func (c *Cluster) constraintID(key string) uint32 {
	if key == "" {
		return 0
	}
	if c.constraintIDs == nil {
		c.constraintIDs = map[string]uint32{}
		c.constraints = []string{""}
	}
	if id, ok := c.constraintIDs[key]; ok {
		return id
	}
	id := uint32(len(c.constraints))
	c.constraints = append(c.constraints, key)
	c.constraintIDs[key] = id
	return id
}

// constraintKey is the key of an interned id.
func (c *Cluster) constraintKey(id uint32) string {
	if id == 0 || int(id) >= len(c.constraints) {
		return ""
	}
	return c.constraints[id]
}

// nodeFit reports whether node i admits pods of constraint id and their
// preference for it.
func (c *Cluster) nodeFit(i int, id uint32) (bool, int64) {
	if c.nodeFilter == nil {
		return true, 0
	}
	for int(id) >= len(c.fit) {
		c.fit = append(c.fit, nil)
	}
	row := c.fit[id]
	if len(row) < len(c.Nodes) {
		grown := make([]int16, len(c.Nodes))
		copy(grown, row)
		for k := len(row); k < len(grown); k++ {
			grown[k] = fitUnknown
		}
		row, c.fit[id] = grown, grown
	}
	if row[i] == fitUnknown {
		ok, pref := c.nodeFilter(c.constraintKey(id), i)
		switch {
		case !ok:
			row[i] = fitRefused
		default:
			row[i] = int16(min(max(pref, 0), MaxPreference))
		}
	}
	if row[i] == fitRefused {
		return false, 0
	}
	return true, int64(row[i])
}

// NodeAdmits reports whether node i admits a pod of r's node constraints
// (the NodeFilter's answer; true without one).
func (c *Cluster) NodeAdmits(i int, r *Request) bool {
	ok, _ := c.nodeFit(i, c.constraintID(r.NodeConstraint))
	return ok
}
