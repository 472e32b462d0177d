/* launch.c — every launch entry point: kernels (cuLaunchKernel, cuLaunchKernelEx,
 * cuLaunchCooperativeKernel) and CUDA graphs (cuGraphLaunch), legacy and
 * per-thread-default-stream (_ptsz) variants. Each passes the stream to
 * compute_admit first: without a compute share in force that is one load of a
 * flag; with one it may wait for the container's grant (compute.c). */
#include "compute.h"
#include "hook.h"
#include "launch_types.h"
#include "real.h"

TESSERA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                       CUstream s, void **params, void **extra)
{
    hook_ensure();
    compute_admit(s, false);
    return REAL.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

TESSERA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                            CUstream s, void **params, void **extra)
{
    hook_ensure();
    compute_admit(s, true);
    return REAL.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

TESSERA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    hook_ensure();
    if (config != NULL)
        compute_admit(config->hStream, false);
    return REAL.cuLaunchKernelEx(config, f, params, extra);
}

TESSERA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                              void **extra)
{
    hook_ensure();
    if (config != NULL)
        compute_admit(config->hStream, true);
    return REAL.cuLaunchKernelEx_ptsz(config, f, params, extra);
}

TESSERA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                  unsigned int bx, unsigned int by, unsigned int bz,
                                                  unsigned int shmem, CUstream s, void **params)
{
    hook_ensure();
    compute_admit(s, false);
    return REAL.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

TESSERA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                       unsigned int gz, unsigned int bx, unsigned int by,
                                                       unsigned int bz, unsigned int shmem, CUstream s,
                                                       void **params)
{
    hook_ensure();
    compute_admit(s, true);
    return REAL.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

TESSERA_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    hook_ensure();
    compute_admit(s, false);
    return REAL.cuGraphLaunch(g, s);
}

TESSERA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    hook_ensure();
    compute_admit(s, true);
    return REAL.cuGraphLaunch_ptsz(g, s);
}
