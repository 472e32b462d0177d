/* bench.c — cost of the simulated driver's hot paths, the baseline the hook's
 * overhead benchmark subtracts: a zero-duration cuLaunchKernel and a
 * cuMemAlloc_v2 + cuMemFree_v2 pair. Prints `BENCH <name> <value> <unit>`; each
 * value is the best (lowest) of several rounds, as the machine is shared. */
#include <stdio.h>
#include <time.h>

#include "cuda_driver.h"

#define ROUNDS 7

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int fail(const char *what, CUresult r)
{
    fprintf(stderr, "bench: %s failed: %d\n", what, (int)r);
    return 1;
}

int main(void)
{
    CUresult r;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    if ((r = cuInit(0)) || (r = cuDevicePrimaryCtxRetain(&ctx, 0)) || (r = cuCtxSetCurrent(ctx)))
        return fail("setup", r);
    if ((r = cuModuleLoadData(&mod, "bench")) || (r = cuModuleGetFunction(&fn, mod, "bench_kernel")))
        return fail("module", r);
    const int n = 2000000;
    double best_launch = 1e30, best_pair = 1e30;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++)
            if ((r = cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL)))
                return fail("cuLaunchKernel", r);
        double per = (now_ns() - t0) / n;
        best_launch = per < best_launch ? per : best_launch;
        t0 = now_ns();
        for (int i = 0; i < n / 4; i++) {
            CUdeviceptr p;
            if ((r = cuMemAlloc_v2(&p, 1 << 20)) || (r = cuMemFree_v2(p)))
                return fail("alloc/free", r);
        }
        per = (now_ns() - t0) / (n / 4);
        best_pair = per < best_pair ? per : best_pair;
    }
    printf("BENCH fakegpu.launch_ns %.1f ns\n", best_launch);
    printf("BENCH fakegpu.allocfree_ns %.1f ns\n", best_pair);
    return 0;
}
