/* cu_launch.c — modules, functions and kernel launches on the simulated timeline.
 *
 * A function named "fakegpu_sleep" occupies its device for *(uint64_t *)params[0]
 * nanoseconds; every other function takes no time. Kernels of all streams and
 * processes on one device run one after another: a launch starts at
 * max(now, device tail) and moves the device, stream and context tails to its end.
 * A zero-duration launch changes nothing and costs only its argument checks. */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define FG_SLEEP_KERNEL "fakegpu_sleep"

static struct CUmod_st *free_modules;

static CUresult module_new(CUmodule *module)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&fg.mu);
    struct CUmod_st *m = free_modules;
    if (m)
        free_modules = m->next_free;
    pthread_mutex_unlock(&fg.mu);
    if (!m && !(m = malloc(sizeof *m)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->ctx = ctx;
    m->funcs = NULL;
    m->next_free = NULL;
    m->magic = FG_MAGIC_MODULE;
    *module = m;
    return CUDA_SUCCESS;
}

FG_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}

FG_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}

/* Functions stay allocated (a stale CUfunction must stay safe to reject). */
FG_API CUresult cuModuleUnload(CUmodule hmod)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!hmod || hmod->magic != FG_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&fg.mu);
    for (struct CUfunc_st *f = hmod->funcs; f; f = f->next)
        f->magic = FG_MAGIC_DEAD;
    hmod->magic = FG_MAGIC_DEAD;
    hmod->next_free = free_modules;
    free_modules = hmod;
    pthread_mutex_unlock(&fg.mu);
    return CUDA_SUCCESS;
}

FG_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!hmod || hmod->magic != FG_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    if (strlen(name) >= sizeof ((struct CUfunc_st *)0)->name)
        return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&fg.mu);
    struct CUfunc_st *f = hmod->funcs;
    while (f && strcmp(f->name, name) != 0)
        f = f->next;
    if (!f && (f = calloc(1, sizeof *f))) {
        strcpy(f->name, name);
        f->sleep = strcmp(name, FG_SLEEP_KERNEL) == 0;
        f->mod = hmod;
        f->next = hmod->funcs;
        hmod->funcs = f;
        f->magic = FG_MAGIC_FUNC;
    }
    pthread_mutex_unlock(&fg.mu);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *hfunc = f;
    return CUDA_SUCCESS;
}

static void atomic_max(_Atomic uint64_t *w, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak(w, &cur, v))
        ;
}

/* Queues dur ns of work on s: after everything already on the device. */
static void run_for(struct fg_stream *s, uint64_t dur)
{
    int dev = s->ctx->dev;
    _Atomic uint64_t *dtail = &fg.st->dev[dev].tail_ns;
    uint64_t now = fg_now_ns();
    uint64_t cur = atomic_load(dtail), end;
    do {
        uint64_t start = cur > now ? cur : now;
        end = start + dur;
    } while (!atomic_compare_exchange_weak(dtail, &cur, end));
    atomic_max(&s->tail_ns, end);
    atomic_max(&s->ctx->tail_ns, end);
    atomic_fetch_add_explicit(&fg.slot->busy_ns[dev], dur, memory_order_relaxed);
    atomic_fetch_add_explicit(&fg.st->dev[dev].busy_total_ns, dur, memory_order_relaxed);
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, CUstream hStream, void **kernelParams)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!f || f->magic != FG_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_stream *s = fg_stream_resolve(hStream, ctx);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!f->sleep)
        return CUDA_SUCCESS;
    if (!kernelParams || !kernelParams[0])
        return CUDA_ERROR_INVALID_VALUE;
    run_for(s, *(const uint64_t *)kernelParams[0]);
    return CUDA_SUCCESS;
}

FG_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                               unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    (void)sharedMemBytes;
    (void)extra;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams);
}

FG_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    (void)sharedMemBytes;
    (void)extra;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams);
}
