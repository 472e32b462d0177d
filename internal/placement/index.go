package placement

// Index caches, per request shape, every node's score in a tournament tree so
// that a decision costs O(changed nodes · log nodes) instead of a full scan.
// It is exact: a node's score depends only on its own state (the policy is
// Deterministic), the cluster reports every node it changes, and a shape's
// tree re-scores those nodes before it answers. Ties resolve to the lowest
// node index, exactly as a scan does.
type Index struct {
	eval      func(node int, s *Shape) (int64, Candidate)
	n         int
	shapes    map[Shape]*shapeIndex
	clock     uint64
	MaxShapes int
}

type shapeIndex struct {
	score    []int64  // per node
	tree     []int32  // tournament winners; tree[1] is the best node
	dirty    []uint64 // bit per node changed since the last query
	pending  []int32  // the same nodes as a list
	lastUsed uint64
}

// DefaultMaxShapes bounds memory: the least recently used shape is dropped
// (and rebuilt on its next use) beyond this many.
const DefaultMaxShapes = 256

// NewIndex builds an empty index over cluster c and watches c for changes.
func NewIndex(c *Cluster, eval func(int, *Shape) (int64, Candidate)) *Index {
	x := &Index{eval: eval, n: len(c.Nodes), shapes: map[Shape]*shapeIndex{}, MaxShapes: DefaultMaxShapes}
	c.Watch(x.changed, x.grown)
	c.WatchConstraints(x.constraintChanged)
	return x
}

// constraintChanged drops the shapes of constraint id: every node's score
// for them may have moved (rebuilt on the next use).
func (x *Index) constraintChanged(id uint32) {
	for s := range x.shapes {
		if s.Constraint == id {
			delete(x.shapes, s)
		}
	}
}

func (x *Index) changed(node int) {
	w, b := node/64, uint64(1)<<(node%64)
	for _, si := range x.shapes {
		if si.dirty[w]&b == 0 {
			si.dirty[w] |= b
			si.pending = append(si.pending, int32(node))
		}
	}
}

// grown drops every cached shape: tree sizes depend on the node count, and
// joins are rare next to placements.
func (x *Index) grown(nodes int) {
	x.n = nodes
	clear(x.shapes)
}

// Best returns the best node for shape s, or -1 when none is feasible.
func (x *Index) Best(s *Shape) int {
	x.clock++
	si, ok := x.shapes[*s]
	if !ok {
		si = x.build(s)
	}
	si.lastUsed = x.clock
	for _, node := range si.pending {
		si.dirty[node/64] &^= 1 << (node % 64)
		si.score[node], _ = x.eval(int(node), s)
		si.fix(int(node))
	}
	si.pending = si.pending[:0]
	if x.n == 0 {
		return -1
	}
	best := si.tree[1]
	if si.score[best] == infeasible {
		return -1
	}
	return int(best)
}

func (x *Index) build(s *Shape) *shapeIndex {
	if len(x.shapes) >= x.MaxShapes {
		x.evict()
	}
	size := 2 // a power of two with room for every node, and a root at 1
	for size < x.n {
		size <<= 1
	}
	si := &shapeIndex{
		score: make([]int64, size),
		tree:  make([]int32, size),
		dirty: make([]uint64, (x.n+63)/64),
	}
	for i := range si.score {
		si.score[i] = infeasible
		if i < x.n {
			si.score[i], _ = x.eval(i, s)
		}
	}
	for k := size - 1; k >= 1; k-- {
		si.tree[k] = si.winner(si.child(2*k), si.child(2*k+1))
	}
	x.shapes[*s] = si
	return si
}

func (x *Index) evict() {
	var oldest Shape
	var at uint64 = ^uint64(0)
	for s, si := range x.shapes {
		if si.lastUsed < at {
			oldest, at = s, si.lastUsed
		}
	}
	delete(x.shapes, oldest)
}

// child is the node that won subtree k; leaves sit at k >= len(tree).
func (si *shapeIndex) child(k int) int32 {
	if k >= len(si.tree) {
		return int32(k - len(si.tree))
	}
	return si.tree[k]
}

func (si *shapeIndex) winner(a, b int32) int32 {
	if si.score[b] > si.score[a] {
		return b
	}
	return a // a < b always: ties keep the lower index
}

func (si *shapeIndex) fix(node int) {
	for k := (node + len(si.tree)) / 2; k >= 1; k /= 2 {
		si.tree[k] = si.winner(si.child(2*k), si.child(2*k+1))
	}
}

// Shapes is how many shapes the index holds.
func (x *Index) Shapes() int { return len(x.shapes) }
