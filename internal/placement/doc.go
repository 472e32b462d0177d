// Package placement is the cluster scheduler's engine: given the capacity of
// every node and one pod's request, it decides which node and which GPUs the
// pod gets and how much of each. It is a pipeline in the shape of a scheduling
// framework — filter (can the node host the pod at all), choose (which GPU
// sets on a node are candidates), score (a pluggable Policy rates each
// candidate; a node's score is its best candidate's), select (the highest
// score wins, ties go to the first node in cluster order) — followed by
// reserve and release. It holds no Kubernetes types: a Kubernetes scheduler
// plugin translates pods and nodes into Request and partition.NodeSpec.
package placement
