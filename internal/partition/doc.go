// Package partition is the capacity model of one node: its CPU and memory, and
// for every GPU the memory and compute that are still free, the GPU model, the
// NUMA node and NVLink island it sits on, and its MIG slices when it is in MIG
// mode. It knows nothing about scheduling policy and nothing about Kubernetes;
// the placement engine asks it what fits and tells it what to reserve.
package partition
