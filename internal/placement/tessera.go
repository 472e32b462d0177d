package placement

import "math"

// tessera is the project's default policy. It keeps what makes fgd work —
// a fragmentation gradient turned into a coarse integer score whose ties go
// to a fixed node order, which packs the cluster from one end — and adds the
// three costs fgd does not see, each measured on the openb traces (see
// docs/scheduler.md):
//
//   - sliver waste: a share that leaves a GPU with a remainder no common pod
//     size can fill (1000 − 810 = 190 milli) is wasted for good, while fgd
//     rates a large, still fillable remainder as worse;
//   - CPU stranding: free GPU compute on a node whose free CPU cannot feed
//     it at the workload's CPU-per-GPU ratio is lost as surely as a sliver;
//   - model pressure: a pod that accepts any GPU model should not take a
//     model that pods restricted to it already oversubscribe.
//
// Every term is a change in milli-GPUs of expected waste, so they add up.
type tessera struct {
	frag     *Fragmentation
	waste    []float64 // sliver waste by free milli of one GPU
	pressure []float64 // by model id
	rho      float64   // CPU milli a GPU milli of the workload needs
	alpha    float64   // weight of CPU stranding
}

// Tessera's weights, chosen on the openb default trace (see the doc).
const (
	tesseraScale       = 500  // Δ (milli-GPU) per sigmoid unit in the node score
	tesseraSliverShare = 0.03 // share sizes rarer than this are not counted on to fill a GPU
	tesseraSliver      = 10   // weight of sliver waste
	tesseraPressure    = 2    // weight of model pressure
	tesseraStrand      = 1.5  // weight of CPU stranding at moderate CPU load
	tesseraRhoFactor   = 0.8  // CPU per GPU held back for a node's free GPUs, relative to the workload mean
)

func init() {
	register("tessera", func(c *Cluster, o Options) Policy { return newTessera(c, workloadOr(o)) })
}

func newTessera(c *Cluster, w *Workload) *tessera {
	load, rho := cpuLoad(c, w)
	alpha := tesseraStrand * strandWeight(load)
	if rho == 0 {
		alpha = 0 // GPU pods that need no CPU: no free CPU strands a GPU (and 0/0 is NaN)
	}
	return &tessera{
		frag:     NewFragmentation(w),
		waste:    sliverWaste(w, tesseraSliverShare),
		pressure: modelPressure(c, w),
		rho:      tesseraRhoFactor * rho,
		alpha:    alpha,
	}
}

func (p *tessera) Name() string        { return "tessera" }
func (p *tessera) Deterministic() bool { return true }

// Rank is the expected waste the placement removes (negative: adds).
func (p *tessera) Rank(n NodeView, s *Shape, c Candidate) float64 {
	gain := p.frag.Node(n.Node, n.Model) - p.frag.After(n.Node, n.Model, s, c)
	placed := int64(s.GPUMilli) * int64(popcount(c))
	if s.NumGPU == 1 && s.GPUMilli < 1000 {
		r := n.GPUs[trailingZeros(uint64(c))].FreeMilli
		gain -= tesseraSliver * (p.waste[r-s.GPUMilli] - p.waste[r])
	}
	if c != 0 && (s.AnyModel || s.Models != 1<<n.Model) {
		gain -= tesseraPressure * p.pressureOf(n.Model) * float64(placed)
	}
	if p.alpha != 0 {
		before := p.stranded(n.FreeMilli(), n.FreeCPU)
		after := p.stranded(n.FreeMilli()-placed, n.FreeCPU-s.CPUMilli)
		gain -= p.alpha * (after - before)
	}
	return gain
}

// pressureOf is model m's pressure. A model whose first node joined after the
// policy was built has none: the workload it was built from asked nothing of it.
func (p *tessera) pressureOf(m uint8) float64 {
	if int(m) < len(p.pressure) {
		return p.pressure[m]
	}
	return 0
}

// NodeScore is fgd's coarse score: nodes within a few tens of milli-GPUs of
// each other tie, and the tie goes to the first in cluster order.
func (p *tessera) NodeScore(_ NodeView, _ *Shape, _ Candidate, rank float64) int64 {
	return int64(math.Floor(100 * sigmoid(rank/tesseraScale)))
}

// stranded is the free GPU compute the node's free CPU cannot feed.
func (p *tessera) stranded(freeGPU, freeCPU int64) float64 {
	return max(0, float64(freeGPU)-float64(freeCPU)/p.rho)
}
