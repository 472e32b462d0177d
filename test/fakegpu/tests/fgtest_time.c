/* fgtest_time.c — simulated GPU time shared between processes (docs/fakegpu.md,
 * "Kernels and time"): the in-process checks (order, events, every launch API)
 * and the tenants the Go tests run side by side (saturate, queue, probe, latency). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgtest.h"

static CUfunction sleep_kernel(void)
{
    CUmodule m;
    CUfunction f = NULL;
    CHECK(cuModuleLoadData(&m, "fake image"), CUDA_SUCCESS);
    CHECK(cuModuleGetFunction(&f, m, "fakegpu_sleep"), CUDA_SUCCESS);
    return f;
}

/* How a tenant launches: each way must reach the device timeline. */
enum api { API_LAUNCH, API_PTSZ, API_EX, API_COOP, API_GRAPH, API_CAPTURE };

static enum api parse_api(const char *s)
{
    static const char *names[] = {"launch", "ptsz", "ex", "coop", "graph", "capture"};
    for (int i = 0; i < 6; i++)
        if (strcmp(s, names[i]) == 0)
            return (enum api)i;
    fprintf(stderr, "unknown api %s\n", s);
    exit(2);
}

struct launcher {
    enum api api;
    CUfunction f;
    CUstream s;
    unsigned long long ns;
    CUgraphExec exec; /* API_GRAPH / API_CAPTURE: one kernel of ns */
};

static CUresult launch_once(struct launcher *l)
{
    void *args[] = {&l->ns};
    switch (l->api) {
    case API_LAUNCH:
        return cuLaunchKernel(l->f, 1, 1, 1, 32, 1, 1, 0, l->s, args, NULL);
    case API_PTSZ:
        return cuLaunchKernel_ptsz(l->f, 1, 1, 1, 32, 1, 1, 0, l->s, args, NULL);
    case API_EX: {
        CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_PRIORITY};
        attr.value.priority = 0;
        CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
                              .blockDimZ = 1, .hStream = l->s, .attrs = &attr, .numAttrs = 1};
        return cuLaunchKernelEx(&cfg, l->f, args, NULL);
    }
    case API_COOP:
        return cuLaunchCooperativeKernel(l->f, 1, 1, 1, 32, 1, 1, 0, l->s, args);
    case API_GRAPH:
    case API_CAPTURE:
        return cuGraphLaunch(l->exec, l->s);
    }
    return CUDA_ERROR_UNKNOWN;
}

static void launcher_init(struct launcher *l, enum api api, CUstream s, unsigned long long ns)
{
    l->api = api;
    l->f = sleep_kernel();
    l->s = s;
    l->ns = ns;
    l->exec = NULL;
    CUgraph g = NULL;
    if (api == API_GRAPH) {
        void *args[] = {&l->ns};
        CUDA_KERNEL_NODE_PARAMS_v2 p = {.func = l->f, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
                                        .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
        CUgraphNode n;
        CHECK(cuGraphCreate(&g, 0), CUDA_SUCCESS);
        CHECK(cuGraphAddKernelNode_v2(&n, g, NULL, 0, &p), CUDA_SUCCESS);
    } else if (api == API_CAPTURE) {
        void *args[] = {&l->ns};
        CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
        CHECK(cuLaunchKernel(l->f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
        CHECK(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    }
    if (g)
        CHECK(cuGraphInstantiateWithFlags(&l->exec, g, 0), CUDA_SUCCESS);
}

/* saturate <ms> <kernel_us> <depth> <api>: keep 7/8 to all of depth kernels
 * queued for ms of wall time: kernels go in 8 groups of depth/8, an event after
 * each group; before a group, wait for the event of the group 8 back (one
 * wake-up per group, so that 50 µs kernels do not need 20k wake-ups a second
 * on this loaded machine). Says "ready" once the queue is full. */
int scenario_saturate(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    double ms = atof(argv[0]);
    unsigned long long ns = strtoull(argv[1], NULL, 10) * 1000ull;
    int depth = atoi(argv[2]);
    if (depth < 1 || depth > 256)
        return 2;
    fgt_setup(0);
    CUstream s;
    CHECK(cuStreamCreate(&s, 1), CUDA_SUCCESS);
    struct launcher l;
    launcher_init(&l, parse_api(argv[3]), s, ns);
    enum { GROUPS = 8 };
    int per = depth / GROUPS > 0 ? depth / GROUPS : 1;
    CUevent ev[GROUPS];
    for (int i = 0; i < GROUPS; i++)
        CHECK(cuEventCreate(&ev[i], 0), CUDA_SUCCESS);
    double t0 = fgt_now_ms();
    for (long g = 0; fgt_now_ms() - t0 < ms; g++) {
        if (g >= GROUPS)
            CHECK(cuEventSynchronize(ev[g % GROUPS]), CUDA_SUCCESS);
        for (int k = 0; k < per; k++)
            CHECK(launch_once(&l), CUDA_SUCCESS);
        CHECK(cuEventRecord(ev[g % GROUPS], s), CUDA_SUCCESS);
        if (g == GROUPS - 1)
            printf("ready\n");
    }
    CHECK(cuStreamSynchronize(s), CUDA_SUCCESS);
    return 0;
}

/* forksat <ms> <kernel_us> <depth>: fork, then parent and child both saturate
 * (the child is its own process: cuInit again, its own context). */
int scenario_forksat(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char *args[] = {argv[0], argv[1], argv[2], "launch"};
        fg_failures = 0;
        scenario_saturate(4, args);
        _exit(fg_failures ? 1 : 0);
    }
    printf("child %d\n", (int)pid);
    char *args[] = {argv[0], argv[1], argv[2], "launch"};
    scenario_saturate(4, args);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
}

/* churn: forever, bursts of 10 µs kernels with a query and a synchronisation
 * each, so that the process spends its time replaying and committing the
 * device timeline: the test kills and stops it at random instants. */
int scenario_churn(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUfunction f = sleep_kernel();
    CUstream s;
    CUevent e;
    CHECK(cuStreamCreate(&s, 1), CUDA_SUCCESS);
    CHECK(cuEventCreate(&e, 0), CUDA_SUCCESS);
    unsigned long long ns = 10000;
    void *args[] = {&ns};
    printf("ready\n");
    for (;;) {
        for (int i = 0; i < 4; i++)
            cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
        cuEventRecord(e, s);
        cuStreamQuery(s);
        cuEventSynchronize(e);
    }
}

/* queue <n> <kernel_us>: launch n kernels at once, say "ready", wait for all,
 * say "done", then hold until stdin closes. */
int scenario_queue(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int n = atoi(argv[0]);
    unsigned long long ns = strtoull(argv[1], NULL, 10) * 1000ull;
    fgt_setup(0);
    CUfunction f = sleep_kernel();
    void *args[] = {&ns};
    for (int i = 0; i < n; i++)
        CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
    printf("ready\n");
    CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
    printf("done\n");
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}

/* probe <kernel_us>: one short kernel between two events; prints its simulated
 * latency (from the first event to the kernel's end) and the wall time the
 * synchronisation took, in ms. */
int scenario_probe(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    unsigned long long ns = strtoull(argv[0], NULL, 10) * 1000ull;
    fgt_setup(0);
    CUfunction f = sleep_kernel();
    CUstream s;
    CUevent a, b;
    CHECK(cuStreamCreate(&s, 1), CUDA_SUCCESS);
    CHECK(cuEventCreate(&a, 0), CUDA_SUCCESS);
    CHECK(cuEventCreate(&b, 0), CUDA_SUCCESS);
    void *args[] = {&ns};
    double t0 = fgt_now_ms();
    CHECK(cuEventRecord(a, s), CUDA_SUCCESS);
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
    CHECK(cuEventRecord(b, s), CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(s), CUDA_SUCCESS);
    double wall = fgt_now_ms() - t0;
    float sim = 0;
    CHECK(cuEventElapsedTime(&sim, a, b), CUDA_SUCCESS);
    printf("probe sim %.4f wall %.4f\n", sim, wall);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* latency <n> <kernel_us>: n times, one kernel and an event, then wait for the
 * event; the wake-up latency is the wall time the wait returned minus the
 * simulated instant the kernel finished (from a reference event recorded on an
 * idle stream, whose timestamp is the wall time of its record). Prints
 * "latency p50 <us> p99 <us> max <us>". */
int scenario_latency(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int n = atoi(argv[0]);
    if (n < 1 || n > 100000)
        return 2;
    unsigned long long ns = strtoull(argv[1], NULL, 10) * 1000ull;
    fgt_setup(0);
    CUfunction f = sleep_kernel();
    CUstream s;
    CUevent ref, e;
    CHECK(cuStreamCreate(&s, 1), CUDA_SUCCESS);
    CHECK(cuEventCreate(&ref, 0), CUDA_SUCCESS);
    CHECK(cuEventCreate(&e, 0), CUDA_SUCCESS);
    double *lat = calloc((size_t)n, sizeof *lat);
    void *args[] = {&ns};
    for (int i = 0; i < n; i++) {
        double t_ref = fgt_now_ms();
        CHECK(cuEventRecord(ref, s), CUDA_SUCCESS);
        CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
        CHECK(cuEventRecord(e, s), CUDA_SUCCESS);
        CHECK(cuEventSynchronize(e), CUDA_SUCCESS);
        double woke = fgt_now_ms();
        float el = 0;
        CHECK(cuEventElapsedTime(&el, ref, e), CUDA_SUCCESS);
        lat[i] = (woke - (t_ref + el)) * 1000.0;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    printf("latency p50 %.1f p99 %.1f max %.1f\n", lat[n / 2], lat[(n * 99) / 100], lat[n - 1]);
    free(lat);
    return 0;
}

static float elapsed(CUevent a, CUevent b)
{
    float ms = -1;
    CHECK(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    return ms;
}

#define NEAR(x, want, tol) EXPECT((x) >= (want) - (tol) && (x) <= (want) + (tol))

/* Devices are independent timelines; one process's launch ring serves both (600
 * launches alternating between them: more than the ring holds). */
static int two_devices(CUfunction f0)
{
    CUcontext c0, c1;
    CHECK(cuCtxGetCurrent(&c0), CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(c1), CUDA_SUCCESS);
    CUfunction f1 = sleep_kernel();
    CUevent a1, b1, a0, b0;
    CHECK(cuEventCreate(&a1, 0), CUDA_SUCCESS);
    CHECK(cuEventCreate(&b1, 0), CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(c0), CUDA_SUCCESS);
    CHECK(cuEventCreate(&a0, 0), CUDA_SUCCESS);
    CHECK(cuEventCreate(&b0, 0), CUDA_SUCCESS);
    unsigned long long k = 20000; /* 20 µs */
    void *args[] = {&k};
    double t0 = fgt_now_ms();
    for (int i = 0; i < 600; i++) {
        int dev = i & 1;
        CHECK(cuCtxSetCurrent(dev ? c1 : c0), CUDA_SUCCESS);
        if (i < 2)
            CHECK(cuEventRecord(dev ? a1 : a0, NULL), CUDA_SUCCESS);
        CHECK(cuLaunchKernel(dev ? f1 : f0, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
    }
    CHECK(cuEventRecord(b1, NULL), CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(c0), CUDA_SUCCESS);
    CHECK(cuEventRecord(b0, NULL), CUDA_SUCCESS);
    CHECK(cuEventSynchronize(b0), CUDA_SUCCESS);
    CHECK(cuEventSynchronize(b1), CUDA_SUCCESS);
    double wall = fgt_now_ms() - t0;
    float ms0 = elapsed(a0, b0), ms1 = elapsed(a1, b1);
    /* 300 × 20 µs on each: 6 ms of GPU time each, side by side. */
    EXPECT(ms0 >= 6.0f && ms1 >= 6.0f);
    printf("two devices: %.3f / %.3f ms of GPU time, %.3f ms wall\n", ms0, ms1, wall);
    CHECK(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    return 0;
}

/* order: one process alone. Kernels of a stream run in launch order; a context's
 * streams share its queue; events measure simulated GPU time exactly; every
 * launch API queues its time; capture and queries behave. */
int scenario_order(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUfunction f = sleep_kernel();
    CUstream s1, s2;
    CHECK(cuStreamCreate(&s1, 1), CUDA_SUCCESS);
    CHECK(cuStreamCreate(&s2, 1), CUDA_SUCCESS);
    CUevent e[8];
    for (int i = 0; i < 8; i++)
        CHECK(cuEventCreate(&e[i], 0), CUDA_SUCCESS);
    /* Three kernels of 3, 1 and 2 ms back to back: each event 1 kernel later. */
    unsigned long long d[3] = {3000000, 1000000, 2000000};
    CHECK(cuEventRecord(e[0], s1), CUDA_SUCCESS);
    for (int i = 0; i < 3; i++) {
        void *args[] = {&d[i]};
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s1, args, NULL), CUDA_SUCCESS);
        CHECK(cuEventRecord(e[i + 1], s1), CUDA_SUCCESS);
    }
    CHECK(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    CHECK(cuEventQuery(e[3]), CUDA_ERROR_NOT_READY);
    float ms;
    CHECK(cuEventElapsedTime(&ms, e[0], e[3]), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s1), CUDA_SUCCESS);
    CHECK(cuStreamQuery(s1), CUDA_SUCCESS);
    CHECK(cuEventQuery(e[3]), CUDA_SUCCESS);
    NEAR(elapsed(e[0], e[1]), 3.0f, 0.2f); /* + the time the first launch took */
    NEAR(elapsed(e[1], e[2]), 1.0f, 0.0005f);
    NEAR(elapsed(e[2], e[3]), 2.0f, 0.0005f);
    printf("order: %.4f %.4f %.4f ms\n", elapsed(e[0], e[1]), elapsed(e[1], e[2]), elapsed(e[2], e[3]));
    /* Two streams of one context share its queue: s2's 1 ms kernel, launched
     * after s1's 5 ms one, ends 1 ms after it. */
    unsigned long long five = 5000000, one = 1000000;
    void *a5[] = {&five}, *a1[] = {&one};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s1, a5, NULL), CUDA_SUCCESS);
    CHECK(cuEventRecord(e[4], s1), CUDA_SUCCESS);
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s2, a1, NULL), CUDA_SUCCESS);
    CHECK(cuEventRecord(e[5], s2), CUDA_SUCCESS);
    CHECK(cuEventSynchronize(e[5]), CUDA_SUCCESS);
    CHECK(cuEventQuery(e[4]), CUDA_SUCCESS);
    NEAR(elapsed(e[4], e[5]), 1.0f, 0.0005f);
    /* Every launch API, 1 ms each, back to back: 6 ms between the events. */
    CHECK(cuEventRecord(e[6], s1), CUDA_SUCCESS);
    for (enum api api = API_LAUNCH; api <= API_CAPTURE; api++) {
        struct launcher l;
        launcher_init(&l, api, s1, 1000000);
        CHECK(launch_once(&l), CUDA_SUCCESS);
        if (api == API_LAUNCH) { /* the first kernel ends 1 ms after e[6]: from here on, back to back */
            CHECK(cuEventRecord(e[6], s1), CUDA_SUCCESS);
        }
    }
    CHECK(cuEventRecord(e[7], s1), CUDA_SUCCESS);
    CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
    NEAR(elapsed(e[6], e[7]), 5.0f, 0.0005f);
    printf("apis: %.4f ms for 5 launches of 1 ms\n", elapsed(e[6], e[7]));
    /* A captured stream queues nothing until the graph is launched; syncing it
     * during capture is refused. */
    CUgraph g;
    CUgraphExec x;
    CUstreamCaptureStatus st;
    CHECK(cuStreamBeginCapture_v2(s2, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK(cuStreamBeginCapture_v2(s2, CU_STREAM_CAPTURE_MODE_GLOBAL), (CUresult)401);
    CHECK(cuStreamIsCapturing(s2, &st), CUDA_SUCCESS);
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s2, a5, NULL), CUDA_SUCCESS);
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s2, a1, NULL), CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(s2), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(cuStreamEndCapture(s2, &g), CUDA_SUCCESS);
    CHECK(cuStreamQuery(s2), CUDA_SUCCESS);
    CHECK(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    CHECK(cuEventRecord(e[0], s2), CUDA_SUCCESS);
    CHECK(cuGraphLaunch(x, s2), CUDA_SUCCESS);
    CHECK(cuGraphLaunch_ptsz(x, s2), CUDA_SUCCESS);
    CHECK(cuEventRecord(e[1], s2), CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(s2), CUDA_SUCCESS);
    NEAR(elapsed(e[0], e[1]), 12.0f, 0.2f);
    /* Argument checks of the new entry points. */
    CUlaunchConfig bad = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                          .blockDimZ = 1, .numAttrs = 1};
    CHECK(cuLaunchKernelEx(&bad, f, a1, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuLaunchKernelEx(NULL, f, a1, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s1, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphLaunch(NULL, s1), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuGraphExecDestroy(x), CUDA_SUCCESS);
    CHECK(cuGraphLaunch(x, s1), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK(cuGraphDestroy(g), CUDA_ERROR_INVALID_HANDLE);
    /* A launch queue of 2000 kernels (more than the ring holds) completes in order. */
    unsigned long long tiny = 10000;
    void *at[] = {&tiny};
    CHECK(cuEventRecord(e[0], s1), CUDA_SUCCESS);
    for (int i = 0; i < 2000; i++)
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s1, at, NULL), CUDA_SUCCESS);
    CHECK(cuEventRecord(e[1], s1), CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(s1), CUDA_SUCCESS);
    EXPECT(elapsed(e[0], e[1]) >= 20.0f);
    for (int i = 0; i < 8; i++)
        CHECK(cuEventDestroy_v2(e[i]), CUDA_SUCCESS);
    return two_devices(f);
}
