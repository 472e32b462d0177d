/* compute.h — compute time slices in the hook: every launch path calls
 * compute_admit before the driver's launch. Without a share in force it is one
 * load of a process-wide flag. With one, launches are grouped into bursts on one
 * stream, bracketed by events: their GPU time is published in the container's
 * core region, the container's token bucket is charged with it, and no thread
 * keeps more than COMPUTE_DEPTH bursts in flight (docs/hook.md). */
#ifndef HOOK_COMPUTE_H
#define HOOK_COMPUTE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "cuda_driver.h"
#include "tessera_abi.h"

/* Set once at initialisation (before hook_ready is released): some listed GPU has
 * a share below 100 %. */
extern bool compute_enabled;

/* Maps nothing itself: the limiter hands over the core-limits file and the core
 * region. Returns whether any device is managed. */
bool compute_open(const tessera_limits *core_limits, tessera_region *core_region);

/* Before a launch on stream s (per_thread: a _ptsz entry point, where NULL means
 * the per-thread default stream). May wait: for the grant, or for the burst
 * launched a bounded amount of work earlier. */
void compute_admit_slow(CUstream s, bool per_thread);
static inline void compute_admit(CUstream s, bool per_thread)
{
    if (__builtin_expect(compute_enabled, 0))
        compute_admit_slow(s, per_thread);
}

/* Around synchronisation: close this thread's open burst before the wait, and
 * account what completed after it. */
void compute_before_sync_slow(void);
void compute_after_sync_slow(void);
static inline void compute_before_sync(void)
{
    if (__builtin_expect(compute_enabled, 0))
        compute_before_sync_slow();
}
static inline void compute_after_sync(void)
{
    if (__builtin_expect(compute_enabled, 0))
        compute_after_sync_slow();
}

/* A context ended (cuCtxDestroy, primary reset or last release; NULL: not
 * known which): every thread's events in it are gone with it. */
void compute_context_gone(CUcontext ctx);

void compute_atfork_child(void);
/* At exit: takes this process's bursts out of the region's in-flight counts
 * (the driver drops its queued work). */
void compute_process_exit(void);

#endif
