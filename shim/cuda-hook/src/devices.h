/* devices.h — which limits-file entry a CUDA device ordinal or NVML handle is.
 * GPUs are matched by UUID, never by ordinal (CUDA_VISIBLE_DEVICES reorders). */
#ifndef HOOK_DEVICES_H
#define HOOK_DEVICES_H

#include "cuda_driver.h"
#include "nvml_types.h"

#define DEVICE_PASS_THROUGH (-1) /* not listed, or no limits in force */
#define DEVICE_UNKNOWN (-2)      /* its UUID cannot be read: refuse (fail closed) */

/* Index for an ordinal; cached, the ordinal-to-UUID map never changes in a process. */
int device_index(CUdevice dev);
/* Index for the current context's device; *dev gets the ordinal. CUDA_SUCCESS, or
 * the driver's error when there is no current context. */
CUresult device_current(CUdevice *dev, int *idx);
/* Index for the current context's device; pass-through when there is no current
 * context (the driver call that follows reports that error itself). */
int device_current_index(void);
/* Index for an NVML handle (not cached: NVML calls are not on a hot path). */
int device_index_nvml(nvmlDevice_t dev);

#endif
