/* cu_procaddr.c — cuGetProcAddress / cuGetProcAddress_v2: base name + the CUDA
 * version the caller was built for → the versioned entry point, as the real
 * driver resolves them. */
#include <string.h>

#include "cu_internal.h"

struct fg_proc {
    const char *name;  /* base name, as callers ask for it */
    int since;         /* first cudaVersion that gets this entry */
    void *fn;
    void *ptsz;        /* per-thread-default-stream variant, if any */
};

/* Several rows per name: the highest `since` not above the caller's version wins. */
static const struct fg_proc procs[] = {
    {"cuInit", 2000, (void *)cuInit, NULL},
    {"cuDriverGetVersion", 2020, (void *)cuDriverGetVersion, NULL},
    {"cuGetErrorString", 6000, (void *)cuGetErrorString, NULL},
    {"cuGetErrorName", 6000, (void *)cuGetErrorName, NULL},
    {"cuGetProcAddress", 11030, (void *)cuGetProcAddress, NULL},
    {"cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2, NULL},
    {"cuDeviceGet", 2000, (void *)cuDeviceGet, NULL},
    {"cuDeviceGetCount", 2000, (void *)cuDeviceGetCount, NULL},
    {"cuDeviceGetName", 2000, (void *)cuDeviceGetName, NULL},
    {"cuDeviceGetUuid", 9020, (void *)cuDeviceGetUuid, NULL},
    {"cuDeviceGetUuid", 11040, (void *)cuDeviceGetUuid_v2, NULL},
    {"cuDeviceTotalMem", 3020, (void *)cuDeviceTotalMem_v2, NULL},
    {"cuDeviceGetAttribute", 2000, (void *)cuDeviceGetAttribute, NULL},
    {"cuCtxCreate", 3020, (void *)cuCtxCreate_v2, NULL},
    {"cuCtxDestroy", 4000, (void *)cuCtxDestroy_v2, NULL},
    {"cuCtxGetCurrent", 4000, (void *)cuCtxGetCurrent, NULL},
    {"cuCtxSetCurrent", 4000, (void *)cuCtxSetCurrent, NULL},
    {"cuCtxPushCurrent", 4000, (void *)cuCtxPushCurrent_v2, NULL},
    {"cuCtxPopCurrent", 4000, (void *)cuCtxPopCurrent_v2, NULL},
    {"cuCtxGetDevice", 2000, (void *)cuCtxGetDevice, NULL},
    {"cuCtxSynchronize", 2000, (void *)cuCtxSynchronize, NULL},
    {"cuDevicePrimaryCtxRetain", 7000, (void *)cuDevicePrimaryCtxRetain, NULL},
    {"cuDevicePrimaryCtxRelease", 11000, (void *)cuDevicePrimaryCtxRelease_v2, NULL},
    {"cuDevicePrimaryCtxReset", 11000, (void *)cuDevicePrimaryCtxReset_v2, NULL},
    {"cuMemGetInfo", 3020, (void *)cuMemGetInfo_v2, NULL},
    {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2, NULL},
    {"cuMemAllocPitch", 3020, (void *)cuMemAllocPitch_v2, NULL},
    {"cuMemAllocManaged", 6000, (void *)cuMemAllocManaged, NULL},
    {"cuMemFree", 3020, (void *)cuMemFree_v2, NULL},
    {"cuMemAllocAsync", 11020, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, (void *)cuMemAllocFromPoolAsync, (void *)cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFreeAsync", 11020, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz},
    {"cuMemPoolCreate", 11020, (void *)cuMemPoolCreate, NULL},
    {"cuMemPoolDestroy", 11020, (void *)cuMemPoolDestroy, NULL},
    {"cuMemPoolSetAttribute", 11020, (void *)cuMemPoolSetAttribute, NULL},
    {"cuMemPoolGetAttribute", 11020, (void *)cuMemPoolGetAttribute, NULL},
    {"cuMemPoolTrimTo", 11020, (void *)cuMemPoolTrimTo, NULL},
    {"cuDeviceGetDefaultMemPool", 11020, (void *)cuDeviceGetDefaultMemPool, NULL},
    {"cuDeviceGetMemPool", 11020, (void *)cuDeviceGetMemPool, NULL},
    {"cuDeviceSetMemPool", 11020, (void *)cuDeviceSetMemPool, NULL},
    {"cuMemCreate", 10020, (void *)cuMemCreate, NULL},
    {"cuMemRelease", 10020, (void *)cuMemRelease, NULL},
    {"cuMemAddressReserve", 10020, (void *)cuMemAddressReserve, NULL},
    {"cuMemAddressFree", 10020, (void *)cuMemAddressFree, NULL},
    {"cuMemMap", 10020, (void *)cuMemMap, NULL},
    {"cuMemUnmap", 10020, (void *)cuMemUnmap, NULL},
    {"cuMemSetAccess", 10020, (void *)cuMemSetAccess, NULL},
    {"cuMemGetAllocationGranularity", 10020, (void *)cuMemGetAllocationGranularity, NULL},
    {"cuArrayCreate", 3020, (void *)cuArrayCreate_v2, NULL},
    {"cuArray3DCreate", 3020, (void *)cuArray3DCreate_v2, NULL},
    {"cuArrayDestroy", 2000, (void *)cuArrayDestroy, NULL},
    {"cuMipmappedArrayCreate", 5000, (void *)cuMipmappedArrayCreate, NULL},
    {"cuMipmappedArrayDestroy", 5000, (void *)cuMipmappedArrayDestroy, NULL},
    {"cuModuleLoad", 2000, (void *)cuModuleLoad, NULL},
    {"cuModuleLoadData", 2000, (void *)cuModuleLoadData, NULL},
    {"cuModuleUnload", 2000, (void *)cuModuleUnload, NULL},
    {"cuModuleGetFunction", 2000, (void *)cuModuleGetFunction, NULL},
    {"cuLaunchKernel", 4000, (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11080, (void *)cuLaunchKernelEx, (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 9000, (void *)cuLaunchCooperativeKernel, (void *)cuLaunchCooperativeKernel_ptsz},
    {"cuGraphCreate", 10000, (void *)cuGraphCreate, NULL},
    {"cuGraphDestroy", 10000, (void *)cuGraphDestroy, NULL},
    {"cuGraphAddKernelNode", 10000, (void *)cuGraphAddKernelNode, NULL},
    {"cuGraphAddKernelNode", 12000, (void *)cuGraphAddKernelNode_v2, NULL},
    {"cuGraphInstantiateWithFlags", 11040, (void *)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphInstantiate", 12000, (void *)cuGraphInstantiateWithFlags, NULL},
    {"cuGraphLaunch", 10000, (void *)cuGraphLaunch, (void *)cuGraphLaunch_ptsz},
    {"cuGraphExecDestroy", 10000, (void *)cuGraphExecDestroy, NULL},
    {"cuStreamBeginCapture", 10010, (void *)cuStreamBeginCapture_v2, (void *)cuStreamBeginCapture_v2_ptsz},
    {"cuStreamEndCapture", 10000, (void *)cuStreamEndCapture, (void *)cuStreamEndCapture_ptsz},
    {"cuThreadExchangeStreamCaptureMode", 10010, (void *)cuThreadExchangeStreamCaptureMode, NULL},
    {"cuStreamIsCapturing", 10000, (void *)cuStreamIsCapturing, (void *)cuStreamIsCapturing_ptsz},
    {"cuStreamCreate", 2000, (void *)cuStreamCreate, NULL},
    {"cuStreamDestroy", 4000, (void *)cuStreamDestroy_v2, NULL},
    {"cuStreamSynchronize", 2000, (void *)cuStreamSynchronize, (void *)cuStreamSynchronize_ptsz},
    {"cuStreamQuery", 2000, (void *)cuStreamQuery, (void *)cuStreamQuery_ptsz},
    {"cuEventCreate", 2000, (void *)cuEventCreate, NULL},
    {"cuEventRecord", 2000, (void *)cuEventRecord, (void *)cuEventRecord_ptsz},
    {"cuEventSynchronize", 2000, (void *)cuEventSynchronize, NULL},
    {"cuEventQuery", 2000, (void *)cuEventQuery, NULL},
    {"cuEventElapsedTime", 2000, (void *)cuEventElapsedTime, NULL},
    {"cuEventDestroy", 4000, (void *)cuEventDestroy_v2, NULL},
};

/* Looks symbol up for cudaVersion. A symbol that is missing or too new for the caller
 * gives CUDA_ERROR_NOT_FOUND; the callers turn that into their documented result. */
static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || cudaVersion > FG_DRIVER_CUDA_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_proc *best = NULL;
    int named = 0;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].name, symbol) != 0)
            continue;
        named = 1;
        if (procs[i].since <= cudaVersion && (!best || procs[i].since > best->since))
            best = &procs[i];
    }
    *pfn = NULL;
    if (!best) {
        if (status)
            *status = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    *pfn = ptds && best->ptsz ? best->ptsz : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

FG_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return resolve(symbol, pfn, cudaVersion, flags, NULL);
}

/* 12.x semantics: a symbol that is not found (or not for this version) is not an
 * error — CUDA_SUCCESS with *pfn = NULL, and symbolStatus says why. */
FG_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult r = resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
    return r == CUDA_ERROR_NOT_FOUND ? CUDA_SUCCESS : r;
}
