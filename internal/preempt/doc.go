// Package preempt finds who gives way when a pod cannot be placed: the
// cheapest set of running pods on one node whose eviction lets the pod fit,
// or none. Kubernetes' default preemption picks victims by priority alone and
// kills the same long training job over and over; GPU work needs more care:
//
//   - only pods of a lower class whose class is preemptible, or pods running
//     on capacity borrowed beyond their queue's guarantee (when the pending
//     pod is within its own queue's guarantee), are candidates;
//   - never a pod inside its minimum run time, never one preempted within the
//     cooldown (a restarted job is left alone for a while);
//   - fewest victims first, then least work lost: GPU-seconds since the
//     pod's last checkpoint (or its start), so a pod that just checkpointed
//     is the cheapest to stop and a young pod is cheaper than an old one;
//   - a gang member is taken only with its whole gang, or not at all;
//   - every plan is verified: the victims are released on the placement
//     cluster, the pod is placed on the node, and the victims are reserved
//     back (the cluster is left as it was). A plan that would not make room
//     is never returned.
//
// The plan names the node, the victims and where the pod would go; the
// Kubernetes side evicts the victims with their grace period and schedules
// the pod when they are gone. A Preemptor is not safe for concurrent use and
// starts no goroutines.
package preempt
