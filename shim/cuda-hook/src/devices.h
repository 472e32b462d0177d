/* devices.h — which limits-file entry a CUDA device ordinal or NVML handle is.
 * GPUs are matched by UUID, never by ordinal (CUDA_VISIBLE_DEVICES reorders). */
#ifndef HOOK_DEVICES_H
#define HOOK_DEVICES_H

#include "cuda_driver.h"
#include "nvml_types.h"

#define DEVICE_PASS_THROUGH (-1) /* no limits in force */
#define DEVICE_UNKNOWN (-2)      /* its UUID cannot be read: refuse (fail closed) */
/* Limits are in force but the file does not list this GPU: the container was given
 * no memory on it (kubelet put another of its resources there, say). Refused, never
 * passed through: passing it through would leave the container uncapped there. */
#define DEVICE_UNLISTED (-3)

/* Index for an ordinal; cached, the ordinal-to-UUID map never changes in a process. */
int device_index(CUdevice dev);
/* Where an allocation made now goes: the current context, its device and that
 * device's index. */
struct place {
    CUdevice dev;
    int idx;
    uint64_t ctx;
};
/* CUDA_SUCCESS, or the driver's error when there is no current context; then idx is
 * pass-through (the driver call that follows reports the error itself). */
CUresult device_place(struct place *pl);

/* Index for an NVML handle (not cached: NVML calls are not on a hot path). */
int device_index_nvml(nvmlDevice_t dev);

#endif
