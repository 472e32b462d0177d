// Package v1 is the scheduling engine's typed, versioned configuration
// (`apiVersion: scheduler.tessera.io/v1`, `kind: SchedulerConfig`), meant to
// be mounted from a ConfigMap. It says who goes next and who gives way:
//
//   - priority: how a pod's PriorityClass value or `tessera.io/priority`
//     annotation maps to the classes P0 (realtime inference) … P3
//     (evaluation), how waiting pods age, when they are escalated, and when
//     a waiting pod gets a backfill reservation;
//   - queues: teams with a guaranteed (nominal) quota, a cohort they borrow
//     from and lend to, and borrowing/lending limits;
//   - modelWeights: what a GPU of each model counts for in quota accounting;
//   - preemption: minimum run time, cooldown, which classes may be preempted;
//   - gang: how long a pod group may wait to assemble.
//
// Decoding is strict: unknown fields are errors (a typo must not silently
// fall back to a default), and Validate reports every invalid value with its
// field path (`queues[2].nominal.gpuMilli: negative -5`). The package holds
// no scheduling logic; internal/priority, internal/quota, internal/preempt
// and internal/gang read these values.
package v1
