// Package arbiter decides, node-side, which container may use each GPU's
// compute time: the tenants of one GPU live in different containers and cannot
// see each other, so their hooks publish what they did (busy time measured
// with events, demand) in their core regions, and the arbiter answers with one
// grant word per tenant in the node-written core-limits file, which the hook
// reads at every launch burst.
//
// The policy (Scheduler) is a pure function of what the regions say and the
// clock, in one place; Arbiter runs it every tick over the state directory.
// See docs/hook.md "Compute time slices" for the control loop and its worst
// cases.
package arbiter
