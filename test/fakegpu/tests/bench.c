/* bench.c — cost of the simulated driver's hot paths, the baseline the hook's
 * overhead benchmark subtracts: a zero-duration cuLaunchKernel and a
 * cuMemAlloc_v2 + cuMemFree_v2 pair; and the simulated time's own costs: a timed
 * launch (fakegpu_sleep, ring reclaim amortised) and a cuStreamQuery /
 * cuEventQuery that replays the device timeline while another process keeps the
 * device busy. Prints `BENCH <name> <value> <unit>`; each value is the best
 * (lowest) of several rounds, as the machine is shared. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* A neighbour process with 10 s of kernels queued, so that queries replay two
 * busy contexts. */
static pid_t start_neighbour(void)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        CUcontext c;
        CUmodule m;
        CUfunction f;
        unsigned long long ns = 10000000ull;
        void *args[] = {&ns};
        if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c) || cuModuleLoadData(&m, "b") ||
            cuModuleGetFunction(&f, m, "fakegpu_sleep"))
            _exit(1);
        for (int i = 0; i < 1000; i++)
            cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
        (void)!write(p[1], "x", 1);
        pause();
        _exit(0);
    }
    char x;
    close(p[1]);
    if (read(p[0], &x, 1) != 1)
        return -1;
    close(p[0]);
    return pid;
}

static int bench_time(void)
{
    CUresult r;
    CUmodule mod;
    CUfunction sl;
    CUstream s;
    CUevent e;
    if ((r = cuModuleLoadData(&mod, "bench")) || (r = cuModuleGetFunction(&sl, mod, "fakegpu_sleep")) ||
        (r = cuStreamCreate(&s, 1)) || (r = cuEventCreate(&e, 0)))
        return fail("time setup", r);
    unsigned long long one = 1;
    void *args[] = {&one};
    const int n = 200000;
    double best_launch = 1e30, best_query = 1e30, best_equery = 1e30;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++)
            if ((r = cuLaunchKernel(sl, 1, 1, 1, 1, 1, 1, 0, s, args, NULL)))
                return fail("timed cuLaunchKernel", r);
        double per = (now_ns() - t0) / n;
        best_launch = per < best_launch ? per : best_launch;
    }
    if ((r = cuStreamSynchronize(s)))
        return fail("cuStreamSynchronize", r);
    pid_t nb = start_neighbour();
    if (nb < 0)
        return fail("neighbour", CUDA_ERROR_UNKNOWN);
    unsigned long long long_ns = 5000000000ull;
    args[0] = &long_ns;
    if ((r = cuLaunchKernel(sl, 1, 1, 1, 1, 1, 1, 0, s, args, NULL)) || (r = cuEventRecord(e, s)))
        return fail("long kernel", r);
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now_ns();
        for (int i = 0; i < n / 10; i++)
            if (cuStreamQuery(s) != CUDA_ERROR_NOT_READY)
                return fail("cuStreamQuery", CUDA_ERROR_UNKNOWN);
        double per = (now_ns() - t0) / (n / 10);
        best_query = per < best_query ? per : best_query;
        t0 = now_ns();
        for (int i = 0; i < n / 10; i++)
            if (cuEventQuery(e) != CUDA_ERROR_NOT_READY)
                return fail("cuEventQuery", CUDA_ERROR_UNKNOWN);
        per = (now_ns() - t0) / (n / 10);
        best_equery = per < best_equery ? per : best_equery;
    }
    kill(nb, SIGKILL);
    waitpid(nb, NULL, 0);
    printf("BENCH fakegpu.timed_launch_ns %.1f ns\n", best_launch);
    printf("BENCH fakegpu.stream_query_busy_ns %.1f ns\n", best_query);
    printf("BENCH fakegpu.event_query_busy_ns %.1f ns\n", best_equery);
    return 0;
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
    return bench_time();
}
