/* views.c — what the container sees (memory info virtualised to its cap), context
 * reservations, and the pass-through entry points that later carry compute limits
 * (launch) or are where pool reservations shrink (synchronisation). */
#include <stdatomic.h>

#include "charge.h"
#include "compute.h"
#include "devices.h"
#include "limiter.h"
#include "pools.h"
#include "real.h"

#define MAX_PRIMARY 64

/* Primary contexts per ordinal, as this process retains them. The reservation is
 * charged by the retain that activates the context; the last release or a reset
 * deactivates it, which frees everything made in it, and gives the reservation
 * back. A reset does not release: the retains stay counted (the driver's rule). */
struct primary {
    _Atomic int refs;
    _Atomic int active;    /* retained and not reset since */
    _Atomic uint64_t ctx;  /* the context, once retained */
    _Atomic int charged;   /* limits index + 1 of the charged reservation; 0: none */
};
static struct primary g_primary[MAX_PRIMARY];

TESSERA_EXPORT CUresult cuInit(unsigned int flags)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    if (REAL.cuInit == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    return REAL.cuInit(flags);
}

/* The cap as total; the cap minus the container's usage (never more than the
 * device really has free) as free. */
static void capped_view(int idx, uint64_t *free_b, uint64_t *total_b)
{
    uint64_t cap = limiter_cap(idx);
    if (cap == 0)
        return;
    uint64_t used = limiter_usage(idx);
    uint64_t left = used < cap ? cap - used : 0;
    *free_b = left < *free_b ? left : *free_b;
    *total_b = cap;
}

TESSERA_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    if (atomic_load_explicit(&pools_known, memory_order_relaxed))
        pool_reconcile_all();
    CUresult r = REAL.cuMemGetInfo_v2(free_b, total_b);
    struct place pl;
    if (r != CUDA_SUCCESS || free_b == NULL || total_b == NULL || device_place(&pl) != CUDA_SUCCESS)
        return r;
    if (pl.idx == DEVICE_UNLISTED)
        *free_b = 0; /* allocations here are refused: say so before the program tries */
    if (pl.idx < 0)
        return r;
    uint64_t f = *free_b, t = *total_b;
    capped_view(pl.idx, &f, &t);
    *free_b = (size_t)f;
    *total_b = (size_t)t;
    return r;
}

TESSERA_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    CUresult r = REAL.cuDeviceTotalMem_v2(bytes, dev);
    int idx = device_index(dev);
    if (r == CUDA_SUCCESS && bytes != NULL && idx >= 0 && limiter_cap(idx) != 0)
        *bytes = (size_t)limiter_cap(idx);
    return r;
}

/* ---- contexts: each is charged TESSERA_CTX_RESERVE_MIB for driver overhead ---- */

static void undo_ctx(uint64_t ctx) { REAL.cuCtxDestroy_v2((CUcontext)(uintptr_t)ctx); }

TESSERA_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    uint64_t n = hook_cfg.ctx_reserve_bytes;
    int idx = n ? device_index(dev) : DEVICE_PASS_THROUGH;
    CUresult r = charge_admit("cuCtxCreate_v2", idx, n);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuCtxCreate_v2(pctx, flags, dev);
    return charge_commit(r, ACCT_CTX, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pctx : 0, n, idx, 0, undo_ctx);
}

TESSERA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    hook_ensure();
    struct acct_rec rec;
    int known = acct_take(ACCT_CTX, (uint64_t)(uintptr_t)ctx, &rec);
    CUresult r = charge_freed(REAL.cuCtxDestroy_v2(ctx), known, &rec);
    if (r == CUDA_SUCCESS) {
        charge_context_gone((uint64_t)(uintptr_t)ctx);
        compute_context_gone(ctx);
    }
    return r;
}

static void primary_gone(CUdevice dev)
{
    struct primary *p = &g_primary[dev];
    atomic_store(&p->active, 0);
    int charged = atomic_exchange(&p->charged, 0);
    if (charged > 0)
        limiter_uncharge(charged - 1, hook_cfg.ctx_reserve_bytes);
    uint64_t ctx = atomic_load(&p->ctx);
    if (ctx != 0)
        charge_context_gone(ctx);
    compute_context_gone((CUcontext)(uintptr_t)ctx); /* its events are gone even if the handle stays */
}

TESSERA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    if (dev < 0 || dev >= MAX_PRIMARY)
        return REAL.cuDevicePrimaryCtxRetain(pctx, dev);
    struct primary *p = &g_primary[dev];
    uint64_t n = hook_cfg.ctx_reserve_bytes;
    int activates = atomic_exchange(&p->active, 1) == 0;
    atomic_fetch_add(&p->refs, 1);
    if (activates && n != 0) {
        int idx = device_index(dev);
        CUresult r = charge_admit("cuDevicePrimaryCtxRetain", idx, n);
        if (r != CUDA_SUCCESS) {
            atomic_fetch_sub(&p->refs, 1);
            atomic_store(&p->active, 0);
            return r;
        }
        if (idx >= 0)
            atomic_store(&p->charged, idx + 1);
    }
    CUresult r = REAL.cuDevicePrimaryCtxRetain(pctx, dev);
    if (r != CUDA_SUCCESS) {
        atomic_fetch_sub(&p->refs, 1);
        if (activates) {
            atomic_store(&p->active, 0);
            int charged = atomic_exchange(&p->charged, 0);
            if (charged > 0)
                limiter_uncharge(charged - 1, n);
        }
        return r;
    }
    atomic_store(&p->ctx, (uint64_t)(uintptr_t)*pctx);
    return r;
}

TESSERA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    hook_ensure();
    CUresult r = REAL.cuDevicePrimaryCtxRelease_v2(dev);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < MAX_PRIMARY) {
        struct primary *p = &g_primary[dev];
        int prev = atomic_load(&p->refs);
        while (prev > 0 && !atomic_compare_exchange_weak(&p->refs, &prev, prev - 1))
            ;
        if (prev == 1)
            primary_gone(dev);
    }
    return r;
}

TESSERA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    hook_ensure();
    CUresult r = REAL.cuDevicePrimaryCtxReset_v2(dev);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < MAX_PRIMARY)
        primary_gone(dev); /* deactivated, not released: refs stay */
    return r;
}

void views_atfork_child(void)
{
    for (int i = 0; i < MAX_PRIMARY; i++) {
        atomic_store(&g_primary[i].refs, 0);
        atomic_store(&g_primary[i].active, 0);
        atomic_store(&g_primary[i].ctx, 0);
        atomic_store(&g_primary[i].charged, 0);
    }
}

/* ---- synchronisation: where pools release what they keep above their threshold ---- */

static CUresult after_sync(CUresult r)
{
    compute_after_sync();
    if (atomic_load_explicit(&pools_known, memory_order_relaxed))
        pool_reconcile_all();
    return r;
}

TESSERA_EXPORT CUresult cuCtxSynchronize(void)
{
    hook_ensure();
    compute_before_sync();
    return after_sync(REAL.cuCtxSynchronize());
}

TESSERA_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    hook_ensure();
    compute_before_sync();
    return after_sync(REAL.cuStreamSynchronize(s));
}

TESSERA_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    hook_ensure();
    compute_before_sync();
    return after_sync(REAL.cuStreamSynchronize_ptsz(s));
}

TESSERA_EXPORT CUresult cuEventSynchronize(CUevent e)
{
    hook_ensure();
    compute_before_sync();
    return after_sync(REAL.cuEventSynchronize(e));
}

/* ---- NVML: the same virtual view for nvidia-smi-like readers ---- */

static int nvml_ready(void)
{
    hook_ensure();
    hook_nvml_init();
    return !hook_failed_closed;
}

/* Rewrite an NVML answer for a capped device: total = cap, free as for cuMemGetInfo. */
static void nvml_view(nvmlDevice_t dev, unsigned long long *total, unsigned long long *free_b,
                      unsigned long long *used)
{
    int idx = device_index_nvml(dev);
    if (idx == DEVICE_UNLISTED) {
        *free_b = 0;
        *used = *total;
        return;
    }
    if (idx < 0 || limiter_cap(idx) == 0)
        return;
    uint64_t f = *free_b, t = *total;
    capped_view(idx, &f, &t);
    *total = t;
    *free_b = f;
    *used = t - f;
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (REAL_NVML.nvmlDeviceGetMemoryInfo == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = REAL_NVML.nvmlDeviceGetMemoryInfo(dev, m);
    if (r == NVML_SUCCESS && m != NULL)
        nvml_view(dev, &m->total, &m->free, &m->used);
    return r;
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (REAL_NVML.nvmlDeviceGetMemoryInfo_v2 == NULL)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = REAL_NVML.nvmlDeviceGetMemoryInfo_v2(dev, m);
    if (r == NVML_SUCCESS && m != NULL) {
        unsigned long long total = m->total;
        nvml_view(dev, &m->total, &m->free, &m->used);
        if (m->total != total)
            m->reserved = 0; /* the container's slice has no system reservation */
    }
    return r;
}
