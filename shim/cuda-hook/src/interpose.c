/* interpose.c — the symbol table of intercepted entry points, and the two lookup
 * paths that bypass exported symbols: cuGetProcAddress(_v2) and dlsym.
 *
 * The rule on both paths: ask the real implementation first, then hand out our
 * wrapper only when the answer is the real function we wrap. That honours the
 * driver's choice of version (_v2, _ptsz) and flags, and never wraps a symbol we do
 * not handle. When a driver answers a cuGetProcAddress query with a pointer we do
 * not recognise (an internal alias), the name and version decide instead. */
#include "interpose.h"

#include <stdint.h>
#include <string.h>

#include "glibc_baseline.h"
#include "hook.h"
#include "launch_types.h"
#include "log.h"
#include "real.h"

enum stream_kind { NO_STREAM, LEGACY_STREAM, PER_THREAD_STREAM };

struct entry {
    const char *name;    /* exported name */
    const char *base;    /* name as cuGetProcAddress is asked for it */
    int min_version;     /* first CUDA version whose query returns this variant */
    int max_version;     /* first version that returns a newer variant (0: none) */
    enum stream_kind stream;
    void *wrapper;
    void **real;
};

#define E(n, b, lo, hi, st) {#n, b, lo, hi, st, (void *)n, (void **)&REAL.n}
#define N(n) {#n, NULL, 0, 0, NO_STREAM, (void *)n, (void **)&REAL_NVML.n}

static const struct entry g_entries[] = {
    E(cuInit, "cuInit", 2000, 0, NO_STREAM),
    E(cuGetProcAddress, "cuGetProcAddress", 11030, 12000, NO_STREAM),
    E(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, NO_STREAM),
    E(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, NO_STREAM),
    E(cuCtxCreate_v2, "cuCtxCreate", 3020, 11040, NO_STREAM),
    E(cuCtxDestroy_v2, "cuCtxDestroy", 4000, 0, NO_STREAM),
    E(cuCtxSynchronize, "cuCtxSynchronize", 2000, 0, NO_STREAM),
    E(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0, NO_STREAM),
    E(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0, NO_STREAM),
    E(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0, NO_STREAM),
    E(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, NO_STREAM),
    E(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, NO_STREAM),
    E(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0, NO_STREAM),
    E(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0, NO_STREAM),
    E(cuMemFree_v2, "cuMemFree", 3020, 0, NO_STREAM),
    E(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0, LEGACY_STREAM),
    E(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 0, PER_THREAD_STREAM),
    E(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0, LEGACY_STREAM),
    E(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 0, PER_THREAD_STREAM),
    E(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0, LEGACY_STREAM),
    E(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 0, PER_THREAD_STREAM),
    E(cuMemPoolCreate, "cuMemPoolCreate", 11020, 0, NO_STREAM),
    E(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0, NO_STREAM),
    E(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020, 0, NO_STREAM),
    E(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, 0, NO_STREAM),
    E(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0, NO_STREAM),
    E(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, 0, NO_STREAM),
    E(cuMemCreate, "cuMemCreate", 10020, 0, NO_STREAM),
    E(cuMemRelease, "cuMemRelease", 10020, 0, NO_STREAM),
    E(cuMemMap, "cuMemMap", 10020, 0, NO_STREAM),
    E(cuMemUnmap, "cuMemUnmap", 10020, 0, NO_STREAM),
    E(cuArrayCreate_v2, "cuArrayCreate", 3020, 0, NO_STREAM),
    E(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0, NO_STREAM),
    E(cuArrayDestroy, "cuArrayDestroy", 2000, 0, NO_STREAM),
    E(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0, NO_STREAM),
    E(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0, NO_STREAM),
    E(cuLaunchKernel, "cuLaunchKernel", 4000, 0, LEGACY_STREAM),
    E(cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, 0, PER_THREAD_STREAM),
    E(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 0, LEGACY_STREAM),
    E(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, 0, PER_THREAD_STREAM),
    E(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 0, LEGACY_STREAM),
    E(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000, 0, PER_THREAD_STREAM),
    E(cuGraphLaunch, "cuGraphLaunch", 10000, 0, LEGACY_STREAM),
    E(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, 0, PER_THREAD_STREAM),
    E(cuStreamSynchronize, "cuStreamSynchronize", 2000, 0, LEGACY_STREAM),
    E(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 7000, 0, PER_THREAD_STREAM),
    E(cuEventSynchronize, "cuEventSynchronize", 2000, 0, NO_STREAM),
    N(nvmlDeviceGetMemoryInfo),
    N(nvmlDeviceGetMemoryInfo_v2),
};
#define N_ENTRIES (sizeof g_entries / sizeof g_entries[0])

/* Resolved but not intercepted: what the wrappers themselves call. */
static const struct {
    const char *name;
    void **real;
} g_helpers[] = {
    {"cuDeviceGetUuid", (void **)&REAL.cuDeviceGetUuid},
    {"cuDeviceGetUuid_v2", (void **)&REAL.cuDeviceGetUuid_v2},
    {"cuCtxGetDevice", (void **)&REAL.cuCtxGetDevice},
    {"cuCtxGetCurrent", (void **)&REAL.cuCtxGetCurrent},
    {"cuCtxSetCurrent", (void **)&REAL.cuCtxSetCurrent},
    {"cuMemPoolGetAttribute", (void **)&REAL.cuMemPoolGetAttribute},
    {"cuEventCreate", (void **)&REAL.cuEventCreate},
    {"cuEventRecord", (void **)&REAL.cuEventRecord},
    {"cuEventQuery", (void **)&REAL.cuEventQuery},
    {"cuEventElapsedTime", (void **)&REAL.cuEventElapsedTime},
    {"cuEventDestroy_v2", (void **)&REAL.cuEventDestroy_v2},
    {"cuStreamIsCapturing", (void **)&REAL.cuStreamIsCapturing},
    {"cuThreadExchangeStreamCaptureMode", (void **)&REAL.cuThreadExchangeStreamCaptureMode},
    {"nvmlDeviceGetUUID", (void **)&REAL_NVML.nvmlDeviceGetUUID},
};

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) g_real_dlsym;

void interpose_resolve_dlsym(void)
{
    if (atomic_load(&g_real_dlsym) != NULL || !dl_available())
        return;
    /* glibc >= 2.34 defines dlsym in libc at GLIBC_2.34; older ones at the
     * architecture's base version. Never plain dlsym: that would find us. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        dlsym_fn f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (f != NULL) {
            atomic_store(&g_real_dlsym, f);
            return;
        }
    }
}

static dlsym_fn real_dlsym(void)
{
    dlsym_fn f = atomic_load_explicit(&g_real_dlsym, memory_order_acquire);
    if (__builtin_expect(f == NULL, 0)) {
        interpose_resolve_dlsym();
        f = atomic_load(&g_real_dlsym);
    }
    return f;
}

static void resolve_prefix(void *handle, const char *prefix)
{
    dlsym_fn rd = real_dlsym();
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < N_ENTRIES; i++) {
        if (strncmp(g_entries[i].name, prefix, plen) == 0)
            *g_entries[i].real = rd(handle, g_entries[i].name);
    }
    for (size_t i = 0; i < sizeof g_helpers / sizeof g_helpers[0]; i++) {
        if (strncmp(g_helpers[i].name, prefix, plen) == 0)
            *g_helpers[i].real = rd(handle, g_helpers[i].name);
    }
}

/* What a wrapper calls when the driver lacks the entry point it wraps (a program
 * built against a newer driver than the one installed). Without the hook such a
 * call would fail symbol lookup; with it, the call fails cleanly. Every driver
 * entry point returns CUresult in the same register and this ignores its
 * arguments, which the calling convention allows on the platforms we build for. */
static CUresult missing_entry(void) { return CUDA_ERROR_NOT_SUPPORTED; }

void interpose_resolve_cuda(void *handle)
{
    if (handle != NULL)
        resolve_prefix(handle, "cu");
    /* A driver without per-thread variants: the legacy entry point serves both. */
    if (REAL.cuMemAllocAsync_ptsz == NULL)
        REAL.cuMemAllocAsync_ptsz = REAL.cuMemAllocAsync;
    if (REAL.cuMemAllocFromPoolAsync_ptsz == NULL)
        REAL.cuMemAllocFromPoolAsync_ptsz = REAL.cuMemAllocFromPoolAsync;
    if (REAL.cuMemFreeAsync_ptsz == NULL)
        REAL.cuMemFreeAsync_ptsz = REAL.cuMemFreeAsync;
    if (REAL.cuLaunchKernel_ptsz == NULL)
        REAL.cuLaunchKernel_ptsz = REAL.cuLaunchKernel;
    if (REAL.cuLaunchKernelEx_ptsz == NULL)
        REAL.cuLaunchKernelEx_ptsz = REAL.cuLaunchKernelEx;
    if (REAL.cuLaunchCooperativeKernel_ptsz == NULL)
        REAL.cuLaunchCooperativeKernel_ptsz = REAL.cuLaunchCooperativeKernel;
    if (REAL.cuGraphLaunch_ptsz == NULL)
        REAL.cuGraphLaunch_ptsz = REAL.cuGraphLaunch;
    if (REAL.cuStreamSynchronize_ptsz == NULL)
        REAL.cuStreamSynchronize_ptsz = REAL.cuStreamSynchronize;
    for (size_t i = 0; i < N_ENTRIES; i++) {
        if (g_entries[i].name[0] == 'c' && *g_entries[i].real == NULL) {
            hook_log(HOOK_LOG_DEBUG, "the driver has no %s", g_entries[i].name);
            *g_entries[i].real = (void *)missing_entry;
        }
    }
}

void interpose_resolve_nvml(void *handle) { resolve_prefix(handle, "nvml"); }

static const struct entry *find_entry(const char *name)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        if (strcmp(g_entries[i].name, name) == 0)
            return &g_entries[i];
    }
    return NULL;
}

static void ensure_resolved(const char *name)
{
    if (hook_in_init())
        return;
    hook_ensure();
    if (name[0] == 'n')
        hook_nvml_init();
}

void *interpose_wrap(const char *name, void *p)
{
    if (p == NULL || name == NULL)
        return p;
    const struct entry *e = find_entry(name);
    if (e == NULL || p == e->wrapper)
        return p;
    ensure_resolved(name);
    return *e->real == p ? e->wrapper : p;
}

/* ---- cuGetProcAddress ---- */

static void *wrap_queried(const char *symbol, void *p, int version, cuuint64_t flags)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        const struct entry *e = &g_entries[i];
        if (e->base != NULL && (p == e->wrapper || p == *e->real))
            return e->wrapper; /* a driver whose own table binds to our exports */
    }
    enum stream_kind want = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? PER_THREAD_STREAM
                                                                                   : LEGACY_STREAM;
    for (size_t i = 0; i < N_ENTRIES; i++) {
        const struct entry *e = &g_entries[i];
        if (e->base == NULL || strcmp(e->base, symbol) != 0 || version < e->min_version ||
            (e->max_version != 0 && version >= e->max_version) || (e->stream != NO_STREAM && e->stream != want))
            continue;
        hook_log(HOOK_LOG_DEBUG, "cuGetProcAddress(%s, %d): unrecognised pointer, wrapping as %s", symbol, version,
                 e->name);
        return e->wrapper;
    }
    return p;
}

TESSERA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    hook_ensure();
    if (REAL.cuGetProcAddress == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL && symbol != NULL)
        *pfn = wrap_queried(symbol, *pfn, cudaVersion, flags);
    return r;
}

TESSERA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus)
{
    hook_ensure();
    if (REAL.cuGetProcAddress_v2 == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = REAL.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn != NULL && *pfn != NULL && symbol != NULL)
        *pfn = wrap_queried(symbol, *pfn, cudaVersion, flags);
    return r;
}

/* ---- dlsym ---- */

static int is_driver_name(const char *name)
{
    return name != NULL && ((name[0] == 'c' && name[1] == 'u') || strncmp(name, "nvml", 4) == 0);
}

/* Every symbol but those we intercept goes straight to the real dlsym as a tail call
 * (-O2 makes it a jump), so the real dlsym finds our caller's return address, not
 * ours, and RTLD_NEXT keeps its caller-relative meaning, also for the many cu* and
 * nvml* names we do not wrap (cudart, cuBLAS, ...; TestDlsymKeepsCallerRelativeMeaning).
 * For an intercepted symbol the real dlsym sees us as the caller, which changes
 * nothing for the handles programs use to find the driver: a dlopen handle, or
 * RTLD_DEFAULT, where we come first anyway; RTLD_NEXT from the program also lands on
 * the driver. */
TESSERA_EXPORT void *dlsym(void *restrict handle, const char *restrict name)
{
    dlsym_fn rd = real_dlsym();
    if (rd == NULL)
        return NULL; /* no glibc dlsym version found: nothing can be looked up */
    if (__builtin_expect(!is_driver_name(name) || find_entry(name) == NULL, 1))
        return rd(handle, name);
    return interpose_wrap(name, rd(handle, name));
}
