/* launch_types.h — what the launch wrappers need beyond cuda_driver.h. */
#ifndef HOOK_LAUNCH_TYPES_H
#define HOOK_LAUNCH_TYPES_H

#include "cuda_driver.h"

/* The per-thread default stream's handle (cuda.h: CU_STREAM_PER_THREAD). */
#define HOOK_STREAM_PER_THREAD ((CUstream)0x2)

#endif
