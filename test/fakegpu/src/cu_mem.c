/* cu_mem.c — linear device memory: cuMemAlloc/Pitch/Managed/Free and memory info. */
#include <stdlib.h>

#include "cu_internal.h"

#define FG_PITCH_ALIGN 512u
#define FG_LARGE_PAGE (2u << 20)
#define FG_LINEAR_KINDS                                                                            \
    (FG_KIND_BIT(FG_KIND_MEM) | FG_KIND_BIT(FG_KIND_PITCH) | FG_KIND_BIT(FG_KIND_MANAGED) |        \
     FG_KIND_BIT(FG_KIND_POOL))

/* Device addresses start high above any host mapping and only grow. */
static _Atomic uint64_t next_va = 1ull << 48;

uint64_t fg_va_alloc(uint64_t size, uint64_t align)
{
    uint64_t span = (size + align - 1) & ~(align - 1);
    for (;;) {
        uint64_t cur = atomic_load_explicit(&next_va, memory_order_relaxed);
        uint64_t base = (cur + align - 1) & ~(align - 1);
        if (atomic_compare_exchange_weak_explicit(&next_va, &cur, base + span, memory_order_relaxed,
                                                  memory_order_relaxed))
            return base;
    }
}

CUresult fg_charge(int dev, uint64_t bytes)
{
    if (bytes > fg.cfg.dev[dev].mem_bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fg_state_charge(fg.st, fg.slot, dev, bytes) == 0)
        return CUDA_SUCCESS;
    /* Dead processes may still hold memory: reclaim it, then try once more. */
    if (fg_state_reap(fg.st) > 0 && fg_state_charge(fg.st, fg.slot, dev, bytes) == 0)
        return CUDA_SUCCESS;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void fg_uncharge(int dev, uint64_t bytes)
{
    fg_state_uncharge(fg.slot, dev, bytes);
}

/* Charges `charged` bytes and records a new allocation of `size` at a fresh address. */
static CUresult alloc_linear(struct CUctx_st *ctx, CUdeviceptr *dptr, uint64_t size, uint64_t charged, int kind)
{
    CUresult r = fg_charge(ctx->dev, charged);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_entry e = {
        .key = fg_va_alloc(size, size >= FG_LARGE_PAGE ? FG_LARGE_PAGE : FG_PITCH_ALIGN),
        .size = size,
        .charged = charged,
        .ctx = ctx,
        .dev = ctx->dev,
        .kind = kind,
    };
    fg_table_insert(&e);
    *dptr = e.key;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_linear(ctx, dptr, bytesize, bytesize, FG_KIND_MEM);
}

FG_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t pitch = (WidthInBytes + FG_PITCH_ALIGN - 1) & ~(uint64_t)(FG_PITCH_ALIGN - 1);
    if (Height > UINT64_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t bytes = pitch * Height;
    r = alloc_linear(ctx, dptr, bytes, bytes, FG_KIND_PITCH);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* Managed memory is charged to the current device in full at allocation time:
 * the simulated GPU never migrates or oversubscribes (docs/fakegpu.md). */
FG_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_linear(ctx, dptr, bytesize, bytesize, FG_KIND_MANAGED);
}

/* Returns what an entry holds to the node and frees its private parts. */
static void release_entry(const struct fg_entry *e)
{
    if (e->kind == FG_KIND_POOL) {
        fg_pool_release_entry(e);
        return;
    }
    if (e->charged)
        fg_uncharge(e->dev, e->charged);
}

static void release_cb(const struct fg_entry *e, void *arg)
{
    (void)arg;
    release_entry(e);
}

void fg_ctx_release_resources(struct CUctx_st *ctx)
{
    fg_table_drain_ctx(ctx, release_cb, NULL);
}

FG_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == 0) /* the real driver treats it like free(NULL) */
        return CUDA_SUCCESS;
    struct fg_entry e;
    if (fg_table_remove(dptr, FG_LINEAR_KINDS, &e) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    release_entry(&e);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    fg_state_reap(fg.st);
    uint64_t cap = fg.cfg.dev[ctx->dev].mem_bytes;
    uint64_t used = fg_state_used(fg.st, ctx->dev);
    *total = cap;
    *free_bytes = used >= cap ? 0 : cap - used;
    return CUDA_SUCCESS;
}
