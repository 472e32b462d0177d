/* charge.c — admit / remember / settle, shared by every allocation wrapper. */
#include "charge.h"

#include "balloon.h"
#include "devices.h"
#include "limiter.h"
#include "log.h"
#include "pools.h"

CUresult charge_admit(const char *api, int idx, uint64_t n)
{
    if (idx == DEVICE_UNKNOWN) {
        hook_log(HOOK_LOG_ERROR, "%s: cannot read the device's UUID to find its cap; refusing", api);
        return HOOK_FAIL_CLOSED_ERROR;
    }
    if (idx == DEVICE_UNLISTED) {
        hook_log(HOOK_LOG_INFO, "%s: %llu bytes refused: the limits file gives this container no memory on "
                                "the current GPU", api, (unsigned long long)n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int rc = limiter_try(idx, n);
    if (__builtin_expect(rc == LIMITER_OK, 1))
        return CUDA_SUCCESS;
    if (rc == LIMITER_OVER_CAP)
        rc = balloon_wait(api, idx, n); /* a lowered cap: wait for the node to reclaim */
    if (rc == LIMITER_OK)
        return CUDA_SUCCESS;
    if (rc == LIMITER_OVER_CAP)
        limiter_note_refused(idx);
    if (rc == LIMITER_OVER_CAP)
        hook_log(HOOK_LOG_INFO, "%s: %llu bytes refused on device %d: container uses %llu of its %llu-byte cap", api,
                 (unsigned long long)n, idx, (unsigned long long)limiter_usage(idx),
                 (unsigned long long)limiter_cap(idx));
    return CUDA_ERROR_OUT_OF_MEMORY;
}

int charge_remember(uint32_t space, uint64_t key, uint64_t bytes, int idx, void *pool, uint64_t owner)
{
    if (idx < 0)
        return 0; /* pass-through device: nothing charged, nothing to remember */
    struct acct_rec rec = {.key = key, .bytes = bytes, .pool = pool, .owner = owner, .idx = idx, .space = space};
    if (acct_put(&rec) == 0)
        return 0;
    hook_log(HOOK_LOG_ERROR, "out of host memory for the allocation table; refusing the allocation");
    return -1;
}

CUresult charge_commit(CUresult r, uint32_t space, uint64_t key, uint64_t n, int idx, uint64_t owner,
                       void (*undo)(uint64_t key))
{
    if (r != CUDA_SUCCESS) {
        limiter_uncharge(idx, n);
        return r;
    }
    if (charge_remember(space, key, n, idx, NULL, owner) != 0) {
        undo(key);
        limiter_uncharge(idx, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

void charge_settle(const struct acct_rec *rec)
{
    if (rec->pool != NULL) {
        pool_reconcile((CUmemoryPool)rec->pool, 0);
        pool_outstanding((CUmemoryPool)rec->pool, -1);
    } else {
        limiter_uncharge(rec->idx, rec->bytes);
    }
}

CUresult charge_freed(CUresult r, int known, const struct acct_rec *rec)
{
    if (!known)
        return r;
    if (r != CUDA_SUCCESS)
        acct_put(rec); /* still allocated: keep charging it */
    else
        charge_settle(rec);
    return r;
}

void charge_context_gone(uint64_t ctx)
{
    struct acct_rec batch[64];
    int n;
    while ((n = acct_take_owned(ctx, batch, 64)) > 0) {
        for (int i = 0; i < n; i++)
            charge_settle(&batch[i]);
    }
}
