// Package sim replays a pod trace against a cluster with one placement policy,
// following the FGD paper's protocol: pods only arrive, one at a time, in a
// seeded random order, inflated to a target share of the cluster's GPU
// capacity; a pod that does not fit is dropped.
package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/placement/trace"
)

// Trace is a cluster and the pods to replay on it.
type Trace struct {
	Nodes []partition.NodeSpec
	Pods  []placement.Request
}

// gpuMemMiB is the device memory of the openb GPU models where it is public;
// the trace's requests are compute shares only, so it is informational.
var gpuMemMiB = map[string]int32{"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576}

// FromTrace converts parsed CSV rows into engine inputs. Nodes without GPUs
// are kept: CPU-only pods may land on them.
func FromTrace(nodes []trace.Node, pods []trace.Pod) Trace {
	var t Trace
	for _, n := range nodes {
		t.Nodes = append(t.Nodes, partition.NodeSpec{
			Name: n.Name, Model: n.Model, CPU: n.CPUMilli, MemMiB: n.MemMiB, GPUs: n.GPUs, GPUMemMiB: gpuMemMiB[n.Model],
		})
	}
	for _, p := range pods {
		t.Pods = append(t.Pods, placement.Request{
			Name: p.Name, CPUMilli: p.CPUMilli, MemMiB: p.MemMiB, NumGPU: p.NumGPU, GPUMilli: int32(p.GPUMilli), Models: p.GPUSpec,
		})
	}
	return t
}

// Load reads a node list and a pod list.
func Load(nodesCSV, podsCSV string) (Trace, error) {
	nodes, err := trace.ReadNodesFile(nodesCSV)
	if err != nil {
		return Trace{}, err
	}
	pods, err := trace.ReadPodsFile(podsCSV)
	if err != nil {
		return Trace{}, err
	}
	if len(nodes) == 0 {
		return Trace{}, fmt.Errorf("%s: no nodes", nodesCSV)
	}
	return FromTrace(nodes, pods), nil
}

// Config is one simulation run.
type Config struct {
	Policy string
	Seed   uint64
	// Tune inflates the pod list to this multiple of the cluster's GPU
	// capacity (1.3 in the paper); 0 replays the trace as it is.
	Tune float64
	// Coverage is the share of pods the fgd/tessera target workload covers
	// (0.95 in the paper).
	Coverage float64
	// ShuffleNodes breaks ties by a random node order fixed per seed
	// instead of the node list's order.
	ShuffleNodes bool
	// Scan disables the score index (for checking it).
	Scan bool
}

// Step is the cluster after one pod arrived.
type Step struct {
	ArrivedMilli   int64 // GPU compute requested by every pod so far, dropped ones included
	AllocatedMilli int64
	FragMilli      float64 // fragmentation against the target workload
	Placed         bool
}

// Run is the outcome of one simulation.
type Run struct {
	Config        Config
	CapacityMilli int64
	Steps         []Step
	Dropped       int
}

// Simulate replays t under cfg.
func Simulate(t Trace, cfg Config) (*Run, error) {
	if cfg.Coverage == 0 {
		cfg.Coverage = 0.95
	}
	nodes := t.Nodes
	if cfg.ShuffleNodes {
		nodes = slices.Clone(nodes)
		rng := rand.New(rand.NewPCG(cfg.Seed, 0x0de5))
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	}
	cluster, err := placement.NewCluster(nodes)
	if err != nil {
		return nil, err
	}
	if cluster.GPUCapacityMilli() == 0 {
		return nil, errors.New("the cluster has no GPUs: unallocated GPU % is undefined")
	}
	workload := placement.NewWorkload(cluster, t.Pods, cfg.Coverage)
	policy, err := placement.NewPolicy(cfg.Policy, cluster, placement.Options{Workload: workload, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	sched := placement.NewScheduler(cluster, policy, cfg.Scan)
	frag := placement.NewFragmentation(workload)
	run := &Run{Config: cfg, CapacityMilli: cluster.GPUCapacityMilli()}
	pods := Arrivals(t.Pods, cfg.Seed, cfg.Tune, run.CapacityMilli)
	run.Steps = make([]Step, 0, len(pods))

	fragTotal := frag.Cluster(cluster)
	var arrived, allocated int64
	for i := range pods {
		p := &pods[i]
		arrived += gpuMilli(p)
		d, err := sched.Schedule(p)
		placed := err == nil
		if placed {
			before := frag.Node(&cluster.Nodes[d.Node], cluster.ModelOf(d.Node))
			if err := cluster.Reserve(d); err != nil {
				return nil, fmt.Errorf("pod %s: engine chose a node that cannot take it: %w", p.Name, err)
			}
			fragTotal += frag.Node(&cluster.Nodes[d.Node], cluster.ModelOf(d.Node)) - before
			allocated += gpuMilli(p)
		} else {
			run.Dropped++
		}
		run.Steps = append(run.Steps, Step{ArrivedMilli: arrived, AllocatedMilli: allocated, FragMilli: fragTotal, Placed: placed})
	}
	return run, nil
}

func gpuMilli(p *placement.Request) int64 { return int64(p.NumGPU) * int64(p.GPUMilli) }

// Arrivals is the paper's arrival order: pods sorted by name, shuffled with
// the seed, then — while the total GPU request is below tune × capacity —
// extended with pods drawn uniformly, with replacement, from the original
// list, stopping before the draw that would pass tune × capacity.
func Arrivals(pods []placement.Request, seed uint64, tune float64, capacityMilli int64) []placement.Request {
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b placement.Request) int { return cmp.Compare(a.Name, b.Name) })
	rng := rand.New(rand.NewPCG(seed, 0x7e55e7a))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if tune <= 0 || len(pods) == 0 {
		return out
	}
	var total int64
	for i := range out {
		total += gpuMilli(&out[i])
	}
	if total == 0 {
		return out // no GPU pod to draw: clones would never reach the limit
	}
	limit := int64(tune * float64(capacityMilli))
	base := len(out)
	for k := 0; total < limit; k++ {
		p := out[rng.IntN(base)]
		if total+gpuMilli(&p) > limit {
			break
		}
		total += gpuMilli(&p)
		p.Name = fmt.Sprintf("%s-clone-%d", p.Name, k)
		out = append(out, p)
	}
	return out
}
