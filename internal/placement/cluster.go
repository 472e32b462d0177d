package placement

import (
	"fmt"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// maxModels bounds the distinct GPU models a cluster may have: a model set is
// a 64-bit mask.
const maxModels = 64

// Cluster is the capacity of every node, in a fixed order that breaks ties.
type Cluster struct {
	Nodes   []partition.Node
	modelOf []uint8 // model id of each node
	models  []string
	modelID map[string]uint8
	// watchers are told which node changed, so cached scores stay exact.
	watchers []func(node int)
}

// NewCluster builds an empty cluster from node descriptions, in their order.
func NewCluster(specs []partition.NodeSpec) (*Cluster, error) {
	c := &Cluster{modelID: map[string]uint8{}}
	seen := map[string]bool{}
	for _, s := range specs {
		n, err := partition.NewNode(s)
		if err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("node %s listed twice", s.Name)
		}
		seen[s.Name] = true
		id, ok := c.modelID[s.Model]
		if !ok {
			if len(c.models) == maxModels {
				return nil, fmt.Errorf("node %s: more than %d GPU models", s.Name, maxModels)
			}
			id = uint8(len(c.models))
			c.models = append(c.models, s.Model)
			c.modelID[s.Model] = id
		}
		c.Nodes = append(c.Nodes, n)
		c.modelOf = append(c.modelOf, id)
	}
	return c, nil
}

// Models is the GPU models of the cluster, indexed by model id.
func (c *Cluster) Models() []string { return c.models }

// ModelOf is the model id of node i.
func (c *Cluster) ModelOf(i int) uint8 { return c.modelOf[i] }

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
	c.changed(d.Node)
	return nil
}

// Release gives a decision's resources back to its node.
func (c *Cluster) Release(d Decision) error {
	if d.Node < 0 || d.Node >= len(c.Nodes) {
		return fmt.Errorf("release: no node %d", d.Node)
	}
	if err := c.Nodes[d.Node].Release(d.Grant); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	c.changed(d.Node)
	return nil
}

// Watch registers fn to be told about every node whose free capacity changes.
func (c *Cluster) Watch(fn func(node int)) { c.watchers = append(c.watchers, fn) }

func (c *Cluster) changed(node int) {
	for _, w := range c.watchers {
		w(node)
	}
}
