/* pacing.h — the container's token bucket of GPU time and the grant rule, without
 * the driver (unit-tested on their own). Times are CLOCK_MONOTONIC nanoseconds;
 * rates are parts per million of the device's time. See docs/hook.md
 * "Compute time slices". */
#ifndef HOOK_PACING_H
#define HOOK_PACING_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera_abi.h"

#define PACING_UNPACED UINT32_MAX
/* Most GPU time a paced container may bank while it waits or idles: small, so
 * that a 100 ms window already shows the share. */
#define PACING_BUCKET_NS 2000000ll
/* Most debt it can run up (a long kernel, a grant cut to 0). */
#define PACING_DEBT_NS 200000000ll

/* The rate in force for one device: the arbiter's grant while its heartbeat is
 * fresh (0 once the grant's turn deadline, counted from the heartbeat, has
 * passed), else the static rule (hard: the share; guaranteed: unpaced). */
uint32_t pacing_rate(uint64_t grant, uint64_t heartbeat_ns, uint64_t policy, uint32_t share_pct, uint64_t now);

/* Adds what rate earned since the last refill (one process wins each interval). */
void pacing_refill(tessera_device_compute *c, uint32_t rate, uint64_t now);
/* Charges GPU time the container used. */
void pacing_charge(tessera_device_compute *c, uint64_t busy_ns);
/* Tokens now (may be negative: debt). */
int64_t pacing_tokens(tessera_device_compute *c);
/* How often a stopped container (grant 0) looks at its grant again. */
#define PACING_POLL_NS 100000ull

/* How long to sleep before tokens can be positive again at rate (bounded). */
uint64_t pacing_wait_ns(int64_t tokens, uint32_t rate);

/* The bound on waiting for one burst in flight: a generous multiple of the work
 * it is expected to hold (expect_ns, from the measured time per launch), at
 * least PACING_INFLIGHT_MIN_NS, at most PACING_INFLIGHT_MAX_NS. Past it the
 * burst is no longer waited for: work that waits on the host (a kernel spinning
 * on a flag the same thread sets after later launches, cuStreamWaitValue32, a
 * collective waiting for a peer) must not wedge the thread in the limiter. */
#define PACING_INFLIGHT_MIN_NS 100000000ull  /* 100 ms */
#define PACING_INFLIGHT_MAX_NS 2000000000ull /* 2 s */
uint64_t pacing_inflight_bound_ns(uint64_t expect_ns);

/* Polls done(arg) until it returns non-zero or bound_ns passed, sleeping
 * between polls (20 us at first, growing to 200 us: a burst in flight is
 * ~0.5 ms of work, and a second one keeps the GPU busy meanwhile). While it
 * waits, *demand is stamped with the time every millisecond (the tenant is
 * not idle). Returns true if done, false on timeout. */
bool pacing_wait_bounded(int (*done)(void *), void *arg, uint64_t bound_ns, _Atomic uint64_t *demand);

#endif
