// Package arbiterproc runs the compute arbiter (internal/arbiter) in a
// process of its own: the node monitor re-executes itself as
// `vgpu-monitor arbiter` (Supervisor), and that process (RunChild) does
// nothing but the control loop, with every thread under SCHED_FIFO and the
// Go garbage collector off.
//
// Why a process: a collection's stop-the-world waits for every thread of the
// process to reach a safe point. In the monitor those are ordinary threads,
// as starved as anything else on a busy node, and the raised loop waited
// with them (docs/hook.md, "Compute time slices"). The arbiter's process has
// no ordinary threads and, since a step allocates nothing, collects only
// when the memory limit is near.
//
// The supervisor starts the process only while the monitor may write grants
// (it holds the node lease), stops it when that ends, restarts it with
// backoff when it dies (or kills it when it takes no steps), and the process
// dies with the monitor. While none
// runs, the hooks stop honouring the last grants once their deadline and the
// heartbeat's staleness bound pass, and fall back to their static shares.
package arbiterproc
