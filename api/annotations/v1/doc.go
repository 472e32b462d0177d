// Package v1 is the contract between the tessera cluster scheduler and the
// tessera device plugin, carried in Kubernetes annotations as versioned JSON.
//
//   - AssignmentKey on a Pod: written by the scheduler before binding; per
//     container, the GPUs it must land on with memory MiB and core percent.
//   - AllocatedKey on a Pod: written by the device plugin after kubelet
//     allocated the container's devices; what the container really got.
//   - NodeGPUsKey on a Node: the node's GPU inventory, written by the plugin.
//
// Every parser is strict: unknown fields, unknown versions and impossible
// values are rejected with an error that names the offending field, so a
// malformed annotation is never half-applied.
package v1
