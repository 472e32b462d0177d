// Package quota keeps the books of team queues: what each queue uses of its
// guaranteed (nominal) quota, what it borrows from its cohort, and who must
// give back what when an owner needs its guarantee. It is Kueue's
// ClusterQueue/cohort model over GPU resources, without Kubernetes types:
//
//   - Decide answers, for a pod of a queue: within nominal (admit), borrowing
//     (admit: the cohort's lendable idle capacity covers it, within the
//     queue's borrowing limit and the lenders' lending limits), reclaim (the
//     pod is within its queue's guarantee but others borrowed that capacity:
//     take it back first), or held (over quota).
//   - Reclaim names which borrowed pods give way, in a documented fair order:
//     the queue with the highest dominant share first, in it the lowest
//     class, youngest first.
//   - Share is a queue's dominant-resource share of what it borrows; the
//     engine offers leftover capacity to borrowing queues in ascending share
//     (fair sharing), and Reclaim takes from queues whose share stays above
//     the requester's.
//
// GPU compute and whole GPUs are weighted by GPU model (an H100 counts more
// than a T4); GPU memory is not. Add and Remove keep the books incrementally
// (O(resources) per pod), so a decision never rebuilds them. The books know
// nothing of nodes: placement decides where, quota decides whether.
// A Books is not safe for concurrent use.
package quota
