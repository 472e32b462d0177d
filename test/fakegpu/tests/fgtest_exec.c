/* fgtest_exec.c — kernel timing, threads, fork, and the long-running helpers the
 * Go tests use for multi-process cases (hold, allocloop, busy). */
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgtest.h"

static CUfunction kernel(const char *name)
{
    CUmodule m;
    CUfunction f = NULL;
    CHECK(cuModuleLoadData(&m, "fake image"), CUDA_SUCCESS);
    CHECK(cuModuleGetFunction(&f, m, name), CUDA_SUCCESS);
    return f;
}

static CUresult sleep_on(CUfunction f, CUstream s, unsigned long long ns)
{
    void *args[] = {&ns};
    return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
}

int scenario_timing(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUfunction sl = kernel("fakegpu_sleep"), noop = kernel("vector_add");
    CUstream s1, s2;
    CUevent a, b;
    float ms = 0;
    CHECK(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
    CHECK(cuStreamCreate(&s2, 1), CUDA_SUCCESS);
    CHECK(cuEventCreate(&a, 0), CUDA_SUCCESS);
    CHECK(cuEventCreate(&b, 0), CUDA_SUCCESS);
    CHECK(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
    /* A zero-duration kernel completes at once. */
    CHECK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL), CUDA_SUCCESS);
    CHECK(cuStreamQuery(s1), CUDA_SUCCESS);
    /* A 2 ms kernel: asynchronous launch, synchronize waits, events measure it.
     * CPU-side gaps (this machine is shared) lengthen the measured time as on a
     * real GPU, so the upper bounds allow for the time the launches took. */
    double t0 = fgt_now_ms();
    CHECK(cuEventRecord(a, s1), CUDA_SUCCESS);
    CHECK(sleep_on(sl, s1, 2000000), CUDA_SUCCESS);
    CHECK(cuEventRecord(b, s1), CUDA_SUCCESS);
    double launched = fgt_now_ms() - t0;
    CHECK(cuStreamSynchronize(s1), CUDA_SUCCESS);
    double waited = fgt_now_ms() - t0;
    EXPECT(waited >= 2.0 && waited < 2.0 + launched + 500.0);
    CHECK(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    EXPECT(ms >= 1.999f && ms <= 2.0f + (float)launched + 0.01f);
    printf("timing: launch %.3f ms, sync after %.3f ms, event %.3f ms\n", launched, waited, ms);
    /* Until the work is done, queries say so. */
    CHECK(cuEventRecord(a, s1), CUDA_SUCCESS);
    CHECK(sleep_on(sl, s1, 100000000), CUDA_SUCCESS);
    CHECK(cuEventRecord(b, s1), CUDA_SUCCESS);
    CHECK(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    CHECK(cuEventQuery(b), CUDA_ERROR_NOT_READY);
    CHECK(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(b), CUDA_SUCCESS);
    CHECK(cuStreamQuery(s1), CUDA_SUCCESS);
    CHECK(cuEventQuery(b), CUDA_SUCCESS);
    /* Kernels on two streams share the device: they run one after the other. */
    t0 = fgt_now_ms();
    CHECK(cuEventRecord(a, s1), CUDA_SUCCESS);
    CHECK(sleep_on(sl, s1, 3000000), CUDA_SUCCESS);
    CHECK(sleep_on(sl, s2, 3000000), CUDA_SUCCESS);
    CHECK(cuEventRecord(b, s2), CUDA_SUCCESS);
    launched = fgt_now_ms() - t0;
    CHECK(cuEventSynchronize(b), CUDA_SUCCESS);
    EXPECT(fgt_now_ms() - t0 >= 6.0);
    CHECK(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    EXPECT(ms >= 5.999f && ms <= 6.0f + (float)launched + 0.01f);
    /* The legacy default stream waits for every stream of the context. */
    t0 = fgt_now_ms();
    CHECK(sleep_on(sl, s2, 2000000), CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(NULL), CUDA_SUCCESS);
    EXPECT(fgt_now_ms() - t0 >= 2.0);
    t0 = fgt_now_ms();
    CHECK(sleep_on(sl, s1, 2000000), CUDA_SUCCESS);
    CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT(fgt_now_ms() - t0 >= 2.0);
    /* Argument checks. */
    CHECK(cuLaunchKernel(sl, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuLaunchKernel(noop, 1, 1, 1, 2048, 1, 1, 0, s1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuLaunchKernel(noop, 0, 1, 1, 1, 1, 1, 0, s1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
    CHECK(cuStreamDestroy_v2(s2), CUDA_SUCCESS);
    CHECK(cuEventDestroy_v2(a), CUDA_SUCCESS);
    CHECK(cuEventDestroy_v2(a), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuEventDestroy_v2(b), CUDA_SUCCESS);
    return 0;
}

static void *alloc_free_worker(void *arg)
{
    CHECK(cuCtxSetCurrent((CUcontext)arg), CUDA_SUCCESS);
    for (int i = 0; i < 20000; i++) {
        CUdeviceptr p;
        CHECK(cuMemAlloc_v2(&p, 4096 + (size_t)i), CUDA_SUCCESS);
        CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    }
    return NULL;
}

int scenario_threads(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUcontext c;
    CHECK(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, alloc_free_worker, c);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    EXPECT_EQ(fgt_used(), 0);
    return 0;
}

/* A fork child must cuInit again (documented difference: the real driver refuses
 * CUDA in a child of an initialised parent); it gets its own accounting slot. */
int scenario_fork(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 10 * MiB), CUDA_SUCCESS);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        CUdeviceptr q;
        CHECK(cuMemAlloc_v2(&q, MiB), CUDA_ERROR_NOT_INITIALIZED);
        fgt_setup(0);
        CHECK(cuMemAlloc_v2(&q, 20 * MiB), CUDA_SUCCESS);
        EXPECT_EQ(fgt_used(), 30 * MiB);
        CHECK(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE); /* the parent's, not ours */
        _exit(fg_failures ? 1 : 0); /* exits holding 20 MiB: reclaimed as dead */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(fgt_used(), 10 * MiB);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 0);
    return 0;
}

/* hold <dev> <bytes>: allocate, say "ready", keep it until stdin closes. */
int scenario_hold(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int dev = atoi(argv[0]);
    unsigned long long bytes = strtoull(argv[1], NULL, 10);
    fgt_setup(dev);
    CUdeviceptr p;
    CUresult r = cuMemAlloc_v2(&p, bytes);
    printf("alloc %d\nready\n", (int)r);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}

/* allocloop: alloc/free 1 MiB forever (killed by the test at random points). */
int scenario_allocloop(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    printf("ready\n");
    for (;;) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS)
            cuMemFree_v2(p);
    }
}

/* busy <ms>: queue ms of kernel time, say "ready", wait for it, then hold until
 * stdin closes. */
int scenario_busy(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    fgt_setup(0);
    CUfunction sl = kernel("fakegpu_sleep");
    CHECK(sleep_on(sl, NULL, strtoull(argv[0], NULL, 10) * 1000000ull), CUDA_SUCCESS);
    printf("ready\n");
    CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
    printf("done\n");
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}

/* fill <bytes>: after "ready", wait for a line on stdin (the start signal), then
 * allocate chunks until the device refuses three times in a row, print
 * "got <total>", and hold it until stdin closes. */
int scenario_fill(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    size_t chunk = strtoull(argv[0], NULL, 10);
    fgt_setup(0);
    printf("ready\n");
    char buf[64];
    if (read(0, buf, sizeof buf) <= 0)
        return 2;
    unsigned long long total = 0;
    for (int refused = 0; refused < 3;) {
        CUdeviceptr p;
        CUresult r = cuMemAlloc_v2(&p, chunk);
        if (r == CUDA_SUCCESS) {
            total += chunk;
            refused = 0;
        } else {
            EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY);
            refused++;
        }
    }
    printf("got %llu\n", total);
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}
