/* cu_init.c — cuInit, version, error strings, fork handling. */
#include <stdio.h>
#include <string.h>

#include "cu_internal.h"

struct fg_driver fg = {.mu = PTHREAD_MUTEX_INITIALIZER};
__thread struct fg_tls fg_tls;

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult init_locked(void)
{
    char err[512];
    if (fg_config_load(&fg.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (fg.cfg.count == 0)
        return CUDA_ERROR_NO_DEVICE;
    fg_visible_load();
    if (fg.visible_count == 0)
        return CUDA_ERROR_NO_DEVICE;
    if (fg_config_context_mib(&fg.ctx_bytes, err, sizeof err) != 0) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t slice_ns;
    if (fg_config_slice_ns(&slice_ns, err, sizeof err) != 0) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return CUDA_ERROR_INVALID_VALUE;
    }
    fg.st = fg_state_open(&fg.cfg, slice_ns, err, sizeof err);
    if (!fg.st) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    fg_state_reap(fg.st);
    fg.slot = fg_state_claim(fg.st);
    if (!fg.slot) {
        fprintf(stderr, "fakegpu: all %d process slots of the node state are held by live processes\n",
                FG_MAX_SLOTS);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    for (int d = 0; d < FG_MAX_DEVICES; d++) {
        fg.primary[d].magic = FG_MAGIC_CTX;
        fg.primary[d].dev = d;
        fg.primary[d].primary = 1;
        fg.primary[d].null_stream.magic = FG_MAGIC_STREAM;
        fg.primary[d].null_stream.ctx = &fg.primary[d];
    }
    fg_time_reset();
    fg_pools_init();
    return CUDA_SUCCESS;
}

FG_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int s = atomic_load(&fg.init);
    if (s == 1)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&init_mu);
    s = atomic_load(&fg.init);
    if (s == 0) {
        fg.init_err = init_locked();
        atomic_store(&fg.init, fg.init_err == CUDA_SUCCESS ? 1 : 2);
    }
    CUresult r = fg.init_err;
    pthread_mutex_unlock(&init_mu);
    return r;
}

/* A fork child starts without CUDA, as with the real driver it must not use the
 * parent's contexts; unlike the real driver it may cuInit again (documented). */
static void atfork_child(void)
{
    pthread_mutex_init(&init_mu, NULL);
    pthread_mutex_init(&fg.mu, NULL);
    fg.gen++;
    fg.slot = NULL;
    for (int d = 0; d < FG_MAX_DEVICES; d++) {
        fg.primary_refs[d] = 0;
        atomic_store(&fg.primary[d].alive, 0);
        atomic_store(&fg.primary[d].tail.pos, 0);
        atomic_store(&fg.primary[d].tail.seq, 0);
        atomic_store(&fg.primary[d].null_stream.tail.pos, 0);
        atomic_store(&fg.primary[d].null_stream.tail.seq, 0);
    }
    fg_table_reset();
    fg_time_reset();
    fg_pools_reset();
    fg_vmm_reset();
    fg.init_err = CUDA_SUCCESS;
    atomic_store(&fg.init, 0);
}

__attribute__((constructor)) static void fg_register_atfork(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

FG_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FG_DRIVER_CUDA_VERSION;
    return CUDA_SUCCESS;
}

struct fg_errtext {
    CUresult code;
    const char *name;
    const char *text;
};

static const struct fg_errtext errtexts[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {FG_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct fg_errtext *find_err(CUresult e)
{
    for (size_t i = 0; i < sizeof errtexts / sizeof errtexts[0]; i++)
        if (errtexts[i].code == e)
            return &errtexts[i];
    return NULL;
}

FG_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_errtext *t = find_err(error);
    *pStr = t ? t->text : NULL;
    return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FG_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_errtext *t = find_err(error);
    *pStr = t ? t->name : NULL;
    return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
