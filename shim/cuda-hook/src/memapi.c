/* memapi.c — the exported allocation entry points. Each one: find the device,
 * charge before calling the driver, undo the charge if the driver fails, remember
 * the object so that its free gives back exactly what was charged. */
#include <stddef.h>

#include "charge.h"
#include "devices.h"
#include "limiter.h"
#include "log.h"
#include "pools.h"
#include "real.h"

/* cuMemAllocPitch: the driver picks the pitch; charge this estimate first and the
 * difference once the real pitch is known. */
#define PITCH_ALIGN 512u

static void undo_mem(uint64_t p) { REAL.cuMemFree_v2((CUdeviceptr)p); }
static void undo_vmm(uint64_t h) { REAL.cuMemRelease((CUmemGenericAllocationHandle)h); }
static void undo_array(uint64_t h) { REAL.cuArrayDestroy((CUarray)(uintptr_t)h); }
static void undo_mipmap(uint64_t h) { REAL.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h); }

static CUresult plain_alloc(const char *api, CUdeviceptr *dptr, size_t n, unsigned int flags, int managed)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    struct place pl;
    device_place(&pl);
    CUresult r = charge_admit(api, pl.idx, n);
    if (r != CUDA_SUCCESS)
        return r;
    r = managed ? REAL.cuMemAllocManaged(dptr, n, flags) : REAL.cuMemAlloc_v2(dptr, n);
    return charge_commit(r, ACCT_PTR, r == CUDA_SUCCESS ? *dptr : 0, n, pl.idx, pl.ctx, undo_mem);
}

TESSERA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return plain_alloc("cuMemAlloc_v2", dptr, bytesize, 0, 0);
}

/* Managed memory is charged in full to the device of the current context at
 * allocation: it can all migrate there, and the cap must hold when it does. */
TESSERA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    return plain_alloc("cuMemAllocManaged", dptr, bytesize, flags, 1);
}

TESSERA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                           unsigned int ElementSizeBytes)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    struct place pl;
    device_place(&pl);
    int idx = pl.idx;
    uint64_t est = 0;
    if (__builtin_mul_overflow((uint64_t)((WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN),
                               (uint64_t)Height, &est))
        est = UINT64_MAX;
    CUresult r = charge_admit("cuMemAllocPitch_v2", idx, est);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        limiter_uncharge(idx, est);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (actual > est && charge_admit("cuMemAllocPitch_v2", idx, actual - est) != CUDA_SUCCESS) {
        REAL.cuMemFree_v2(*dptr);
        limiter_uncharge(idx, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < est)
        limiter_uncharge(idx, est - actual);
    return charge_commit(CUDA_SUCCESS, ACCT_PTR, *dptr, actual, idx, pl.ctx, undo_mem);
}

TESSERA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    hook_ensure(); /* frees are never refused, even when failed closed */
    struct acct_rec rec;
    int known = acct_take(ACCT_PTR, dptr, &rec);
    CUresult r = REAL.cuMemFree_v2(dptr);
    return charge_freed(r, known, &rec);
}

/* ---- stream-ordered allocation and pools ---- */

enum pool_call { CALL_ASYNC, CALL_ASYNC_PTSZ, CALL_FROM_POOL, CALL_FROM_POOL_PTSZ };

static CUresult call_alloc(enum pool_call c, CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
    switch (c) {
    case CALL_ASYNC:
        return REAL.cuMemAllocAsync(dptr, n, s);
    case CALL_ASYNC_PTSZ:
        return REAL.cuMemAllocAsync_ptsz(dptr, n, s);
    case CALL_FROM_POOL:
        return REAL.cuMemAllocFromPoolAsync(dptr, n, pool, s);
    case CALL_FROM_POOL_PTSZ:
        return REAL.cuMemAllocFromPoolAsync_ptsz(dptr, n, pool, s);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult call_free(int ptsz, CUdeviceptr p, CUstream s)
{
    return ptsz ? REAL.cuMemFreeAsync_ptsz(p, s) : REAL.cuMemFreeAsync(p, s);
}

/* A pool allocation may be served from the pool's reservation or grow it. Charge the
 * growth it can need up front, then bring the pool's charge to what it reserves. */
static CUresult pool_alloc(const char *api, enum pool_call c, CUdeviceptr *dptr, size_t n, CUmemoryPool pool,
                           int idx, uint64_t ctx, CUstream s)
{
    if (pool == NULL || idx < 0 || !pool_note(pool, idx)) {
        /* Unknown or untracked pool, or pass-through device: charge what is handed out. */
        CUresult r = charge_admit(api, idx, n);
        if (r != CUDA_SUCCESS)
            return r;
        r = call_alloc(c, dptr, n, pool, s);
        /* The table is full only when host memory is: free synchronously then. */
        return charge_commit(r, ACCT_PTR, r == CUDA_SUCCESS ? *dptr : 0, n, idx, ctx, undo_mem);
    }
    uint64_t headroom = pool_headroom(pool);
    uint64_t pre = n > headroom ? n - headroom : 0;
    CUresult r = charge_admit(api, idx, pre);
    if (r != CUDA_SUCCESS)
        return r;
    pool_add_charge(pool, pre);
    r = call_alloc(c, dptr, n, pool, s);
    if (r != CUDA_SUCCESS) {
        pool_reconcile_pre(pool, 0, pre); /* gives back the unused pre-charge */
        return r;
    }
    int ptsz = c == CALL_ASYNC_PTSZ || c == CALL_FROM_POOL_PTSZ;
    int over = pool_reconcile_pre(pool, 1, pre) != 0;
    if (over || charge_remember(ACCT_PTR, *dptr, 0, idx, pool, ctx) != 0) {
        /* The pool grew past the cap (it reserves in chunks): undo it all. */
        hook_log(HOOK_LOG_INFO, "%s: pool %p grew past the cap; freeing and trimming", api, (void *)pool);
        call_free(ptsz, *dptr, s);
        if (REAL.cuStreamSynchronize != NULL)
            REAL.cuStreamSynchronize(s);
        if (REAL.cuMemPoolTrimTo != NULL)
            REAL.cuMemPoolTrimTo(pool, 0);
        pool_reconcile_pre(pool, 0, over ? pre : 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool_outstanding(pool, 1);
    return CUDA_SUCCESS;
}

static CUresult alloc_async(const char *api, enum pool_call c, CUdeviceptr *dptr, size_t n, CUstream s)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    struct place pl;
    CUmemoryPool pool = NULL;
    if (device_place(&pl) == CUDA_SUCCESS && pl.idx >= 0 && REAL.cuDeviceGetMemPool(&pool, pl.dev) != CUDA_SUCCESS)
        pool = NULL;
    return pool_alloc(api, c, dptr, n, pool, pl.idx, pl.ctx, s);
}

TESSERA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async("cuMemAllocAsync", CALL_ASYNC, dptr, bytesize, hStream);
}

TESSERA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async("cuMemAllocAsync_ptsz", CALL_ASYNC_PTSZ, dptr, bytesize, hStream);
}

static CUresult alloc_from_pool(const char *api, enum pool_call c, CUdeviceptr *dptr, size_t n, CUmemoryPool pool,
                                CUstream s)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    struct place pl;
    device_place(&pl);
    return pool_alloc(api, c, dptr, n, pool, pool_index(pool, pl.idx), pl.ctx, s);
}

TESSERA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream hStream)
{
    return alloc_from_pool("cuMemAllocFromPoolAsync", CALL_FROM_POOL, dptr, bytesize, pool, hStream);
}

TESSERA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                     CUstream hStream)
{
    return alloc_from_pool("cuMemAllocFromPoolAsync_ptsz", CALL_FROM_POOL_PTSZ, dptr, bytesize, pool, hStream);
}

static CUresult free_async(int ptsz, CUdeviceptr dptr, CUstream s)
{
    hook_ensure();
    struct acct_rec rec;
    int known = acct_take(ACCT_PTR, dptr, &rec);
    CUresult r = call_free(ptsz, dptr, s);
    return charge_freed(r, known, &rec);
}

TESSERA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(0, dptr, hStream); }

TESSERA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(1, dptr, hStream);
}

TESSERA_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    CUresult r = REAL.cuMemPoolCreate(pool, props);
    if (r == CUDA_SUCCESS && props != NULL && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        pool_note(*pool, device_index(props->location.id));
        pool_reconcile(*pool, 0);
    }
    return r;
}

TESSERA_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    hook_ensure();
    CUresult r = REAL.cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS)
        pool_destroyed(pool);
    return r;
}

TESSERA_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    hook_ensure();
    CUresult r = REAL.cuMemPoolTrimTo(pool, minBytesToKeep);
    pool_reconcile(pool, 0);
    return r;
}

TESSERA_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    hook_ensure();
    CUresult r = REAL.cuMemPoolSetAttribute(pool, attr, value);
    pool_reconcile(pool, 0); /* a lower release threshold can shrink the reservation */
    return r;
}

static CUresult note_device_pool(CUresult r, CUmemoryPool *pool, CUdevice dev)
{
    if (r == CUDA_SUCCESS && pool != NULL) {
        pool_note(*pool, device_index(dev));
        pool_reconcile(*pool, 0);
    }
    return r;
}

TESSERA_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    hook_ensure();
    return note_device_pool(REAL.cuDeviceGetDefaultMemPool(pool, dev), pool, dev);
}

TESSERA_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    hook_ensure();
    return note_device_pool(REAL.cuDeviceGetMemPool(pool, dev), pool, dev);
}

/* ---- virtual memory management: physical handles on a device are charged ----
 * A handle's memory lives until it is released AND its last mapping is gone (a
 * common pattern releases the handle right after mapping it), so the charge is
 * given back only then. */

TESSERA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                    const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    int idx = DEVICE_PASS_THROUGH;
    if (prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        idx = device_index(prop->location.id);
    CUresult r = charge_admit("cuMemCreate", idx, size);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuMemCreate(handle, size, prop, flags);
    return charge_commit(r, ACCT_VMM, r == CUDA_SUCCESS ? *handle : 0, size, idx, 0, undo_vmm);
}

static void vmm_settle(int rc, const struct acct_rec *rec)
{
    if (rc == 1)
        limiter_uncharge(rec->idx, rec->bytes);
}

TESSERA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    hook_ensure();
    struct acct_rec rec;
    /* Marked before the call: once released, the driver may hand the same handle
     * value out again to another thread. */
    int rc = acct_vmm_update(handle, 0, 1, &rec);
    CUresult r = REAL.cuMemRelease(handle);
    if (r != CUDA_SUCCESS) {
        /* Undo only our own mark: a handle released before stays released. */
        if (rc == 1) {
            rec.released = 0;
            acct_put(&rec);
        } else if (rc == 0) {
            acct_vmm_update(handle, 0, -1, &rec);
        }
        return r;
    }
    vmm_settle(rc, &rec);
    return r;
}

TESSERA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                 unsigned long long flags)
{
    hook_ensure();
    CUresult r = REAL.cuMemMap(ptr, size, offset, handle, flags);
    struct acct_rec rec;
    if (r == CUDA_SUCCESS && acct_vmm_update(handle, 1, 0, &rec) == 0) {
        struct acct_rec map = {.key = ptr, .owner = handle, .space = ACCT_MAP};
        if (acct_put(&map) != 0)
            acct_vmm_update(handle, -1, 0, &rec); /* cannot follow it: charge until release */
    }
    return r;
}

TESSERA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    hook_ensure();
    struct acct_rec maps[64];
    int n = acct_take_range(ACCT_MAP, ptr, ptr + size, maps, 64);
    CUresult r = REAL.cuMemUnmap(ptr, size);
    for (int i = 0; i < n; i++) {
        if (r != CUDA_SUCCESS) {
            acct_put(&maps[i]);
            continue;
        }
        struct acct_rec rec;
        vmm_settle(acct_vmm_update(maps[i].owner, -1, 0, &rec), &rec);
    }
    /* More than 64 mappings in one range: the rest, now unmapped, one batch at a time. */
    while (r == CUDA_SUCCESS && n == 64 && (n = acct_take_range(ACCT_MAP, ptr, ptr + size, maps, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            struct acct_rec rec;
            vmm_settle(acct_vmm_update(maps[i].owner, -1, 0, &rec), &rec);
        }
    }
    return r;
}

/* ---- arrays: the driver does not report their size; use its layout rule ---- */

static CUresult array_admit(const char *api, uint64_t bytes, struct place *pl)
{
    if (hook_closed())
        return HOOK_FAIL_CLOSED_ERROR;
    device_place(pl);
    return charge_admit(api, pl->idx, bytes);
}

TESSERA_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    uint64_t bytes = 0;
    if (d != NULL) {
        CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Depth = 0, .Format = d->Format,
                                      .NumChannels = d->NumChannels};
        bytes = array_bytes(&d3);
    }
    struct place pl;
    CUresult r = array_admit("cuArrayCreate_v2", bytes, &pl);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuArrayCreate_v2(pHandle, d);
    return charge_commit(r, ACCT_ARRAY, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pHandle : 0, bytes, pl.idx,
                         pl.ctx, undo_array);
}

TESSERA_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    uint64_t bytes = d != NULL ? array_bytes(d) : 0;
    struct place pl;
    CUresult r = array_admit("cuArray3DCreate_v2", bytes, &pl);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuArray3DCreate_v2(pHandle, d);
    return charge_commit(r, ACCT_ARRAY, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pHandle : 0, bytes, pl.idx,
                         pl.ctx, undo_array);
}

TESSERA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                               unsigned int numMipmapLevels)
{
    uint64_t bytes = d != NULL ? mipmap_bytes(d, numMipmapLevels) : 0;
    struct place pl;
    CUresult r = array_admit("cuMipmappedArrayCreate", bytes, &pl);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuMipmappedArrayCreate(pHandle, d, numMipmapLevels);
    return charge_commit(r, ACCT_MIPMAP, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pHandle : 0, bytes, pl.idx,
                         pl.ctx, undo_mipmap);
}

TESSERA_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    hook_ensure();
    struct acct_rec rec;
    int known = acct_take(ACCT_ARRAY, (uint64_t)(uintptr_t)hArray, &rec);
    CUresult r = REAL.cuArrayDestroy(hArray);
    return charge_freed(r, known, &rec);
}

TESSERA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    hook_ensure();
    struct acct_rec rec;
    int known = acct_take(ACCT_MIPMAP, (uint64_t)(uintptr_t)h, &rec);
    CUresult r = REAL.cuMipmappedArrayDestroy(h);
    return charge_freed(r, known, &rec);
}
