/* charge.h — the steps every allocation wrapper shares: admit (charge before the
 * driver call, so racing processes can never overshoot the cap), remember (so the
 * free returns exactly the bytes charged) and settle (give them back). */
#ifndef HOOK_CHARGE_H
#define HOOK_CHARGE_H

#include <stdint.h>

#include "accounting.h"
#include "cuda_driver.h"
#include "hook.h"

/* hook_ensure(), then whether the hook failed closed (allocations are refused). */
static inline int hook_closed(void)
{
    hook_ensure();
    return hook_failed_closed;
}

/* Charge n bytes on idx: CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY over the cap, or the
 * fail-closed error for a device whose identity cannot be established. */
CUresult charge_admit(const char *api, int idx, uint64_t n);
/* Remember a charged object made in context owner (0: not bound to a context); -1
 * when the table cannot grow (the caller undoes). */
int charge_remember(uint32_t space, uint64_t key, uint64_t bytes, int idx, void *pool, uint64_t owner);
/* After the driver call r for an object admitted with n bytes: when it failed, give
 * the bytes back; when it succeeded, remember the object, or (no memory for the
 * table) destroy it with undo and refuse. Returns the call's outcome. */
CUresult charge_commit(CUresult r, uint32_t space, uint64_t key, uint64_t n, int idx, uint64_t owner,
                       void (*undo)(uint64_t key));
/* Give back what a forgotten object held (its own bytes, or its pool's share). */
void charge_settle(const struct acct_rec *rec);
/* A context was destroyed, and the driver freed everything made in it. */
void charge_context_gone(uint64_t ctx);
/* After the driver freed an object taken from the table with acct_take (taken
 * before the call, because the driver may hand its address out again at once):
 * give its bytes back, or remember it again when the free failed. Returns r. */
CUresult charge_freed(CUresult r, int known, const struct acct_rec *rec);

#endif
