package gang

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/internal/placement"
)

// Pod annotations that make a pod a group member.
const (
	GroupAnnotation     = "tessera.io/pod-group"
	MinMemberAnnotation = "tessera.io/min-member"
	// LocalityAnnotation is "node", "nvlink-island" or "numa-node"; absent:
	// anywhere.
	LocalityAnnotation = "tessera.io/pod-group-locality"
)

// Locality is where a group's members must be relative to each other.
type Locality int

const (
	Anywhere   Locality = iota
	SameNode            // every member on one node
	SameIsland          // every member on one NVLink island of one node
	SameNUMA            // every member's GPUs on one host NUMA node of one node
)

var localityNames = map[string]Locality{"": Anywhere, "node": SameNode, "nvlink-island": SameIsland, "numa-node": SameNUMA}

func (l Locality) String() string {
	return [...]string{"anywhere", "node", "nvlink-island", "numa-node"}[l]
}

// Spec is a group as its members describe it.
type Spec struct {
	Name      string
	MinMember int
	// Members is how many pods the group has in all, when known (0: not
	// known; the Kubernetes side counts the pods carrying the group name).
	Members  int
	Locality Locality
}

// Validate rejects a group that can never be placed or makes no sense.
func (s Spec) Validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("%s: empty group name", GroupAnnotation)
	case s.MinMember < 1:
		return fmt.Errorf("group %s: %s %d is below 1", s.Name, MinMemberAnnotation, s.MinMember)
	case s.Members > 0 && s.MinMember > s.Members:
		return fmt.Errorf("group %s: %s %d exceeds the group's %d members: it could never start", s.Name, MinMemberAnnotation, s.MinMember, s.Members)
	}
	return nil
}

// FromAnnotations reads a pod's group; ok is false for a pod outside any
// group. Every malformed value is an error naming the annotation.
func FromAnnotations(a map[string]string) (s Spec, ok bool, err error) {
	name, ok := a[GroupAnnotation]
	if !ok {
		if _, has := a[MinMemberAnnotation]; has {
			return Spec{}, false, fmt.Errorf("%s without %s", MinMemberAnnotation, GroupAnnotation)
		}
		return Spec{}, false, nil
	}
	s.Name = name
	raw, has := a[MinMemberAnnotation]
	if !has {
		return Spec{}, true, fmt.Errorf("group %s: %s missing", name, MinMemberAnnotation)
	}
	s.MinMember, err = strconv.Atoi(strings.TrimSpace(raw))
	if err != nil {
		return Spec{}, true, fmt.Errorf("group %s: %s %q is not an integer", name, MinMemberAnnotation, raw)
	}
	l, known := localityNames[a[LocalityAnnotation]]
	if !known {
		return Spec{}, true, fmt.Errorf("group %s: %s %q (want node, nvlink-island or numa-node)", name, LocalityAnnotation, a[LocalityAnnotation])
	}
	s.Locality = l
	return s, true, s.Validate()
}

// Member is one pod of a group.
type Member struct {
	Name    string
	Request placement.Request
}

// ErrTimedOut marks groups released by Expire.
var ErrTimedOut = errors.New("pod group timed out")

type group struct {
	spec     Spec
	first    time.Time
	members  []Member
	reserved map[string]placement.Decision
}

func (g *group) complete() bool { return len(g.reserved) >= g.spec.MinMember }

// Tracker holds the groups being assembled on one cluster.
type Tracker struct {
	sched   *placement.Scheduler
	timeout time.Duration
	groups  map[string]*group
	// onMember hears each member's capacity taken or given back (OnMember).
	onMember func(group, member string, d placement.Decision, held bool)
}

// NewTracker tracks groups placed by s; a group not complete timeout after
// its first member arrived is expired.
func NewTracker(s *placement.Scheduler, timeout time.Duration) *Tracker {
	return &Tracker{sched: s, timeout: timeout, groups: map[string]*group{}}
}

// OnMember sets fn to be told, at once, of every member whose capacity the
// tracker takes (held) or gives back — each trial placement while a group
// is reserved, and its rollback when the group does not fit whole. Rules
// that read which pods run where (inter-pod anti-affinity, affinity,
// topology spread) then see the members placed before the next one is
// placed, as they would see pods placed one by one; the caller's node
// filter must be refiltered by fn for the next member to see the change.
func (t *Tracker) OnMember(fn func(group, member string, d placement.Decision, held bool)) {
	t.onMember = fn
}

// Add registers a member that arrived at now. Its spec must agree with the
// group's earlier members.
func (t *Tracker) Add(spec Spec, m Member, now time.Time) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := m.Request.Validate(); err != nil {
		return fmt.Errorf("group %s member %s: %w", spec.Name, m.Name, err)
	}
	if (spec.Locality == SameIsland || spec.Locality == SameNUMA) && m.Request.NumGPU > 0 && m.Request.GPUMilli != 1000 {
		return fmt.Errorf("group %s member %s: an %s group takes whole GPUs (asks %d milli)", spec.Name, m.Name, spec.Locality, m.Request.GPUMilli)
	}
	if (spec.Locality == SameIsland || spec.Locality == SameNUMA) && m.Request.NumMIG > 0 {
		// The group is placed as one summed request whose GPUs are split
		// among the members; MIG devices do not add up that way.
		return fmt.Errorf("group %s member %s: an %s group cannot take MIG devices (asks %d of %s)", spec.Name, m.Name, spec.Locality, m.Request.NumMIG, m.Request.MIGProfile)
	}
	g := t.groups[spec.Name]
	if g == nil {
		g = &group{spec: spec, first: now, reserved: map[string]placement.Decision{}}
		t.groups[spec.Name] = g
	}
	if g.spec != spec {
		return fmt.Errorf("group %s member %s: says %+v, earlier members said %+v", spec.Name, m.Name, spec, g.spec)
	}
	if slices.ContainsFunc(g.members, func(o Member) bool { return o.Name == m.Name }) {
		return fmt.Errorf("group %s: member %s added twice", spec.Name, m.Name)
	}
	if spec.Members > 0 && len(g.members) == spec.Members {
		return fmt.Errorf("group %s: member %s is one more than the group's %d members", spec.Name, m.Name, spec.Members)
	}
	g.members = append(g.members, m)
	return nil
}

// Status is a group's progress.
type Status struct {
	Spec     Spec
	Present  int
	Reserved int
	// Complete: at least MinMember members hold their reservation.
	Complete bool
	Since    time.Time
}

// Status reports a group.
func (t *Tracker) Status(name string) (Status, bool) {
	g, ok := t.groups[name]
	if !ok {
		return Status{}, false
	}
	return Status{Spec: g.spec, Present: len(g.members), Reserved: len(g.reserved), Complete: g.complete(), Since: g.first}, true
}

// Ready reports whether enough members are present to try reserving the
// group (MinMember of them).
func (t *Tracker) Ready(name string) bool {
	g, ok := t.groups[name]
	return ok && len(g.members) >= g.spec.MinMember
}
