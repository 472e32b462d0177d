package preempt

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// ErrNoPlan is returned (wrapped, with the reasons per node) when no node
// can make room for the pod by preemption.
var ErrNoPlan = errors.New("no preemption makes room")

// Running is a running pod as preemption sees it.
type Running struct {
	ID string
	// Decision is where it runs, exactly as reserved on the cluster.
	Decision placement.Decision
	// Class is the priority class rank, 0 (P0) most urgent.
	Class int
	Queue string
	// Cohort is the queue's cohort (quota.Books.CohortOf): borrowed
	// capacity is reclaimed only for a queue of the cohort it came from.
	Cohort string
	Start  time.Time
	// LastPreempted is when the pod (or the job it restarts) was last
	// preempted; zero if never.
	LastPreempted time.Time
	// MinRunTime is the pod's own minimum run time; the policy's applies
	// when it is longer.
	MinRunTime time.Duration
	// CheckpointInterval > 0 declares that the pod checkpoints;
	// LastCheckpoint is when it last did (zero: not yet).
	CheckpointInterval time.Duration
	LastCheckpoint     time.Time
	// Gang is the pod group; members are preempted together or not at all.
	Gang string
	// Borrowing: the pod runs on capacity its queue borrowed beyond its
	// guarantee (quota.Books.Borrowing).
	Borrowing bool
}

// Pending is the pod that did not fit.
type Pending struct {
	Request placement.Request
	Class   int
	Queue   string
	Cohort  string
	// WithinGuarantee: the pod is within its queue's nominal quota, so pods
	// of other queues running on borrowed capacity may be taken for it
	// whatever their class.
	WithinGuarantee bool
}

// Policy is what protects running pods.
type Policy struct {
	MinRunTime time.Duration
	Cooldown   time.Duration
	// Preemptible says, per class rank, whether pods of that class may be
	// preempted for more urgent ones.
	Preemptible []bool
}

// PolicyFrom takes the policy from the scheduler configuration.
func PolicyFrom(c *schedv1.PreemptionConfig) Policy {
	p := Policy{MinRunTime: c.MinRunTime.Duration, Cooldown: c.Cooldown.Duration, Preemptible: make([]bool, len(schedv1.Classes))}
	for i, k := range schedv1.Classes {
		p.Preemptible[i] = c.Preemptible[k]
	}
	return p
}

// Plan is one node's victims.
type Plan struct {
	Node     int
	NodeName string
	// Victims are the pods to evict, cheapest first; gang members on other
	// nodes are included (the gang goes whole).
	Victims []Running
	// Decision is where the pod goes once the victims are gone, as verified.
	Decision placement.Decision
	// LostGPUSeconds is the work lost: per victim, GPUs held × time since
	// its last checkpoint (or start).
	LostGPUSeconds float64
}

// Preemptor plans preemptions on one cluster.
type Preemptor struct {
	sched  *placement.Scheduler
	policy Policy
	// MaxExactUnits bounds the exhaustive search: subsets of up to this many
	// victim units (a pod, or a whole gang) are tried cheapest first; beyond
	// it a greedy search keeps as many pods as it can.
	MaxExactUnits int
	// scratch holds the GPUs of the node copy a victim set is tried on.
	// (A Preemptor is not for concurrent use: Find releases and reserves
	// on the cluster.)
	scratch []partition.GPU
}

// New builds a preemptor that verifies plans with s's pipeline.
func New(s *placement.Scheduler, p Policy) *Preemptor {
	return &Preemptor{sched: s, policy: p, MaxExactUnits: 3}
}

// unit is what is evicted together: one pod, or a whole gang.
type unit struct {
	pods   []*Running
	onNode []placement.Decision // the members' decisions on the plan's node
	cost   cost
}

// cost orders plans: fewest victims, then least GPU work lost, then the
// least urgent victims (Σ 4 − class rank: P3 before P2 at equal work),
// then least wall time lost (CPU-only victims).
type cost struct {
	victims    int
	lostGPUSec float64
	urgency    int
	lostSec    float64
}

func (a cost) add(b cost) cost {
	return cost{a.victims + b.victims, a.lostGPUSec + b.lostGPUSec, a.urgency + b.urgency, a.lostSec + b.lostSec}
}

func (a cost) less(b cost) bool {
	switch {
	case a.victims != b.victims:
		return a.victims < b.victims
	case a.lostGPUSec != b.lostGPUSec:
		return a.lostGPUSec < b.lostGPUSec
	case a.urgency != b.urgency:
		return a.urgency < b.urgency
	}
	return a.lostSec < b.lostSec
}

// Why a running pod is not a candidate, for the error an operator reads.
const (
	whyMinRun    = "inside its minimum run time"
	whyCooldown  = "preempted within the cooldown"
	whyPriority  = "not of a lower preemptible class, nor borrowing"
	whyGang      = "in a gang with a protected member"
	whyNoRoom    = "victims would not make room"
	whyNoVictims = "no candidate victims"
)

// protection says why r may not be preempted for pod at now ("" if it may).
func (p *Preemptor) protection(r *Running, pod *Pending, now time.Time) string {
	if now.Sub(r.Start) < max(p.policy.MinRunTime, r.MinRunTime) {
		return whyMinRun
	}
	if !r.LastPreempted.IsZero() && now.Sub(r.LastPreempted) < p.policy.Cooldown {
		return whyCooldown
	}
	lower := r.Class > pod.Class && r.Class < len(p.policy.Preemptible) && p.policy.Preemptible[r.Class]
	// A borrower gives way only to a queue of its own cohort: what it
	// borrowed came from that cohort's lenders, and evicting it (whatever
	// its class) for a queue of another cohort restores no guarantee.
	reclaim := r.Borrowing && pod.WithinGuarantee && r.Queue != pod.Queue && r.Cohort == pod.Cohort
	if !lower && !reclaim {
		return whyPriority
	}
	return ""
}

// lost is the work r loses if stopped now.
func lost(r *Running, now time.Time) cost {
	since := r.Start
	if r.CheckpointInterval > 0 && r.LastCheckpoint.After(since) {
		since = r.LastCheckpoint
	}
	sec := max(0, now.Sub(since).Seconds())
	var milli int64
	for _, s := range r.Decision.Grant.Shares {
		milli += int64(s.Milli)
	}
	return cost{victims: 1, lostGPUSec: sec * float64(milli) / 1000, urgency: len(schedv1.Classes) - r.Class, lostSec: sec}
}

// Find returns the cheapest plan on one node for pod, given every running
// pod (all nodes: gangs span nodes). The cluster is left exactly as it was.
func (p *Preemptor) Find(pod Pending, running []Running, now time.Time) (*Plan, error) {
	if err := pod.Request.Validate(); err != nil {
		return nil, err
	}
	nodes := len(p.sched.Cluster().Nodes)
	for i := range running {
		if d := running[i].Decision; d.Node < 0 || d.Node >= nodes {
			return nil, fmt.Errorf("preempt: running pod %s is not reserved as given: node index %d, cluster has %d nodes", running[i].ID, d.Node, nodes)
		}
	}
	units, why := p.units(&pod, running, now)
	byNode, order := unitsByNode(units, nodes)
	// Visit nodes by their cheapest unit: a plan costs at least that much,
	// so once a plan is found, nodes that cannot beat it are skipped.
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
		plan, c, err := p.planOn(nb.node, &pod, byNode[nb.node], bound)
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

// nodeBound is a node with candidate units and the cost of its cheapest.
type nodeBound struct {
	node  int
	bound cost
}

// unitsByNode lists, per node, the units with a member there (in the order
// of units), and the nodes that have any with their cheapest unit's cost.
// One flat array holds every node's list: a full cluster has thousands of
// nodes and a map or a slice per node cost more than the search itself.
func unitsByNode(units []*unit, nodes int) ([][]*unit, []nodeBound) {
	count := make([]int, nodes+1)
	onNodes := func(u *unit, visit func(n int)) {
		for i, d := range u.onNode {
			if !slices.ContainsFunc(u.onNode[:i], func(e placement.Decision) bool { return e.Node == d.Node }) {
				visit(d.Node)
			}
		}
	}
	for _, u := range units {
		if len(u.onNode) == 1 {
			count[u.onNode[0].Node+1]++
			continue
		}
		onNodes(u, func(n int) { count[n+1]++ })
	}
	withUnits := 0
	for n := 1; n <= nodes; n++ {
		if count[n] > 0 {
			withUnits++
		}
		count[n] += count[n-1] // count[n] is now where node n's list starts
	}
	flat := make([]*unit, count[nodes])
	next := slices.Clone(count[:nodes])
	for _, u := range units {
		if len(u.onNode) == 1 {
			n := u.onNode[0].Node
			flat[next[n]] = u
			next[n]++
			continue
		}
		onNodes(u, func(n int) { flat[next[n]] = u; next[n]++ })
	}
	byNode := make([][]*unit, nodes)
	order := make([]nodeBound, 0, withUnits)
	for n := range nodes {
		us := flat[count[n]:count[n+1]:count[n+1]]
		if len(us) == 0 {
			continue
		}
		byNode[n] = us
		b := us[0].cost
		for _, u := range us[1:] {
			if u.cost.less(b) {
				b = u.cost
			}
		}
		order = append(order, nodeBound{n, b})
	}
	return byNode, order
}

func explain(why map[string]int, noRoom, nodesWithout int) string {
	var parts []string
	if noRoom > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes: %s", noRoom, whyNoRoom))
	}
	if nodesWithout > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes: %s", nodesWithout, whyNoVictims))
	}
	for _, k := range []string{whyMinRun, whyCooldown, whyPriority, whyGang} {
		if why[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d pods %s", why[k], k))
		}
	}
	return strings.Join(parts, "; ")
}

// units groups the candidates into eviction units: a pod alone, or a gang
// whose every member is a candidate. why counts the protected pods.
func (p *Preemptor) units(pod *Pending, running []Running, now time.Time) ([]*unit, map[string]int) {
	why := map[string]int{}
	var gangs map[string]*unit
	var blocked map[string]bool
	// Units, and their first member, come from arrays sized for the worst
	// case (a unit per pod) instead of a few allocations per pod.
	store := make([]unit, len(running))
	firstPod := make([]*Running, len(running))
	firstOn := make([]placement.Decision, len(running))
	used := 0
	newUnit := func() *unit {
		u := &store[used]
		u.pods, u.onNode = firstPod[used:used:used+1], firstOn[used:used:used+1]
		used++
		return u
	}
	out := make([]*unit, 0, len(running))
	for i := range running {
		r := &running[i]
		reason := p.protection(r, pod, now)
		if reason != "" {
			why[reason]++
			if r.Gang != "" {
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[r.Gang] = true
			}
		}
		var u *unit
		if r.Gang != "" {
			if gangs == nil {
				gangs = map[string]*unit{}
			}
			if u = gangs[r.Gang]; u == nil {
				u = newUnit()
				gangs[r.Gang] = u
				out = append(out, u)
			}
		} else if reason == "" {
			u = newUnit()
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
