/* nvml_core.c — the simulated libnvidia-ml.so.1: init, system and device identity.
 * Memory and process views read the node state file the CUDA side writes. */
#include <stdio.h>
#include <string.h>
#include <string.h>

#include "nvml_internal.h"

struct fg_nvml nv;
static pthread_mutex_t nv_mu = PTHREAD_MUTEX_INITIALIZER;

static nvmlReturn_t init_locked(void)
{
    char err[512];
    if (fg_config_load(&nv.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return NVML_ERROR_UNKNOWN;
    }
    uint64_t slice_ns;
    if (fg_config_slice_ns(&slice_ns, err, sizeof err) != 0) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return NVML_ERROR_UNKNOWN;
    }
    nv.st = fg_state_open(&nv.cfg, slice_ns, err, sizeof err);
    if (!nv.st) {
        fprintf(stderr, "fakegpu: %s\n", err);
        return NVML_ERROR_UNKNOWN;
    }
    uint64_t now = fg_now_ns();
    memset(nv.dev, 0, sizeof nv.dev);
    for (int d = 0; d < nv.cfg.count; d++) {
        nv.dev[d].index = d;
        nv.dev[d].cfg = &nv.cfg.dev[d];
        nv.dev[d].util_prev_ns = now;
        nv.dev[d].util_prev_busy = nvml_busy_done(d, now);
    }
    return NVML_SUCCESS;
}

/* Reference counted like the real library: every init needs a shutdown. */
static nvmlReturn_t do_init(unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&nv_mu);
    nvmlReturn_t r = NVML_SUCCESS;
    if (nv.refs == 0)
        r = init_locked();
    if (r == NVML_SUCCESS)
        nv.refs++;
    pthread_mutex_unlock(&nv_mu);
    return r;
}

FG_API nvmlReturn_t nvmlInit_v2(void) { return do_init(0); }
nvmlReturn_t nvmlInit(void) FG_ALIAS(nvmlInit_v2);
FG_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return do_init(flags); }

FG_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&nv_mu);
    nvmlReturn_t r = NVML_SUCCESS;
    if (nv.refs == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else if (--nv.refs == 0) {
        fg_state_close(nv.st);
        nv.st = NULL;
    }
    pthread_mutex_unlock(&nv_mu);
    return r;
}

struct nv_errtext {
    nvmlReturn_t code;
    const char *text;
};

static const struct nv_errtext nv_errtexts[] = {
    {NVML_SUCCESS, "Success"},
    {NVML_ERROR_UNINITIALIZED, "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
    {NVML_ERROR_NOT_FOUND, "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument version mismatch"},
    {NVML_ERROR_UNKNOWN, "Unknown Error"},
};

FG_API const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < sizeof nv_errtexts / sizeof nv_errtexts[0]; i++)
        if (nv_errtexts[i].code == result)
            return nv_errtexts[i].text;
    return "Unknown Error";
}

static nvmlReturn_t copy_str(char *dst, unsigned len, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

#define FG_DRIVER_VERSION "570.124.06"

FG_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    return copy_str(version, length, FG_DRIVER_VERSION);
}

FG_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    return copy_str(version, length, "12." FG_DRIVER_VERSION);
}

/* Like the real library, these two work without nvmlInit. */
FG_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = 12080;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) FG_ALIAS(nvmlSystemGetCudaDriverVersion);

FG_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)nv.cfg.count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) FG_ALIAS(nvmlDeviceGetCount_v2);

static nvmlReturn_t by_index(unsigned int index, nvmlDevice_t *device)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)nv.cfg.count)
        return NVML_ERROR_INVALID_ARGUMENT;
    device->handle = (struct nvmlDevice_st *)&nv.dev[index];
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return by_index(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
    FG_ALIAS(nvmlDeviceGetHandleByIndex_v2);

FG_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int d = 0; d < nv.cfg.count; d++)
        if (strcmp(nv.cfg.dev[d].uuid_str, uuid) == 0)
            return by_index((unsigned)d, device);
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t by_bus_id(const char *busId, nvmlDevice_t *device)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!busId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int d = 0; d < nv.cfg.count; d++)
        if (strcasecmp(nv.cfg.dev[d].bus_id, busId) == 0 || strcasecmp(nv.cfg.dev[d].bus_id + 4, busId) == 0)
            return by_index((unsigned)d, device);
    return NVML_ERROR_NOT_FOUND;
}

FG_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return by_bus_id(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
    FG_ALIAS(nvmlDeviceGetHandleByPciBusId_v2);

FG_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    return r != NVML_SUCCESS ? r : copy_str(uuid, length, d->cfg->uuid_str);
}

FG_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    return r != NVML_SUCCESS ? r : copy_str(name, length, d->cfg->name);
}

FG_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    char buf[32];
    snprintf(buf, sizeof buf, "%02x%02x%02x%02x%02x%02x", d->cfg->uuid[10], d->cfg->uuid[11], d->cfg->uuid[12],
             d->cfg->uuid[13], d->cfg->uuid[14], d->cfg->uuid[15]);
    return copy_str(serial, length, buf);
}

FG_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)d->index;
    return NVML_SUCCESS;
}

/* Minor number = index: /dev/nvidia<index>. */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) FG_ALIAS(nvmlDeviceGetIndex);

FG_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = d->cfg->pci_domain;
    pci->bus = d->cfg->pci_bus;
    pci->device = d->cfg->pci_device;
    pci->pciDeviceId = 0x233510de; /* H200 SXM */
    pci->pciSubSystemId = 0x18ba10de;
    snprintf(pci->busId, sizeof pci->busId, "%s", d->cfg->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0", d->cfg->pci_domain, d->cfg->pci_bus,
             d->cfg->pci_device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) FG_ALIAS(nvmlDeviceGetPciInfo_v3);
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) FG_ALIAS(nvmlDeviceGetPciInfo_v3);

FG_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = NVML_DEVICE_MIG_DISABLE;
    *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cfg->cc_major;
    *minor = d->cfg->cc_minor;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!multiGpuBool)
        return NVML_ERROR_INVALID_ARGUMENT;
    *multiGpuBool = 0;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = NVML_DEVICE_ARCH_HOPPER;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    *type = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
}
