/* cu_ctx.c — contexts, the per-thread context stack and primary contexts. */
#include <stdlib.h>

#include "cu_internal.h"

/* Created contexts are never freed, so a stale handle stays safe to inspect. */
static struct CUctx_st **known;
static size_t nknown, capknown;

int fg_ctx_known(struct CUctx_st *ctx)
{
    if (!ctx)
        return 0;
    if (ctx >= &fg.primary[0] && ctx < &fg.primary[FG_MAX_DEVICES])
        return ctx == &fg.primary[ctx - &fg.primary[0]];
    pthread_mutex_lock(&fg.mu);
    int found = 0;
    for (size_t i = 0; i < nknown && !found; i++)
        found = known[i] == ctx;
    pthread_mutex_unlock(&fg.mu);
    return found;
}

static struct fg_tls *tls(void)
{
    struct fg_tls *t = &fg_tls;
    if (t->gen != fg.gen) {
        t->gen = fg.gen;
        t->depth = 0;
    }
    return t;
}

static int ctx_usable(struct CUctx_st *ctx)
{
    return fg_ctx_known(ctx) && atomic_load(&ctx->alive);
}

/* A live context is listed by NVML and takes FAKEGPU_CONTEXT_MIB of device memory. */
static CUresult context_up(int dev)
{
    if (fg.ctx_bytes) {
        CUresult r = fg_charge(dev, fg.ctx_bytes);
        if (r != CUDA_SUCCESS)
            return r;
    }
    atomic_fetch_add(&fg.slot->contexts[dev], 1);
    return CUDA_SUCCESS;
}

static void context_down(int dev)
{
    atomic_fetch_sub(&fg.slot->contexts[dev], 1);
    if (fg.ctx_bytes)
        fg_uncharge(dev, fg.ctx_bytes);
}

FG_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct fg_tls *t = tls();
    if (t->depth == FG_CTX_STACK)
        return CUDA_ERROR_UNKNOWN;
    CUresult r = context_up(dev);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c) {
        context_down(dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->magic = FG_MAGIC_CTX;
    c->dev = dev;
    c->null_stream.magic = FG_MAGIC_STREAM;
    c->null_stream.ctx = c;
    atomic_store(&c->alive, 1);
    pthread_mutex_lock(&fg.mu);
    if (nknown == capknown) {
        size_t ncap = capknown ? capknown * 2 : 16;
        struct CUctx_st **n = realloc(known, ncap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&fg.mu);
            free(c);
            context_down(dev);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        known = n;
        capknown = ncap;
    }
    known[nknown++] = c;
    pthread_mutex_unlock(&fg.mu);
    t->stack[t->depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx_usable(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    int expect = 1;
    if (!atomic_compare_exchange_strong(&ctx->alive, &expect, 0))
        return CUDA_ERROR_INVALID_CONTEXT;
    atomic_fetch_add(&ctx->epoch, 1);
    fg_ctx_release_resources(ctx);
    context_down(ctx->dev);
    struct fg_tls *t = tls();
    if (t->depth > 0 && t->stack[t->depth - 1] == ctx)
        t->depth--;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_tls *t = tls();
    *pctx = t->depth ? t->stack[t->depth - 1] : NULL;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct fg_tls *t = tls();
    if (!ctx) {
        if (t->depth > 0)
            t->depth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_usable(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (t->depth == 0)
        t->depth = 1;
    t->stack[t->depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx_usable(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fg_tls *t = tls();
    if (t->depth == FG_CTX_STACK)
        return CUDA_ERROR_UNKNOWN;
    t->stack[t->depth++] = ctx;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct fg_tls *t = tls();
    if (t->depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = t->stack[--t->depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxGetDevice(CUdevice *device)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->dev;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&fg.mu);
    /* Inactive: never retained, released by all, or reset (which keeps the retains). */
    if (!atomic_load(&fg.primary[dev].alive))
        r = context_up(dev);
    if (r == CUDA_SUCCESS) {
        fg.primary_refs[dev]++;
        atomic_store(&fg.primary[dev].alive, 1);
    }
    pthread_mutex_unlock(&fg.mu);
    if (r == CUDA_SUCCESS)
        *pctx = &fg.primary[dev];
    return r;
}

/* Deactivates the primary context: its memory is freed as the real driver does. */
static void primary_deactivate(CUdevice dev)
{
    atomic_store(&fg.primary[dev].alive, 0);
    atomic_fetch_add(&fg.primary[dev].epoch, 1);
    fg_ctx_release_resources(&fg.primary[dev]);
    context_down(dev);
}

FG_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fg.mu);
    if (fg.primary_refs[dev] == 0) {
        pthread_mutex_unlock(&fg.mu);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    int last = --fg.primary_refs[dev] == 0 && atomic_load(&fg.primary[dev].alive);
    pthread_mutex_unlock(&fg.mu);
    if (last)
        primary_deactivate(dev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    /* "Resetting the primary context does not release it": the retains stay counted
     * (each still needs its release) and the next retain re-activates it. */
    pthread_mutex_lock(&fg.mu);
    int was = atomic_load(&fg.primary[dev].alive);
    pthread_mutex_unlock(&fg.mu);
    if (was)
        primary_deactivate(dev);
    return CUDA_SUCCESS;
}
