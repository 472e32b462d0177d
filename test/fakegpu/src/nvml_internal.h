/* nvml_internal.h — shared state of the simulated libnvidia-ml.so.1. */
#ifndef FAKEGPU_NVML_INTERNAL_H
#define FAKEGPU_NVML_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "fg_config.h"
#include "fg_state.h"
/* Declare every name as exported (nvmlInit and nvmlInit_v2 both exist), not the
 * header's #define upgrades. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"

#define FG_API __attribute__((visibility("default")))
/* Another exported name of the same function: the library's versioned entry points
 * (nvmlInit and nvmlInit_v2, ...) that share one signature and behaviour. */
#define FG_ALIAS(target) __attribute__((alias(#target), visibility("default")))

struct fg_nvml_dev {
    int index;
    const struct fg_device_cfg *cfg;
    /* nvmlDeviceGetUtilizationRates: the previous sample taken by this process. */
    uint64_t util_prev_ns, util_prev_busy;
    /* nvmlDeviceGetProcessUtilization: previous sample per state slot. */
    struct {
        uint64_t owner, ns, busy;
    } proc_prev[FG_MAX_SLOTS];
};

struct fg_nvml {
    int refs;
    struct fg_config cfg;
    struct fg_state *st;
    struct fg_nvml_dev dev[FG_MAX_DEVICES];
};

extern struct fg_nvml nv;

static inline int nvml_ready(void)
{
    return __atomic_load_n(&nv.refs, __ATOMIC_ACQUIRE) > 0;
}

/* Checks init and that the handle is one of ours. */
static inline nvmlReturn_t nvml_dev(nvmlDevice_t h, struct fg_nvml_dev **out)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    struct fg_nvml_dev *d = (struct fg_nvml_dev *)h.handle;
    if (d < &nv.dev[0] || d >= &nv.dev[nv.cfg.count] || d != &nv.dev[d - &nv.dev[0]])
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = d;
    return NVML_SUCCESS;
}

/* Kernel time on dev that has completed by time now (ns). */
uint64_t nvml_busy_done(int dev, uint64_t now);

#endif
