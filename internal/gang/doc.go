// Package gang places pod groups all or nothing. Distributed training is
// useless with 7 of its 8 workers: a member placed alone holds GPUs that do
// nothing while it waits for the rest, and two half-placed groups can block
// each other forever. A group (`tessera.io/pod-group` with
// `tessera.io/min-member`) therefore reserves capacity for all its present
// members in one step or none; a group that has not reserved min-member
// members before its timeout releases whatever it holds and is reported, so
// its capacity goes back to others.
//
// A group may ask for locality (`tessera.io/pod-group-locality`): "node"
// keeps every member on one node, "nvlink-island" keeps them on one NVLink
// island of one node (members then take whole GPUs). Placement itself is
// internal/placement's pipeline; this package only decides what is reserved
// together and when it is given back. A Tracker is not safe for concurrent
// use and starts no goroutines: the engine calls Add, Reserve and Expire
// from its loop.
package gang
