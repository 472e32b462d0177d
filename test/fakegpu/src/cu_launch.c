/* cu_launch.c — modules, functions and kernel launches.
 *
 * A function named "fakegpu_sleep" occupies its device for *(uint64_t *)params[0]
 * nanoseconds of GPU time; every other function takes no time. Every launch entry
 * point (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, their _ptsz
 * variants, and cuGraphLaunch in cu_graph.c) queues that time on the shared
 * device timeline (cu_time.c, fg_sched.h). A zero-duration launch changes nothing
 * and costs only its argument checks. */
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

int64_t fg_kernel_ns(CUfunction f, void **kernelParams)
{
    if (!f->sleep)
        return 0;
    if (!kernelParams || !kernelParams[0])
        return -1;
    uint64_t ns = *(const uint64_t *)kernelParams[0];
    return ns > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)ns;
}

CUresult fg_launch_check(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         CUstream hStream, struct fg_stream **out)
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
    *out = fg_stream_resolve(hStream, ctx);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* A zero-duration launch outside a capture changes nothing: no lock, no syscall. */
static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, CUstream hStream, void **kernelParams)
{
    struct fg_stream *s;
    CUresult r = fg_launch_check(f, gx, gy, gz, bx, by, bz, hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    int64_t ns = fg_kernel_ns(f, kernelParams);
    if (ns < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ns == 0 && !s->capture)
        return CUDA_SUCCESS;
    return fg_launch_enqueue(s, f, (uint64_t)ns);
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

/* Attributes are accepted and ignored (cooperative, priority, clusters…): the
 * simulated device runs one kernel at a time anyway. */
static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!config || (config->numAttrs > 0 && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->hStream, kernelParams);
}

FG_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    (void)extra;
    return launch_ex(config, f, kernelParams);
}

FG_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                      void **extra)
{
    (void)extra;
    return launch_ex(config, f, kernelParams);
}

FG_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                          void **kernelParams)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams);
}

FG_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX,
                                               unsigned int blockDimY, unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams);
}
