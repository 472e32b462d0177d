package placement

import (
	"fmt"
	"sort"

	"github.com/tessera-gpu/tessera/internal/partition"
)

// NodeView is what a policy sees of one node.
type NodeView struct {
	Index int
	Model uint8
	*partition.Node
}

// Policy is a pluggable scorer. Rank rates one candidate GPU set on one node,
// higher being better; the best candidate of a node becomes its placement and
// NodeScore turns that candidate's rank into the integer nodes are compared
// by. A coarse NodeScore makes ties on purpose: ties go to the first node in
// cluster order, which packs the cluster from one end.
type Policy interface {
	Name() string
	Rank(n NodeView, s *Shape, c Candidate) float64
	NodeScore(n NodeView, s *Shape, c Candidate, rank float64) int64
	// Deterministic policies score a node from its own state only, so the
	// engine may cache scores until the node changes.
	Deterministic() bool
}

// Options configures policies that need more than the cluster.
type Options struct {
	// Workload is the expected mix of pods (fgd, tessera). Nil means the
	// policy measures fragmentation against a uniform single-GPU mix.
	Workload *Workload
	// Seed drives the random policy.
	Seed uint64
}

// NodeSampler is implemented by policies that pick a node uniformly among
// the feasible ones instead of by score: the engine then filters every node
// but enumerates and ranks candidates on the chosen node only.
type NodeSampler interface {
	// Keep is asked for the k-th feasible node (k = 1, 2, ...) and keeps
	// it with probability 1/k (reservoir sampling).
	Keep(k int) bool
}

type factory func(c *Cluster, o Options) Policy

var policies = map[string]factory{}

func register(name string, f factory) { policies[name] = f }

// PolicyNames lists the registered policies.
func PolicyNames() []string {
	var out []string
	for n := range policies {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NewPolicy builds the named policy for cluster c.
func NewPolicy(name string, c *Cluster, o Options) (Policy, error) {
	f, ok := policies[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q (have %v)", name, PolicyNames())
	}
	return f(c, o), nil
}
