package preempt

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tessera-gpu/tessera/internal/placement"
)

// exactBudget bounds the fit checks of the exhaustive search on one node.
const exactBudget = 600

// planOn finds the cheapest victims among units on node n, or nil (also
// when a bound is given and nothing on n costs less). Candidate sets are
// tried on a copy of the node; the plan returned is verified on the cluster.
func (p *Preemptor) planOn(n int, pod *Pending, units []*unit, bound *cost) (*Plan, cost, error) {
	req := &pod.Request
	if d, ok, err := p.fitsWith(n, req, nil); err != nil || ok {
		return p.plan(n, d, nil), cost{}, err // it fits as it is: nothing to evict
	}
	if bound != nil && !p.lowerBound(n, req, units).less(*bound) {
		return nil, cost{}, nil // cannot beat the plan in hand (the bound ignores the order of units)
	}
	slices.SortStableFunc(units, func(a, b *unit) int {
		switch {
		case a.cost.less(b.cost):
			return -1
		case b.cost.less(a.cost):
			return 1
		}
		return strings.Compare(a.pods[0].ID, b.pods[0].ID)
	})
	if ok, err := p.fits(n, req, units); err != nil || !ok {
		return nil, cost{}, err // not even evicting every candidate makes room
	}
	set, c, complete, err := p.exact(n, req, units, bound)
	if err != nil {
		return nil, cost{}, err
	}
	// The exhaustive search is optimal among sets of few units; a greedy
	// set can only do better when those units are large gangs, or when the
	// budget cut the search short. Under a bound of at most MaxExactUnits
	// victims a complete search saw every set that could beat it (each unit
	// is at least one victim), so greedy, which evicts more, is not run:
	// on a full cluster most nodes visited end here.
	hopeless := set == nil && complete && bound != nil && bound.victims <= p.MaxExactUnits
	if !hopeless && (set == nil || c.victims > p.MaxExactUnits) {
		gset, gc, err := p.greedy(n, req, units)
		if err != nil {
			return nil, cost{}, err
		}
		if set == nil || gc.less(c) {
			set, c = gset, gc
		}
	}
	if set == nil || (bound != nil && !c.less(*bound)) {
		return nil, cost{}, nil
	}
	d, ok, err := p.fitsWith(n, req, set)
	if err != nil {
		return nil, cost{}, err
	}
	if !ok {
		return nil, cost{}, fmt.Errorf("preempt: plan on node %s passed on a copy of the node but not on the cluster", p.sched.Cluster().Nodes[n].Name)
	}
	return p.plan(n, d, set), c, nil
}

// lowerBound is a cost no victim set on node n can beat: the pod lacks
// some whole GPUs, each unit frees at most the GPUs it holds there, so at
// least k units must go, costing at least the k cheapest victims counts and
// (separately) the k smallest losses.
func (p *Preemptor) lowerBound(n int, req *placement.Request, units []*unit) cost {
	k := 1
	if req.NumGPU > 1 {
		node := &p.sched.Cluster().Nodes[n]
		fitting := 0
		for i := range node.GPUs {
			g := &node.GPUs[i]
			if !g.InMIGMode() && g.FreeMilli >= req.GPUMilli && g.FreeMemMiB >= req.GPUMemMiB {
				fitting++
			}
		}
		if deficit := req.NumGPU - fitting; deficit > 1 {
			var heldBuf [16]int
			held := heldBuf[:0]
			for _, u := range units {
				h := 0
				for _, d := range u.onNode {
					if d.Node == n {
						h += len(d.Grant.Shares)
					}
				}
				held = append(held, h)
			}
			slices.SortFunc(held, func(a, b int) int { return b - a })
			for k = 0; k < len(held) && deficit > 0; k++ {
				deficit -= held[k]
			}
			k = max(k, 1)
		}
	}
	k = min(k, len(units))
	// Stack buffers: this runs on every node visited, usually with a few
	// units.
	var victimsBuf [16]int
	var lostBuf [16]float64
	victims, lost := victimsBuf[:0], lostBuf[:0]
	for _, u := range units {
		victims = append(victims, u.cost.victims)
		lost = append(lost, u.cost.lostGPUSec)
	}
	slices.Sort(victims)
	slices.Sort(lost)
	var lb cost
	for i := range k {
		lb.victims += victims[i]
		lb.lostGPUSec += lost[i]
	}
	return lb
}

func (p *Preemptor) plan(n int, d placement.Decision, set []*unit) *Plan {
	pl := &Plan{Node: n, NodeName: p.sched.Cluster().Nodes[n].Name, Decision: d}
	for _, u := range set {
		for _, r := range u.pods {
			pl.Victims = append(pl.Victims, *r)
		}
		pl.LostGPUSeconds += u.cost.lostGPUSec
	}
	return pl
}

// exact tries every subset of up to MaxExactUnits units (while the budget of
// fit checks lasts), cheapest first, and returns the first that makes room;
// complete says no subset size was left out for the budget.
func (p *Preemptor) exact(n int, req *placement.Request, units []*unit, bound *cost) ([]*unit, cost, bool, error) {
	// A subset's unit indices live in one flat array (idx[at:at+k]): the
	// walk lists hundreds of subsets per node searched.
	type subset struct {
		at, k int
		c     cost
	}
	var subsets []subset
	var flat []int
	var walk func(start int, idx []int, c cost, k int)
	walk = func(start int, idx []int, c cost, k int) {
		if bound != nil && c.victims+k-len(idx) > bound.victims {
			return // every unit still to add is at least one more victim
		}
		if len(idx) == k {
			if bound == nil || c.less(*bound) {
				subsets = append(subsets, subset{len(flat), k, c})
				flat = append(flat, idx...)
			}
			return
		}
		for i := start; i < len(units); i++ {
			walk(i+1, append(idx, i), c.add(units[i].cost), k)
		}
	}
	idx := make([]int, 0, p.MaxExactUnits)
	complete := true
	for k := 1; k <= p.MaxExactUnits && k <= len(units); k++ {
		if bound != nil && k > bound.victims {
			break // k units are at least k victims: none beats the bound
		}
		if len(subsets)+binomial(len(units), k) > exactBudget {
			complete = false
			break
		}
		walk(0, idx, cost{}, k)
	}
	slices.SortStableFunc(subsets, func(a, b subset) int {
		switch {
		case a.c.less(b.c):
			return -1
		case b.c.less(a.c):
			return 1
		}
		return 0
	})
	set := make([]*unit, 0, p.MaxExactUnits)
	for _, s := range subsets {
		set = set[:0]
		for _, j := range flat[s.at : s.at+s.k] {
			set = append(set, units[j])
		}
		ok, err := p.fits(n, req, set)
		if err != nil {
			return nil, cost{}, false, err
		}
		if ok {
			return set, s.c, complete, nil
		}
	}
	return nil, cost{}, complete, nil
}

func binomial(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
	}
	return r
}

// greedy evicts every unit, then spares them one by one, most expensive
// first, as long as the pod still fits (Kubernetes' "reprieve").
func (p *Preemptor) greedy(n int, req *placement.Request, units []*unit) ([]*unit, cost, error) {
	var victims []*unit
	rest := make([]*unit, 0, len(units)) // one buffer for every trial set
	for i := len(units) - 1; i >= 0; i-- {
		rest = append(append(rest[:0], victims...), units[:i]...)
		ok, err := p.fits(n, req, rest)
		if err != nil {
			return nil, cost{}, err
		}
		if !ok {
			victims = append(victims, units[i]) // needed: sparing it leaves no room
		}
	}
	var c cost
	for _, u := range victims {
		c = c.add(u.cost)
	}
	return victims, c, nil
}

// fits releases set's grants on node n on a copy of the node and asks
// whether the pod fits the copy. The cluster is not touched.
func (p *Preemptor) fits(n int, req *placement.Request, set []*unit) (bool, error) {
	cl := p.sched.Cluster()
	node := cl.Nodes[n]
	node.GPUs = append(p.scratch[:0], node.GPUs...) // the copy's own GPUs, reused
	p.scratch = node.GPUs
	for _, u := range set {
		for i, d := range u.onNode {
			if d.Node != n {
				continue
			}
			if err := node.Release(d.Grant); err != nil {
				return false, fmt.Errorf("preempt: running pod %s is not reserved as given: %w", u.pods[i].ID, err)
			}
		}
	}
	return cl.FitsState(n, &node, req), nil
}

// fitsWith releases set's reservations on node n, asks the pipeline for a
// place on n, and reserves them back: the cluster ends as it began.
func (p *Preemptor) fitsWith(n int, req *placement.Request, set []*unit) (placement.Decision, bool, error) {
	cl := p.sched.Cluster()
	var released []placement.Decision
	restore := func() error {
		for _, d := range released {
			if err := cl.Reserve(d); err != nil {
				return fmt.Errorf("preempt: restoring node %s: %w", d.NodeName, err)
			}
		}
		return nil
	}
	for _, u := range set {
		for i, d := range u.onNode {
			if d.Node != n {
				continue
			}
			if err := cl.Release(d); err != nil {
				return placement.Decision{}, false, errors.Join(fmt.Errorf("preempt: running pod %s is not reserved as given: %w", u.pods[i].ID, err), restore())
			}
			released = append(released, d)
		}
	}
	d, ok := p.sched.ScheduleOn(n, req)
	if rerr := restore(); rerr != nil {
		return placement.Decision{}, false, rerr
	}
	return d, ok, nil
}
