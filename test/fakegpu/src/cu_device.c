/* cu_device.c — device enumeration and attributes. */
#include <string.h>

#include "cu_internal.h"

FG_API CUresult cuDeviceGetCount(int *count)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fg.visible_count;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= fg.visible_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = fg.visible[ordinal];
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    strncpy(name, fg.cfg.dev[dev].name, (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, fg.cfg.dev[dev].uuid, 16);
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return get_uuid(uuid, dev);
}

FG_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return get_uuid(uuid, dev);
}

FG_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fg.cfg.dev[dev].mem_bytes;
    return CUDA_SUCCESS;
}

/* Values of an H100/H200-class (sm_90) part; only SM count and identity vary. */
static int attribute_value(CUdevice_attribute a, const struct fg_device_cfg *d, int *ok)
{
    *ok = 1;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return d->sm_count;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int)d->pci_bus;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return (int)d->pci_device;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return (int)d->pci_domain;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return d->cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return d->cc_minor;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    }
    *ok = 0;
    return 0;
}

FG_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int ok;
    int v = attribute_value(attrib, &fg.cfg.dev[dev], &ok);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = v;
    return CUDA_SUCCESS;
}
