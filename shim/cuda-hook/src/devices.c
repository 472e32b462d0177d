/* devices.c — ordinal/handle to limits-file entry, by UUID. */
#include "devices.h"

#include <stdatomic.h>

#include "accounting.h"
#include "limiter.h"
#include "real.h"

#define MAX_ORDINALS 64

/* idx + CACHE_BIAS, so that the zero-initialised array means "not resolved yet". */
#define CACHE_BIAS 4
static _Atomic int g_cache[MAX_ORDINALS];

/* Limits are in force here: a GPU the file does not list is refused. */
static int listed(const char *uuid)
{
    int i = limiter_index(uuid);
    return i < 0 ? DEVICE_UNLISTED : i;
}

static int resolve(CUdevice dev)
{
    CUuuid u;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (REAL.cuDeviceGetUuid_v2 != NULL)
        r = REAL.cuDeviceGetUuid_v2(&u, dev);
    if (r != CUDA_SUCCESS && REAL.cuDeviceGetUuid != NULL)
        r = REAL.cuDeviceGetUuid(&u, dev);
    if (r != CUDA_SUCCESS)
        return DEVICE_UNKNOWN;
    char s[48];
    uuid_format(&u, s);
    return listed(s);
}

int device_index(CUdevice dev)
{
    if (!limiter_active())
        return DEVICE_PASS_THROUGH;
    if (dev < 0 || dev >= MAX_ORDINALS)
        return DEVICE_UNKNOWN;
    int c = atomic_load_explicit(&g_cache[dev], memory_order_relaxed);
    if (__builtin_expect(c != 0, 1))
        return c - CACHE_BIAS;
    int idx = resolve(dev);
    if (idx != DEVICE_UNKNOWN) /* a transient failure is retried next time */
        atomic_store_explicit(&g_cache[dev], idx + CACHE_BIAS, memory_order_relaxed);
    return idx;
}

CUresult device_place(struct place *pl)
{
    CUcontext ctx = NULL;
    CUresult r = CUDA_ERROR_NOT_INITIALIZED;
    if (REAL.cuCtxGetCurrent != NULL && REAL.cuCtxGetDevice != NULL &&
        (r = REAL.cuCtxGetCurrent(&ctx)) == CUDA_SUCCESS)
        r = ctx == NULL ? CUDA_ERROR_INVALID_CONTEXT : REAL.cuCtxGetDevice(&pl->dev);
    pl->ctx = (uint64_t)(uintptr_t)ctx;
    pl->idx = r == CUDA_SUCCESS ? device_index(pl->dev) : DEVICE_PASS_THROUGH;
    return r;
}

int device_index_nvml(nvmlDevice_t dev)
{
    if (!limiter_active())
        return DEVICE_PASS_THROUGH;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (REAL_NVML.nvmlDeviceGetUUID == NULL || REAL_NVML.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != NVML_SUCCESS)
        return DEVICE_UNKNOWN;
    return listed(uuid);
}
