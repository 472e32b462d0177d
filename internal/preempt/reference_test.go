package preempt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// TestFindMatchesReference: on random clusters and pods, Find returns
// exactly the plan (node, victims in order, decision, loss) or the error of
// refFind, the search as it was before it was made faster. Equal fractional
// GPU shares, gangs spanning nodes, protected pods and several pods per GPU
// make ties and pruning matter.
func TestFindMatchesReference(t *testing.T) {
	pol := PolicyFrom(&schedv1.Default().Preemption)
	models := []string{"A100", "A100", "H100", "T4", "A100", "H100", "A100", "T4"}
	compared, plans := 0, 0
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 8))
		f := newFixture(t, models[:2+rng.IntN(len(models)-1)]...)
		nodes := len(f.sched.Cluster().Nodes)
		for i := range 30 + rng.IntN(40) {
			gpus := []int{0, 1, 1, 1, 2, 4}[rng.IntN(6)]
			milli := []int32{1000, 1000, 500, 250}[rng.IntN(4)]
			if gpus > 1 {
				milli = 1000
			}
			if gpus == 0 {
				milli = 0
			}
			node := rng.IntN(nodes)
			req := &placement.Request{Name: fmt.Sprintf("r%d", i), CPUMilli: 1000, NumGPU: gpus, GPUMilli: milli}
			d, ok := f.sched.ScheduleOn(node, req)
			if !ok {
				continue
			}
			if err := f.sched.Cluster().Reserve(d); err != nil {
				t.Fatal(err)
			}
			r := Running{ID: req.Name, Decision: d, Class: rng.IntN(4), Queue: "q", Start: now.Add(-time.Duration(rng.IntN(10)*60) * time.Minute)}
			if rng.IntN(5) == 0 {
				r.LastPreempted = now.Add(-time.Duration(rng.IntN(60)) * time.Minute)
			}
			if rng.IntN(5) == 0 {
				r.Gang = fmt.Sprintf("g%d", rng.IntN(4))
			}
			if rng.IntN(4) == 0 {
				r.Queue, r.Borrowing = "other", true
			}
			if rng.IntN(4) == 0 {
				r.CheckpointInterval, r.LastCheckpoint = time.Hour, now.Add(-time.Duration(rng.IntN(60))*time.Minute)
			}
			f.running = append(f.running, r)
		}
		for range 12 {
			gpus := []int{0, 1, 1, 2, 2, 3, 4}[rng.IntN(7)]
			milli := int32(1000)
			if gpus == 1 && rng.IntN(2) == 0 {
				milli = 500
			}
			if gpus == 0 {
				milli = 0
			}
			pod := Pending{Request: placement.Request{Name: "x", CPUMilli: 1000 + 16000*rng.Int64N(2), NumGPU: gpus, GPUMilli: milli}, Class: rng.IntN(3), Queue: "q", WithinGuarantee: rng.IntN(2) == 0}
			pr := New(f.sched, pol)
			pr.MaxExactUnits = 1 + rng.IntN(3)
			running := slices.Clone(f.running)
			want, wantErr := pr.refFind(pod, slices.Clone(running), now)
			got, gotErr := pr.Find(pod, running, now)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("seed %d: error %v, reference %v", seed, gotErr, wantErr)
			}
			if wantErr != nil && !errors.Is(wantErr, ErrNoPlan) {
				t.Fatal(wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d: plan\n%+v\nreference\n%+v", seed, got, want)
			}
			compared++
			if want != nil && len(want.Victims) > 0 {
				plans++
			}
		}
	}
	if plans < 100 {
		t.Errorf("only %d plans with victims among %d comparisons: the test proves little", plans, compared)
	}
	t.Logf("%d searches compared, %d plans with victims", compared, plans)
}

// The reference search: Find and the search functions as they were
// before they were made faster (commit 5dfb035), kept to check that the
// faster search decides the same.
// Find returns the cheapest plan on one node for pod, given every running
// pod (all nodes: gangs span nodes). The cluster is left exactly as it was.
func (p *Preemptor) refFind(pod Pending, running []Running, now time.Time) (*Plan, error) {
	if err := pod.Request.Validate(); err != nil {
		return nil, err
	}
	nodes := len(p.sched.Cluster().Nodes)
	for i := range running {
		if d := running[i].Decision; d.Node < 0 || d.Node >= nodes {
			return nil, fmt.Errorf("preempt: running pod %s is not reserved as given: node index %d, cluster has %d nodes", running[i].ID, d.Node, nodes)
		}
	}
	units, why := p.refUnits(&pod, running, now)
	byNode := map[int][]*unit{}
	for _, u := range units {
		seen := map[int]bool{}
		for _, d := range u.onNode {
			if !seen[d.Node] {
				seen[d.Node] = true
				byNode[d.Node] = append(byNode[d.Node], u)
			}
		}
	}
	// Visit nodes by their cheapest unit: a plan costs at least that much,
	// so once a plan is found, nodes that cannot beat it are skipped.
	type nodeBound struct {
		node  int
		bound cost
	}
	order := make([]nodeBound, 0, len(byNode))
	for n, us := range byNode {
		b := us[0].cost
		for _, u := range us[1:] {
			if u.cost.less(b) {
				b = u.cost
			}
		}
		order = append(order, nodeBound{n, b})
	}
	slices.SortFunc(order, func(a, b nodeBound) int {
		switch {
		case a.bound.less(b.bound):
			return -1
		case b.bound.less(a.bound):
			return 1
		}
		return a.node - b.node
	})
	var best *Plan
	var bestCost cost
	noRoom := 0
	for _, nb := range order {
		if best != nil && !nb.bound.less(bestCost) {
			continue
		}
		var bound *cost
		if best != nil {
			bound = &bestCost
		}
		plan, c, err := p.refPlanOn(nb.node, &pod, byNode[nb.node], bound)
		if err != nil {
			return nil, err
		}
		if plan == nil {
			noRoom++
			continue
		}
		if best == nil || c.less(bestCost) || (!bestCost.less(c) && plan.Node < best.Node) {
			best, bestCost = plan, c
		}
	}
	if best == nil {
		return nil, fmt.Errorf("pod %s: %w (%s)", pod.Request.Name, ErrNoPlan, explain(why, noRoom, nodes-len(order)))
	}
	return best, nil
}

// units groups the candidates into eviction units: a pod alone, or a gang
// whose every member is a candidate. why counts the protected pods.
func (p *Preemptor) refUnits(pod *Pending, running []Running, now time.Time) ([]*unit, map[string]int) {
	why := map[string]int{}
	gangs := map[string]*unit{}
	blocked := map[string]bool{}
	var out []*unit
	for i := range running {
		r := &running[i]
		reason := p.protection(r, pod, now)
		if reason != "" {
			why[reason]++
			if r.Gang != "" {
				blocked[r.Gang] = true
			}
		}
		u := &unit{}
		if r.Gang != "" {
			if gangs[r.Gang] == nil {
				gangs[r.Gang] = u
				out = append(out, u)
			}
			u = gangs[r.Gang]
		} else if reason == "" {
			out = append(out, u)
		} else {
			continue
		}
		u.pods = append(u.pods, r)
		u.onNode = append(u.onNode, r.Decision)
		u.cost = u.cost.add(lost(r, now))
	}
	kept := out[:0]
	for _, u := range out {
		if g := u.pods[0].Gang; g != "" && blocked[g] {
			why[whyGang] += len(u.pods)
			continue
		}
		kept = append(kept, u)
	}
	return kept, why
}

// planOn finds the cheapest victims among units on node n, or nil (also
// when a bound is given and nothing on n costs less). Candidate sets are
// tried on a copy of the node; the plan returned is verified on the cluster.
func (p *Preemptor) refPlanOn(n int, pod *Pending, units []*unit, bound *cost) (*Plan, cost, error) {
	req := &pod.Request
	if d, ok, err := p.fitsWith(n, req, nil); err != nil || ok {
		return p.plan(n, d, nil), cost{}, err // it fits as it is: nothing to evict
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
	if bound != nil && !p.refLowerBound(n, req, units).less(*bound) {
		return nil, cost{}, nil // cannot beat the plan in hand
	}
	if ok, err := p.refFits(n, req, units); err != nil || !ok {
		return nil, cost{}, err // not even evicting every candidate makes room
	}
	set, c, err := p.refExact(n, req, units, bound)
	if err != nil {
		return nil, cost{}, err
	}
	// The exhaustive search is optimal among sets of few units; a greedy
	// set can only do better when those units are large gangs, or when the
	// budget cut the search short.
	if set == nil || c.victims > p.MaxExactUnits {
		gset, gc, err := p.refGreedy(n, req, units)
		if err != nil {
			return nil, cost{}, err
		}
		if set == nil || gc.less(c) {
			set, c = gset, gc
		}
	}
	if bound != nil && !c.less(*bound) {
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
func (p *Preemptor) refLowerBound(n int, req *placement.Request, units []*unit) cost {
	k := 1
	if req.NumGPU > 1 {
		node := &p.sched.Cluster().Nodes[n]
		fitting := 0
		for i := range node.GPUs {
			g := &node.GPUs[i]
			if g.MIG == nil && g.FreeMilli >= req.GPUMilli && g.FreeMemMiB >= req.GPUMemMiB {
				fitting++
			}
		}
		if deficit := req.NumGPU - fitting; deficit > 1 {
			held := make([]int, len(units))
			for i, u := range units {
				for _, d := range u.onNode {
					if d.Node == n {
						held[i] += len(d.Grant.Shares)
					}
				}
			}
			slices.SortFunc(held, func(a, b int) int { return b - a })
			for k = 0; k < len(held) && deficit > 0; k++ {
				deficit -= held[k]
			}
			k = max(k, 1)
		}
	}
	k = min(k, len(units))
	victims := make([]int, len(units))
	lost := make([]float64, len(units))
	for i, u := range units {
		victims[i], lost[i] = u.cost.victims, u.cost.lostGPUSec
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

func (p *Preemptor) refExact(n int, req *placement.Request, units []*unit, bound *cost) ([]*unit, cost, error) {
	type subset struct {
		idx []int
		c   cost
	}
	var subsets []subset
	var walk func(start int, idx []int, c cost, k int)
	walk = func(start int, idx []int, c cost, k int) {
		if len(idx) == k {
			if bound == nil || c.less(*bound) {
				subsets = append(subsets, subset{slices.Clone(idx), c})
			}
			return
		}
		for i := start; i < len(units); i++ {
			walk(i+1, append(idx, i), c.add(units[i].cost), k)
		}
	}
	for k := 1; k <= p.MaxExactUnits && k <= len(units); k++ {
		if len(subsets)+binomial(len(units), k) > exactBudget {
			break
		}
		walk(0, nil, cost{}, k)
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
	for _, s := range subsets {
		set := make([]*unit, len(s.idx))
		for i, j := range s.idx {
			set[i] = units[j]
		}
		ok, err := p.refFits(n, req, set)
		if err != nil {
			return nil, cost{}, err
		}
		if ok {
			return set, s.c, nil
		}
	}
	return nil, cost{}, nil
}

func (p *Preemptor) refGreedy(n int, req *placement.Request, units []*unit) ([]*unit, cost, error) {
	var victims []*unit
	for i := len(units) - 1; i >= 0; i-- {
		rest := append(slices.Clone(victims), units[:i]...)
		ok, err := p.refFits(n, req, rest)
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

func (p *Preemptor) refFits(n int, req *placement.Request, set []*unit) (bool, error) {
	cl := p.sched.Cluster()
	node := cl.Nodes[n]
	node.GPUs = slices.Clone(node.GPUs)
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
