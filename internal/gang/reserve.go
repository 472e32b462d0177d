package gang

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
)

// Reserve reserves every present member of group name that holds nothing
// yet, all of them or none: on any failure what this call reserved is
// released and the error names the member that did not fit. A group not yet
// complete that cannot take every present member takes its first
// min-member (in arrival order) if they fit together, so extra members do
// not keep an elastic group from starting. It returns the
// decisions made by this call; Status tells whether the group is complete.
//
// The engine normally calls it once Ready; calling it earlier holds capacity
// for the members present (up to the timeout), which a large group may need
// on a busy cluster.
func (t *Tracker) Reserve(name string) (map[string]placement.Decision, error) {
	g, ok := t.groups[name]
	if !ok {
		return nil, fmt.Errorf("gang: no group %s", name)
	}
	var todo []Member
	for _, m := range g.members {
		if _, held := g.reserved[m.Name]; !held {
			todo = append(todo, m)
		}
	}
	if len(todo) == 0 {
		return map[string]placement.Decision{}, nil
	}
	got, err := t.reserveAll(g, todo)
	if need := g.spec.MinMember - len(g.reserved); err != nil && need > 0 && need < len(todo) {
		// min-member is what must run: when every present member does not
		// fit, the first min-member of them (arrival order) start the group;
		// the rest wait and are reserved by a later call.
		got, err = t.reserveAll(g, todo[:need])
	}
	if err != nil {
		return nil, fmt.Errorf("gang: group %s (%d members present, min-member %d): %w", name, len(g.members), g.spec.MinMember, err)
	}
	for k, d := range got {
		g.reserved[k] = d
	}
	return got, nil
}

// reserveAll reserves ms all or none, with g's locality.
func (t *Tracker) reserveAll(g *group, ms []Member) (map[string]placement.Decision, error) {
	// Largest first: they are the hardest to place, and fail early.
	ms = slices.Clone(ms)
	slices.SortStableFunc(ms, func(a, b Member) int { return b.Request.NumGPU - a.Request.NumGPU })
	switch g.spec.Locality {
	case SameNode:
		return t.reserveSameNode(g, ms)
	case SameIsland:
		return t.reserveTogether(g, ms, true, false)
	case SameNUMA:
		return t.reserveTogether(g, ms, false, true)
	}
	return t.reserveOn(g, ms, -1)
}

// reserveOn places members one by one, anywhere (node < 0) or on node,
// reserving each before the next is placed (so the node filter sees it);
// on a failure it releases what it reserved.
func (t *Tracker) reserveOn(g *group, ms []Member, node int) (map[string]placement.Decision, error) {
	got := map[string]placement.Decision{}
	for _, m := range ms {
		req := m.Request
		req.Name = m.Name
		d, err := t.decide(node, &req)
		if err == nil {
			err = t.hold(g, m.Name, d)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("member %s: %w", m.Name, err), t.release(g, got))
		}
		got[m.Name] = d
	}
	return got, nil
}

// hold reserves d for member and tells OnMember's listener.
func (t *Tracker) hold(g *group, member string, d placement.Decision) error {
	if err := t.sched.Cluster().Reserve(d); err != nil {
		return err
	}
	if t.onMember != nil {
		t.onMember(g.spec.Name, member, d, true)
	}
	return nil
}

// decide places req anywhere (node < 0) or on node, without reserving.
func (t *Tracker) decide(node int, req *placement.Request) (placement.Decision, error) {
	if node < 0 {
		return t.sched.Schedule(req)
	}
	d, fits := t.sched.ScheduleOn(node, req)
	if !fits {
		return d, fmt.Errorf("node %s: %w", t.sched.Cluster().Nodes[node].Name, placement.ErrUnschedulable)
	}
	return d, nil
}

// release gives back the members' capacity ds, telling OnMember's
// listener of each.
func (t *Tracker) release(g *group, ds map[string]placement.Decision) error {
	var errs []error
	for name, d := range ds {
		if err := t.unhold(g, name, d); err != nil {
			errs = append(errs, fmt.Errorf("releasing member %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (t *Tracker) unhold(g *group, member string, d placement.Decision) error {
	if err := t.sched.Cluster().Release(d); err != nil {
		return err
	}
	if t.onMember != nil {
		t.onMember(g.spec.Name, member, d, false)
	}
	return nil
}

// heldNode is the node of the group's reserved members, or -1.
func heldNode(g *group) int {
	for _, d := range g.reserved {
		return d.Node
	}
	return -1
}

// reserveSameNode tries the node the group already holds; else the node the
// pipeline picks for the members' sum (when they add up to one request),
// then every node in cluster order.
func (t *Tracker) reserveSameNode(g *group, ms []Member) (map[string]placement.Decision, error) {
	if n := heldNode(g); n >= 0 {
		return t.reserveOn(g, ms, n)
	}
	tried := -1
	if sum, err := aggregate(ms); err == nil {
		if d, err := t.sched.Schedule(&sum); err == nil {
			tried = d.Node
			if got, err := t.reserveOn(g, ms, d.Node); err == nil {
				return got, nil
			}
		}
	}
	for n := range t.sched.Cluster().Nodes {
		if n == tried {
			continue
		}
		if got, err := t.reserveOn(g, ms, n); err == nil {
			return got, nil
		}
	}
	return nil, fmt.Errorf("no node holds all %d members together: %w", len(ms), placement.ErrUnschedulable)
}

// reserveTogether places the members' sum as one request confined to an
// NVLink island (island) or a host NUMA node (numa) and splits its GPUs
// among them in order.
func (t *Tracker) reserveTogether(g *group, ms []Member, island, numa bool) (map[string]placement.Decision, error) {
	sum, err := aggregate(ms)
	if err != nil {
		return nil, err
	}
	sum.SameIsland, sum.SameNUMA = island, numa
	what := "NVLink island"
	if numa {
		what = "NUMA node"
	}
	n := heldNode(g)
	d, err := t.decide(n, &sum)
	if err != nil {
		return nil, fmt.Errorf("no %s holds all %d members (%d GPUs): %w", what, len(ms), sum.NumGPU, err)
	}
	node := &t.sched.Cluster().Nodes[d.Node]
	if n >= 0 && len(d.Grant.Shares) > 0 {
		if held, ok := heldGPU(g, node); ok {
			got := &node.GPUs[d.Grant.Shares[0].GPU]
			if (island && got.Island != held.Island) || (numa && got.NUMA != held.NUMA) {
				return nil, fmt.Errorf("the %s the group holds on node %s has no room for %d more GPUs: %w", what, node.Name, sum.NumGPU, placement.ErrUnschedulable)
			}
		}
	}
	got := map[string]placement.Decision{}
	shares := d.Grant.Shares
	for _, m := range ms {
		md := placement.Decision{Node: d.Node, NodeName: d.NodeName, Grant: partition.Grant{CPU: m.Request.CPUMilli, MemMiB: m.Request.MemMiB}}
		for range m.Request.NumGPU {
			s := shares[0]
			shares = shares[1:]
			md.Grant.Shares = append(md.Grant.Shares, partition.Share{GPU: s.GPU, Milli: 1000, MemMiB: m.Request.GPUMemMiB})
		}
		err := fmt.Errorf("node %s refuses it beside the members placed before (node constraints or inter-pod rules): %w", d.NodeName, placement.ErrUnschedulable)
		if t.sched.Cluster().NodeAdmits(d.Node, &m.Request) {
			err = t.hold(g, m.Name, md)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("member %s: %w", m.Name, err), t.release(g, got))
		}
		got[m.Name] = md
	}
	return got, nil
}

// heldGPU is a GPU the group already holds on node n.
func heldGPU(g *group, n *partition.Node) (*partition.GPU, bool) {
	for _, d := range g.reserved {
		if len(d.Grant.Shares) > 0 {
			return &n.GPUs[d.Grant.Shares[0].GPU], true
		}
	}
	return nil, false
}

// aggregate is the members' sum as one request: CPU and memory add up, GPUs
// add up (one GPU member may take a share; several must take whole GPUs:
// a sum of shares is not one request), per-GPU memory is the largest any
// member asks, and the models are those every member accepts. Members
// placed together share one node, so they must share node constraints.
func aggregate(ms []Member) (placement.Request, error) {
	sum := placement.Request{Name: "group"}
	gpuMembers, restricted := 0, false
	for i, m := range ms {
		r := m.Request
		if i == 0 {
			sum.NodeConstraint = r.NodeConstraint
		} else if r.NodeConstraint != sum.NodeConstraint {
			return sum, fmt.Errorf("members %s and %s have different node constraints (selector, affinity, tolerations): a group placed together needs one", ms[0].Name, m.Name)
		}
		sum.CPUMilli += r.CPUMilli
		sum.MemMiB += r.MemMiB
		if r.NumGPU == 0 {
			continue
		}
		gpuMembers++
		sum.NumGPU += r.NumGPU
		sum.GPUMilli = r.GPUMilli
		sum.GPUMemMiB = max(sum.GPUMemMiB, r.GPUMemMiB)
		if len(r.Models) == 0 {
			continue
		}
		if !restricted {
			sum.Models, restricted = slices.Clone(r.Models), true
			continue
		}
		sum.Models = slices.DeleteFunc(sum.Models, func(x string) bool { return !slices.Contains(r.Models, x) })
		if len(sum.Models) == 0 {
			return sum, fmt.Errorf("no GPU model every member accepts")
		}
	}
	if gpuMembers > 1 {
		for _, m := range ms {
			if m.Request.NumGPU > 0 && m.Request.GPUMilli != 1000 {
				return sum, fmt.Errorf("member %s takes a GPU share: shares of several members do not add up to one request", m.Name)
			}
		}
		sum.GPUMilli = 1000
	}
	return sum, sum.Validate()
}

// Expired is a group released by Expire.
type Expired struct {
	Name string
	// Members are the members that were present, in arrival order.
	Members []string
	// Released is how many reservations were given back.
	Released int
	Err      error
}

// Expire releases every group that is not complete timeout after its first
// member arrived, and forgets it; the engine requeues or drops its members
// with Err as the reason.
func (t *Tracker) Expire(now time.Time) []Expired {
	var names []string
	for name, g := range t.groups {
		if !g.complete() && now.Sub(g.first) >= t.timeout {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []Expired
	for _, name := range names {
		g := t.groups[name]
		e := Expired{Name: name, Released: len(g.reserved)}
		for _, m := range g.members {
			e.Members = append(e.Members, m.Name)
		}
		reason := fmt.Sprintf("%d of min-member %d present", len(g.members), g.spec.MinMember)
		if len(g.members) >= g.spec.MinMember {
			reason = fmt.Sprintf("%d members present, %d reserved of min-member %d", len(g.members), len(g.reserved), g.spec.MinMember)
		}
		e.Err = fmt.Errorf("gang: group %s after %s: %s: %w", name, now.Sub(g.first).Round(time.Second), reason, ErrTimedOut)
		if err := t.release(g, g.reserved); err != nil {
			e.Err = errors.Join(e.Err, err)
		}
		delete(t.groups, name)
		out = append(out, e)
	}
	return out
}

// Done forgets a group whose members are bound: their reservations now
// belong to the running pods (released by the caller when they end).
func (t *Tracker) Done(name string) { delete(t.groups, name) }

// RemoveMember drops a member that was deleted while the group assembled,
// releasing its reservation if it held one.
func (t *Tracker) RemoveMember(group, member string) error {
	g, ok := t.groups[group]
	if !ok {
		return fmt.Errorf("gang: no group %s", group)
	}
	i := slices.IndexFunc(g.members, func(m Member) bool { return m.Name == member })
	if i < 0 {
		return fmt.Errorf("gang: group %s has no member %s (has %s)", group, member, memberNames(g))
	}
	if d, held := g.reserved[member]; held {
		if err := t.unhold(g, member, d); err != nil {
			return fmt.Errorf("gang: group %s member %s: %w", group, member, err)
		}
		delete(g.reserved, member)
	}
	g.members = slices.Delete(g.members, i, i+1)
	if len(g.members) == 0 {
		delete(t.groups, group)
	}
	return nil
}

func memberNames(g *group) string {
	var s []string
	for _, m := range g.members {
		s = append(s, m.Name)
	}
	return strings.Join(s, ",")
}

// Sum is the members as the one request Reserve places for a group of
// locality loc (nvlink-island: SameIsland set; numa-node: SameNUMA): CPU,
// memory and GPUs added up, as aggregate explains. A caller holding
// capacity for the group asks the placement engine about it.
func Sum(ms []Member, loc Locality) (placement.Request, error) {
	sum, err := aggregate(ms)
	sum.SameIsland, sum.SameNUMA = loc == SameIsland, loc == SameNUMA
	return sum, err
}
