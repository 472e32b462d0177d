/* nvml_topology.c — attributes, NUMA/PCI topology, NVLink and MIG queries, enough
 * for go-nvlib and go-gpuallocator to enumerate a simulated node. MIG is always
 * disabled and there is no NVLink; devices 4k..4k+3 share NUMA node k. */
#include <string.h>

#include "nvml_internal.h"

#define FG_GPUS_PER_NUMA 4
#define FG_MAX_MIG_DEVICES 7

FG_API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!attributes)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(attributes, 0, sizeof *attributes);
    attributes->multiprocessorCount = (unsigned)d->cfg->sm_count;
    attributes->sharedCopyEngineCount = 7;
    attributes->sharedDecoderCount = 7;
    attributes->sharedJpegCount = 7;
    attributes->sharedOfaCount = 1;
    attributes->gpuInstanceSliceCount = 7;
    attributes->computeInstanceSliceCount = 7;
    attributes->memorySizeMB = d->cfg->mem_bytes >> 20;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
    FG_ALIAS(nvmlDeviceGetAttributes);

FG_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!node)
        return NVML_ERROR_INVALID_ARGUMENT;
    *node = (unsigned)(d->index / FG_GPUS_PER_NUMA);
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t *pathInfo)
{
    struct fg_nvml_dev *a, *b;
    nvmlReturn_t r = nvml_dev(device1, &a);
    if (r == NVML_SUCCESS)
        r = nvml_dev(device2, &b);
    if (r != NVML_SUCCESS)
        return r;
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (a == b)
        *pathInfo = NVML_TOPOLOGY_INTERNAL;
    else if (a->index / FG_GPUS_PER_NUMA == b->index / FG_GPUS_PER_NUMA)
        *pathInfo = NVML_TOPOLOGY_NODE;
    else
        *pathInfo = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

static nvmlReturn_t no_nvlink(nvmlDevice_t device)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    return r != NVML_SUCCESS ? r : NVML_ERROR_NOT_SUPPORTED;
}

FG_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    (void)link;
    (void)isActive;
    return no_nvlink(device);
}

FG_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    (void)link;
    (void)pci;
    return no_nvlink(device);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
    FG_ALIAS(nvmlDeviceGetNvLinkRemotePciInfo_v2);

FG_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = FG_MAX_MIG_DEVICES;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!migDevice || index >= FG_MAX_MIG_DEVICES)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_FOUND; /* MIG disabled: no MIG devices */
}

FG_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(migDevice, &d);
    (void)device;
    return r != NVML_SUCCESS ? r : NVML_ERROR_INVALID_ARGUMENT; /* not a MIG handle */
}

FG_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    (void)mode;
    if (activationStatus)
        *activationStatus = NVML_ERROR_NOT_SUPPORTED;
    return r != NVML_SUCCESS ? r : NVML_ERROR_NOT_SUPPORTED;
}
