package placement

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// maxModels bounds the distinct GPU models a cluster may have: a model set is
// a 64-bit mask.
const maxModels = 64

// Cluster is the capacity of every node, in a fixed order that breaks ties.
type Cluster struct {
	Nodes    []partition.Node
	modelOf  []uint8 // model id of each node
	models   []string
	modelID  map[string]uint8
	byName   map[string]int
	cordoned []bool
	// held counts the grants reserved and not yet released, by node and
	// grant: a node only knows totals, so without it a grant never given
	// out (or released twice while another pod holds as much) would pass.
	held map[heldKey]int32
	// watchers are told which node changed, so cached scores stay exact;
	// growers are told the new node count when nodes join.
	watchers []func(node int)
	growers  []func(nodes int)
	// nodeFilter says which nodes admit which node constraints
	// (constraint.go); fit memoises its answers per constraint id and node.
	nodeFilter    NodeFilter
	constraintIDs map[string]uint32
	constraints   []string
	fit           [][]int16
	refilters     []func(id uint32)
}

// NewCluster builds an empty cluster from node descriptions, in their order.
func NewCluster(specs []partition.NodeSpec) (*Cluster, error) {
	c := &Cluster{modelID: map[string]uint8{}, byName: map[string]int{}, held: map[heldKey]int32{}}
	for _, s := range specs {
		if _, err := c.add(s); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// AddNode appends an empty node (a node joined the cluster) and returns its
// index. Nodes are never renumbered; one that leaves is cordoned.
func (c *Cluster) AddNode(s partition.NodeSpec) (int, error) {
	i, err := c.add(s)
	if err != nil {
		return -1, err
	}
	for _, fn := range c.growers {
		fn(len(c.Nodes))
	}
	return i, nil
}

func (c *Cluster) add(s partition.NodeSpec) (int, error) {
	n, err := partition.NewNode(s)
	if err != nil {
		return -1, err
	}
	if _, dup := c.byName[s.Name]; dup {
		return -1, fmt.Errorf("node %s listed twice", s.Name)
	}
	id, ok := c.internModel(s.Model)
	if !ok {
		return -1, fmt.Errorf("node %s: more than %d GPU models", s.Name, maxModels)
	}
	c.byName[s.Name] = len(c.Nodes)
	c.Nodes = append(c.Nodes, n)
	c.modelOf = append(c.modelOf, id)
	c.cordoned = append(c.cordoned, false)
	return len(c.Nodes) - 1, nil
}

// internModel returns the id of a model, giving it the next free id if it
// has none; false when every id is taken.
func (c *Cluster) internModel(name string) (uint8, bool) {
	if id, ok := c.modelID[name]; ok {
		return id, true
	}
	if len(c.models) == maxModels {
		return 0, false
	}
	id := uint8(len(c.models))
	c.models = append(c.models, name)
	c.modelID[name] = id
	return id, true
}

// NodeIndex finds a node by name.
func (c *Cluster) NodeIndex(name string) (int, bool) {
	i, ok := c.byName[name]
	return i, ok
}

// Cordon stops (or, with false, resumes) placing new pods on node i; what
// the node holds stays until released.
func (c *Cluster) Cordon(i int, cordoned bool) {
	c.cordoned[i] = cordoned
	c.changed(i)
}

// IsCordoned reports whether node i is cordoned (Cordon), whatever its
// NodeFilter says.
func (c *Cluster) IsCordoned(i int) bool { return c.cordoned[i] }

// Models is the GPU models the cluster knows, indexed by model id: those of
// its nodes, and those a workload named before any node of theirs joined.
func (c *Cluster) Models() []string { return c.models }

// ModelOf is the model id of node i.
func (c *Cluster) ModelOf(i int) uint8 { return c.modelOf[i] }

// workloadModelMask is modelMask for a workload's classes. It gives models
// without nodes an id, so that a node of such a model that joins later is
// one the classes restricted to it can use (while ids remain: a model that
// finds none is skipped, as modelMask skips unknown names).
func (c *Cluster) workloadModelMask(names []string) uint64 {
	var m uint64
	for _, n := range names {
		if id, ok := c.internModel(n); ok {
			m |= 1 << id
		}
	}
	return m
}

func (c *Cluster) modelMask(names []string) uint64 {
	var m uint64
	for _, n := range names {
		if id, ok := c.modelID[n]; ok {
			m |= 1 << id
		}
	}
	return m
}

// GPUCapacityMilli is the compute of all GPUs, in milli-GPUs.
func (c *Cluster) GPUCapacityMilli() int64 {
	var s int64
	for i := range c.Nodes {
		s += int64(len(c.Nodes[i].GPUs)) * partition.MilliPerGPU
	}
	return s
}

// Decision is where one pod goes.
type Decision struct {
	Node     int
	NodeName string
	Grant    partition.Grant
}

// Reserve takes a decision's resources from its node.
func (c *Cluster) Reserve(d Decision) error {
	if d.Node < 0 || d.Node >= len(c.Nodes) {
		return fmt.Errorf("reserve: no node %d", d.Node)
	}
	if err := c.Nodes[d.Node].Reserve(d.Grant); err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	c.held[keyOf(d)]++
	c.changed(d.Node)
	return nil
}

// Release gives a decision's resources back to its node.
func (c *Cluster) Release(d Decision) error {
	if d.Node < 0 || d.Node >= len(c.Nodes) {
		return fmt.Errorf("release: no node %d", d.Node)
	}
	k := keyOf(d)
	if c.held[k] == 0 {
		return fmt.Errorf("release: node %s holds no grant %+v", c.Nodes[d.Node].Name, d.Grant)
	}
	if err := c.Nodes[d.Node].Release(d.Grant); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if c.held[k]--; c.held[k] == 0 {
		delete(c.held, k)
	}
	c.changed(d.Node)
	return nil
}

type heldKey struct {
	node        int
	cpu, memMiB int64
	shares      string // (GPU, milli, MiB) triples in GPU order
	mig         uint64 // the MIG devices held
}

func keyOf(d Decision) heldKey {
	shares := slices.Clone(d.Grant.Shares)
	slices.SortFunc(shares, func(a, b partition.Share) int { return a.GPU - b.GPU })
	var b []byte
	for _, s := range shares {
		b = strconv.AppendInt(b, int64(s.GPU), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(s.Milli), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(s.MemMiB), 10)
		b = append(b, ',')
	}
	var mig uint64
	for _, m := range d.Grant.MIG {
		mig |= 1 << uint(m&63) // out-of-range devices are refused by the node
	}
	return heldKey{node: d.Node, cpu: d.Grant.CPU, memMiB: d.Grant.MemMiB, shares: string(b), mig: mig}
}

// MIGDevices names the MIG devices a decision grants (UUID, profile and
// parent GPU, as the node's inventory lists them): what the assignment
// annotation's containers[].mig carries to the device plugin.
func (c *Cluster) MIGDevices(d Decision) ([]partition.MIGDevice, error) {
	if d.Node < 0 || d.Node >= len(c.Nodes) {
		return nil, fmt.Errorf("MIG devices: no node %d", d.Node)
	}
	n := &c.Nodes[d.Node]
	out := make([]partition.MIGDevice, 0, len(d.Grant.MIG))
	for _, m := range d.Grant.MIG {
		if m < 0 || m >= len(n.MIG) {
			return nil, fmt.Errorf("MIG devices: node %s has no MIG device %d", n.Name, m)
		}
		out = append(out, n.MIG[m])
	}
	return out, nil
}

// Watch registers changed to be told about every node whose free capacity
// or cordon changes, and grown about the node count when nodes join.
func (c *Cluster) Watch(changed func(node int), grown func(nodes int)) {
	c.watchers = append(c.watchers, changed)
	c.growers = append(c.growers, grown)
}

func (c *Cluster) changed(node int) {
	for _, w := range c.watchers {
		w(node)
	}
}
