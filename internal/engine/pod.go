// Package engine is the scheduling cycle: who goes next and who gives way.
// It takes pods from the priority queue, asks admission (quota) whether the
// pod may run now, asks the placement engine where it fits, places it or
// fails it back into the queue with a backoff; a pod that fits nowhere may
// preempt lower-priority pods, and a pod that has waited long gets a
// capacity reservation that backfill cannot take. Each stage is its own file
// and type: queueing (internal/queue), admission.go, place.go, backfill.go,
// preemption.go; engine.go only sequences them.
//
// The engine holds no Kubernetes types. It is not safe for concurrent use:
// like a Kubernetes scheduling cycle it decides one pod at a time.
package engine

import (
	"time"

	"github.com/tessera-gpu/tessera/internal/gang"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

// Pod is one pod the engine schedules.
type Pod struct {
	Key     string
	Request placement.Request
	Class   priority.Class
	// Team is the queue (in Kueue's words, the ClusterQueue) the pod is
	// charged to.
	Team      string
	Submitted time.Time
	// Deadline (zero: none) drops the pod if it is still pending then.
	Deadline time.Time
	// MaxWait (0: none) escalates the pod once it waited that long.
	MaxWait time.Duration
	// Preemptible pods may be evicted for more urgent ones.
	Preemptible bool
	// MinRun protects a pod from preemption until it has run this long.
	MinRun time.Duration
	// CheckpointInterval (0: none) declares that the pod saves its work
	// every interval from its start: as a victim it then loses only the
	// work since its last checkpoint, so one just past a checkpoint is
	// taken before one about to reach the next (preemption.go).
	CheckpointInterval time.Duration
	// Gang, when set, makes the pod a member of a pod group placed all or
	// nothing (internal/gang); the group, not the pod, takes a place in
	// the queue once min-member members are present (gangs.go).
	Gang *gang.Spec

	// group is set on the queue entry of a Ready pod group (its token),
	// which is not a pod: it names the group.
	group string

	// preemptedAt is when the pod was last evicted (zero: never): it is
	// not evicted again within the engine's cooldown after that.
	preemptedAt time.Time
	// Preemptions counts how often the pod was evicted.
	Preemptions int
}

// Running is a pod that holds its placement.
type Running struct {
	Pod      *Pod
	Decision placement.Decision
	Started  time.Time
	// Class is the class the pod runs at for preemption: its own, or with
	// Config.ProtectAged the more urgent one it had reached by ageing or
	// escalation when it started.
	Class priority.Class
	slot  int // index in the engine's per-node list
}

// EventKind says what happened to a pod.
type EventKind int

// Events the engine reports.
const (
	Placed    EventKind = iota // the pod got Decision and starts now
	Preempted                  // the running pod was evicted for By
	Dropped                    // the pod left the queue unscheduled (Reason)
	Escalated                  // the pod passed its maximum wait
	Reserved                   // capacity on Node is now held for the pod
)

func (k EventKind) String() string {
	return [...]string{"placed", "preempted", "dropped", "escalated", "reserved"}[k]
}

// Event is one thing that happened during a cycle.
type Event struct {
	Kind     EventKind
	Time     time.Time
	Pod      *Pod
	Decision placement.Decision // Placed; Preempted: what the victim held
	// By is the pod a Preempted victim made room for.
	By *Pod
	// Ran is how long a Preempted victim had run.
	Ran    time.Duration
	Reason string
	Node   int // Reserved
	// Deadline is, for a pod Dropped because a deadline passed (its own,
	// or a gang member's for the whole group), that deadline; zero for
	// any other drop.
	Deadline time.Time
	// Err is, for a Dropped pod, the error behind Reason when there is one
	// (a gang timeout wraps gang.ErrTimedOut), for errors.Is.
	Err error
}
