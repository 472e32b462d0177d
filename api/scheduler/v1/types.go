package v1

import (
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

// APIVersion and Kind identify this schema.
const (
	APIVersion = "scheduler.tessera.io/v1"
	Kind       = "SchedulerConfig"
)

// PriorityAnnotation is the pod annotation that names a class directly; it
// wins over the PriorityClass value.
const PriorityAnnotation = "tessera.io/priority"

// Duration is a time.Duration written as a Go duration string ("30s"); a bad
// value is reported with its field.
type Duration = configv1.Duration

// Class is a priority class, "P0" (most urgent) to "P3".
type Class string

// The four classes, most urgent first.
const (
	P0 Class = "P0" // realtime inference: must start now
	P1 Class = "P1" // online inference
	P2 Class = "P2" // training: can wait, hates being killed
	P3 Class = "P3" // evaluation, experiments: fills the gaps
)

// Classes lists the classes, most urgent first; a class's index is its rank.
var Classes = []Class{P0, P1, P2, P3}

// Rank is the class's index in Classes (0 for P0), or -1 for an unknown class.
func (c Class) Rank() int {
	for i, k := range Classes {
		if k == c {
			return i
		}
	}
	return -1
}

// Config is the whole scheduling-engine configuration.
type Config struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Priority   PriorityConfig `json:"priority"`
	// Queues are the teams. A pod names its queue (the Kubernetes side
	// reads it from a label); pods of unknown queues go to DefaultQueue.
	Queues []QueueConfig `json:"queues,omitempty"`
	// DefaultQueue receives pods that name no queue; empty means such pods
	// are not quota-limited.
	DefaultQueue string `json:"defaultQueue,omitempty"`
	// ModelWeights is what one GPU of a model counts for in quota
	// accounting, relative to 1.0 (e.g. H100: 2.0, T4: 0.25). Models not
	// listed weigh DefaultModelWeight.
	ModelWeights       map[string]float64 `json:"modelWeights,omitempty"`
	DefaultModelWeight float64            `json:"defaultModelWeight"`
	Preemption         PreemptionConfig   `json:"preemption"`
	Gang               GangConfig         `json:"gang"`
}

// PriorityConfig maps pods to classes and shapes their wait.
type PriorityConfig struct {
	// Annotation maps accepted values of the tessera.io/priority annotation
	// to classes. Any other value is an error for that pod (it is rejected
	// with a reason, not silently given a default).
	Annotation map[string]Class `json:"annotation"`
	// ClassValues maps PriorityClass values to classes: a pod gets the class
	// of the entry with the highest AtLeast not above its value.
	ClassValues []ClassValue `json:"classValues"`
	// DefaultClass is for pods with neither annotation nor a value at or
	// above any ClassValues entry.
	DefaultClass Class        `json:"defaultClass"`
	Ageing       AgeingConfig `json:"ageing"`
	// MaxWait escalates a pod that waited this long to the front of the
	// queue (it gets MaxBoost at once). Absent or 0: never escalated.
	MaxWait map[Class]Duration `json:"maxWait,omitempty"`
	// Deadline drops a pod of the class that is still pending this long
	// after its creation: it gets a FailedScheduling event and a
	// PodScheduled=False condition (reason DeadlineExceeded) and is not
	// tried again; the pod itself is left for its owner. A pod's
	// tessera.io/deadline annotation wins. Absent: no deadline.
	Deadline map[Class]Duration `json:"deadline,omitempty"`
	Backfill BackfillConfig     `json:"backfill"`
}

// ClassValue is one row of the PriorityClass value table.
type ClassValue struct {
	AtLeast int32 `json:"atLeast"`
	Class   Class `json:"class"`
}

// PointsPerClass is how many ageing points separate two adjacent classes:
// a boost of PointsPerClass lets a P3 pod compete as a fresh P2 pod.
const PointsPerClass = 100

// AgeingConfig raises a waiting pod's effective priority: Step points every
// Interval of wait, at most MaxBoost points in all.
type AgeingConfig struct {
	Interval Duration `json:"interval"`
	Step     int      `json:"step"`
	MaxBoost int      `json:"maxBoost"`
	// Classes that age; absent means every class ages.
	Classes []Class `json:"classes,omitempty"`
	// Ceiling is the most urgent class ageing can reach (default P2: an
	// old experiment competes with training, never with inference).
	Ceiling Class `json:"ceiling,omitempty"`
	// Join is where an aged pod queues among the pods of the class it
	// reached: JoinSubmission (absent: the default) keeps its submission
	// time, JoinReach queues it from the time it reached the class (behind
	// that class's pods already waiting then), JoinAhead puts it ahead of
	// every pod that did not age into the class (with the ceiling at P2 an
	// old experiment overtakes the training backlog, never inference).
	Join string `json:"join,omitempty"`
}

// The values of AgeingConfig.Join.
const (
	JoinSubmission = "submission"
	JoinReach      = "reach"
	JoinAhead      = "ahead"
)

// BackfillConfig bounds head-of-line blocking: once a pod has waited
// ReserveAfter, capacity is held for it and smaller pods may only backfill
// what it cannot use.
type BackfillConfig struct {
	ReserveAfter Duration `json:"reserveAfter"`
	// MaxReservations bounds how many pods hold capacity at once.
	MaxReservations int `json:"maxReservations"`
}

// Resources is an amount of GPU resources. GPUMilli and GPUs are counted
// in weighted units (a GPU of weight 2.0 counts twice) unless the amount is
// a per-model quota, which counts that model's own GPUs. A resource that no
// queue of a cohort gives a nominal amount is not limited in that cohort.
type Resources struct {
	// GPUMemMiB is GPU memory in MiB (never weighted: a MiB is a MiB).
	GPUMemMiB int64 `json:"gpuMemMiB,omitempty"`
	// GPUMilli is GPU compute, 1000 per whole GPU. A MIG device counts
	// its compute slices of its GPU's (1g of 7: 142, rounded down).
	GPUMilli int64 `json:"gpuMilli,omitempty"`
	// GPUs counts whole GPUs, those a pod holds exclusively (1000 milli);
	// shares of a GPU are counted by GPUMilli and GPUMemMiB only. A MIG
	// device, held exclusively, counts as its fraction of a GPU (seven
	// 1g.10gb devices: 0.994), its memory in GPUMemMiB
	// (docs/scheduler.md, Quotas).
	GPUs int64 `json:"gpus,omitempty"`
}

// QueueConfig is one team's quota.
type QueueConfig struct {
	Name string `json:"name"`
	// Cohort is the group of queues that lend to and borrow from each
	// other; empty: the queue neither borrows nor lends.
	Cohort string `json:"cohort,omitempty"`
	// Nominal is the guaranteed quota.
	Nominal Resources `json:"nominal"`
	// BorrowingLimit caps use above Nominal; absent: only the cohort's idle
	// capacity limits it. In YAML a resource the limit does not name is not
	// limited (Parse sets it to the largest amount).
	BorrowingLimit *Resources `json:"borrowingLimit,omitempty"`
	// LendingLimit caps how much of Nominal others may borrow; absent: all
	// of it. Nominal − LendingLimit is never lent. In YAML a resource the
	// limit does not name is all lendable (Parse sets it to Nominal's).
	LendingLimit *Resources `json:"lendingLimit,omitempty"`
	// Models are optional per-GPU-model quotas in that model's own
	// (unweighted) units, on top of the weighted totals above.
	Models map[string]ModelQuota `json:"models,omitempty"`
	// FairWeight scales the queue's share when leftover capacity is shared
	// among borrowing queues (share = borrowed / weight). 0 or absent: 1.
	FairWeight float64 `json:"fairWeight,omitempty"`
}

// ModelQuota is a queue's quota on one GPU model.
type ModelQuota struct {
	Nominal        Resources  `json:"nominal"`
	BorrowingLimit *Resources `json:"borrowingLimit,omitempty"`
	LendingLimit   *Resources `json:"lendingLimit,omitempty"`
}

// PreemptionConfig protects running work.
type PreemptionConfig struct {
	// MinRunTime: a pod that has run less than this is never preempted
	// (a pod may ask for longer, not shorter).
	MinRunTime Duration `json:"minRunTime"`
	// Cooldown: a pod preempted less than this ago (and restarted) is not
	// preempted again, so a long training job is not killed over and over.
	Cooldown Duration `json:"cooldown"`
	// Preemptible says, per class, whether its pods may be preempted for
	// higher classes. Pods borrowing beyond their queue's guarantee may be
	// reclaimed whatever their class.
	Preemptible map[Class]bool `json:"preemptible"`
}

// GangConfig controls pod groups (tessera.io/pod-group, tessera.io/min-member).
type GangConfig struct {
	// Timeout: a group not fully reserved this long after its first member
	// arrived releases what it holds and is reported.
	Timeout Duration `json:"timeout"`
}
