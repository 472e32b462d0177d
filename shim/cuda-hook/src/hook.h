/* hook.h — process-wide hook state and lazy initialisation. Nothing happens when the
 * library is loaded; the first intercepted call initialises (pthread_once), so a
 * program that never touches CUDA pays nothing. */
#ifndef HOOK_HOOK_H
#define HOOK_HOOK_H

#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "cuda_driver.h"

#define TESSERA_EXPORT __attribute__((visibility("default")))

extern _Atomic int hook_ready;     /* 1 once initialised (successfully or not) */
extern bool hook_failed_closed;    /* bad configuration: refuse allocations */
extern struct hook_config hook_cfg;

void hook_init_slow(void);
void hook_nvml_init(void);
bool hook_in_init(void); /* this thread is inside initialisation */

static inline void hook_ensure(void)
{
    if (__builtin_expect(atomic_load_explicit(&hook_ready, memory_order_acquire) == 0, 0))
        hook_init_slow();
}

/* The error every allocation returns when the hook failed closed. */
#define HOOK_FAIL_CLOSED_ERROR CUDA_ERROR_NOT_INITIALIZED

#endif
