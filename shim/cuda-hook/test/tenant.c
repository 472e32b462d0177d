/* tenant — one GPU tenant for the compute time-slice tests and benchmarks: it
 * launches fakegpu_sleep kernels on one stream for a while, through one launch
 * path, and reports. Paths: kernel (cuLaunchKernel, linked symbol), ptsz
 * (cuLaunchKernel_ptsz from cuGetProcAddress_v2 with the per-thread flag), ex
 * (cuLaunchKernelEx via dlsym), coop (cuLaunchCooperativeKernel via dlsym),
 * graph (a one-kernel CUDA graph, cuGraphLaunch via dlsym).
 *
 *   tenant PATH KERNEL_US SECONDS [burst=WORK_US/PERIOD_MS] [duty=ON_MS/OFF_MS] [children=N] [reset=1] [thread=K] [devices=2] [sync=N] [host=US] [capture=global|global-query]
 *
 * KERNEL_US may be "mixed" (50 us, 1 ms, 10 ms, 200 us in turn). Saturating by
 * default (a queue kept full, synchronised every 64 launches, or every N with
 * sync=N: a shallow queue, which feels every descheduling of the process); burst: WORK_US of
 * kernels every PERIOD_MS, each burst synchronised and its latency reported;
 * duty: saturating for ON_MS, idle for OFF_MS. children: fork+exec N copies of
 * itself first (they count against the same container). reset=1: launch a few
 * kernels, reset the primary context (cudaDeviceReset) and start again in it
 * (same handle, new events). thread=K: every K launches come from a new thread
 * that exits right after them (a thread per request). devices=2: one thread
 * launches on devices 0 and 1 in turn (cuCtxSetCurrent before each launch, as a
 * loop over cudaSetDevice does). host=US: after each launch the thread is away
 * from the GPU for US microseconds (host work between launches, as a training
 * loop preparing its next step; its kernels in flight keep running).
 * capture=global: a second thread captures graphs of 20 kernels on its own
 * stream in CU_STREAM_CAPTURE_MODE_GLOBAL over ~10 ms each, in a loop, while
 * this one launches (it synchronises only between captures, which would
 * otherwise be its own unsafe call); global-query: this thread also calls
 * cuEventQuery during them (the application breaking its own captures).
 * Reports "captures=C invalidated=I".
 * Prints "ready" once
 * initialised and "done launches=N lat_us=a,b,..." at the end; any failure
 * "err ..." and exit 1. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver.h"

/* Layouts as in cuda.h (CUDA 12), kept local: not every driver header has them. */
struct launch_config {
    unsigned int gx, gy, gz, bx, by, bz, shmem;
    CUstream stream;
    void *attrs;
    unsigned int nattrs;
};
struct kernel_node_params_v2 {
    CUfunction func;
    unsigned int gx, gy, gz, bx, by, bz, shmem;
    void **params, **extra;
    void *kern;
    CUcontext ctx;
};

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
static const char *g_path;
static CUfunction g_f;
static CUstream g_stream;
static launch_fn g_ptsz;
static CUresult (*g_ex)(const struct launch_config *, CUfunction, void **, void **);
static CUresult (*g_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                          void **);
static CUresult (*g_graph_launch)(void *, CUstream);
static CUresult (*g_graph_create)(void **, unsigned);
static CUresult (*g_graph_add_kernel)(void **, void *, const void *, size_t, const struct kernel_node_params_v2 *);
static CUresult (*g_graph_instantiate)(void **, void *, unsigned long long);
static void *g_graph_exec[5]; /* one per mixed size */
static CUcontext g_ctx;
static pthread_mutex_t g_capture_mu = PTHREAD_MUTEX_INITIALIZER; /* held while a capture is open */
static volatile int g_capture_stop;
static unsigned long g_captures, g_invalidated;
static CUresult (*g_begin_capture)(CUstream, CUstreamCaptureMode);
static CUresult (*g_end_capture)(CUstream, void **);
static CUcontext g_ctxs[2];
static CUfunction g_fs[2];
static CUstream g_streams[2];

static void die(const char *what, CUresult r)
{
    printf("err %s %d\n", what, (int)r);
    fflush(stdout);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *need(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (p == NULL) {
        printf("err %s not in this driver\n", name);
        fflush(stdout);
        exit(2);
    }
    return p;
}

static const uint64_t mixed[] = {50000, 1000000, 10000000, 200000};

static void launch(uint64_t ns, int which)
{
    static uint64_t param;
    param = ns;
    void *params[] = {&param};
    CUresult r;
    if (strcmp(g_path, "kernel") == 0) {
        r = cuLaunchKernel(g_f, 1, 1, 1, 1, 1, 1, 0, g_stream, params, NULL);
    } else if (strcmp(g_path, "ptsz") == 0) {
        r = g_ptsz(g_f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    } else if (strcmp(g_path, "ex") == 0) {
        struct launch_config c = {1, 1, 1, 1, 1, 1, 0, g_stream, NULL, 0};
        r = g_ex(&c, g_f, params, NULL);
    } else if (strcmp(g_path, "coop") == 0) {
        r = g_coop(g_f, 1, 1, 1, 1, 1, 1, 0, g_stream, params);
    } else {
        r = g_graph_launch(g_graph_exec[which], g_stream);
    }
    if (r != CUDA_SUCCESS)
        die("launch", r);
}

struct thread_job {
    uint64_t ns;
    int which, n;
};

static void *launch_thread(void *arg)
{
    struct thread_job *j = arg;
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r != CUDA_SUCCESS)
        die("thread cuCtxSetCurrent", r);
    for (int i = 0; i < j->n; i++)
        launch(j->ns, j->which);
    return NULL;
}

/* Launches one kernel and then waits on the host for good without coming
 * back through the hook (a thread that waits for another: PyTorch's autograd
 * thread between backward passes): its burst stays counted in flight. */
static volatile int g_parked_launched;

static void *parked_thread(void *arg)
{
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r != CUDA_SUCCESS)
        die("parked cuCtxSetCurrent", r);
    launch(*(uint64_t *)arg, 4);
    g_parked_launched = 1;
    for (;;)
        pause();
    return NULL;
}

/* Launches one kernel, synchronises and then waits on the host for good: a
 * launch sequence with nothing in flight that lives on (a thread of a pool
 * that served one request). */
static volatile int g_idler_done;
static void sync_stream(void);

static void *idle_thread(void *arg)
{
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r != CUDA_SUCCESS)
        die("idler cuCtxSetCurrent", r);
    launch(*(uint64_t *)arg, 4);
    sync_stream();
    g_idler_done = 1;
    for (;;)
        pause();
    return NULL;
}

static void *build_graph(uint64_t ns)
{
    static uint64_t params_store[5];
    static int n;
    params_store[n] = ns;
    static void *pp[5][1];
    pp[n][0] = &params_store[n];
    struct kernel_node_params_v2 kp = {g_f, 1, 1, 1, 1, 1, 1, 0, pp[n], NULL, NULL, NULL};
    n++;
    void *graph, *node, *exec;
    CUresult r = g_graph_create(&graph, 0);
    if (r == CUDA_SUCCESS)
        r = g_graph_add_kernel(&node, graph, NULL, 0, &kp);
    if (r == CUDA_SUCCESS)
        r = g_graph_instantiate(&exec, graph, 0);
    if (r != CUDA_SUCCESS)
        die("graph", r);
    return exec;
}

/* Captures graphs in GLOBAL mode on its own stream until told to stop. */
static void *capture_thread(void *arg)
{
    (void)arg;
    CUstream cs;
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r == CUDA_SUCCESS)
        r = cuStreamCreate(&cs, 0);
    if (r != CUDA_SUCCESS)
        die("capture thread", r);
    static uint64_t ns = 100000;
    void *params[] = {&ns};
    while (!g_capture_stop) {
        pthread_mutex_lock(&g_capture_mu);
        if ((r = g_begin_capture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS)
            die("cuStreamBeginCapture_v2", r);
        for (int i = 0; i < 20; i++) {
            if ((r = cuLaunchKernel(g_f, 1, 1, 1, 1, 1, 1, 0, cs, params, NULL)) != CUDA_SUCCESS)
                die("launch into capture", r);
            nanosleep(&(struct timespec){0, 500000}, NULL);
        }
        void *graph = NULL, *exec = NULL;
        r = g_end_capture(cs, &graph);
        pthread_mutex_unlock(&g_capture_mu);
        if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
            g_invalidated++;
            continue;
        }
        if (r != CUDA_SUCCESS)
            die("cuStreamEndCapture", r);
        g_captures++;
        if ((r = g_graph_instantiate(&exec, graph, 0)) != CUDA_SUCCESS || (r = g_graph_launch(exec, cs)) != CUDA_SUCCESS ||
            (r = cuStreamSynchronize(cs)) != CUDA_SUCCESS)
            die("captured graph", r);
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    return NULL;
}

static void sync_stream(void)
{
    CUresult r = strcmp(g_path, "ptsz") == 0 ? cuCtxSynchronize() : cuStreamSynchronize(g_stream);
    if (r != CUDA_SUCCESS)
        die("sync", r);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tenant PATH KERNEL_US SECONDS [burst=W/P] [duty=ON/OFF] [children=N] [reset=1] [thread=K] [devices=2] [idlers=N] [parked=1]\n");
        return 2;
    }
    g_path = argv[1];
    int is_mixed = strcmp(argv[2], "mixed") == 0;
    uint64_t kernel_ns = is_mixed ? 0 : strtoull(argv[2], NULL, 10) * 1000ull;
    double seconds = atof(argv[3]);
    uint64_t burst_work = 0, burst_period = 0, duty_on = 0, duty_off = 0;
    int children = 0, reset = 0, per_thread = 0, ndev = 1, capture = 0, parked = 0, idlers = 0;
    uint64_t sync_every = 64, host_ns = 0;
    for (int i = 4; i < argc; i++) {
        unsigned long long a, b;
        if (sscanf(argv[i], "burst=%llu/%llu", &a, &b) == 2) {
            burst_work = a * 1000ull;
            burst_period = b * 1000000ull;
        } else if (sscanf(argv[i], "duty=%llu/%llu", &a, &b) == 2) {
            duty_on = a * 1000000ull;
            duty_off = b * 1000000ull;
        } else if (sscanf(argv[i], "children=%llu", &a) == 1) {
            children = (int)a;
        } else if (sscanf(argv[i], "reset=%llu", &a) == 1) {
            reset = (int)a;
        } else if (sscanf(argv[i], "thread=%llu", &a) == 1) {
            per_thread = (int)a;
        } else if (strcmp(argv[i], "capture=global") == 0) {
            capture = 1;
        } else if (strcmp(argv[i], "capture=global-query") == 0) {
            capture = 2;
        } else if (sscanf(argv[i], "sync=%llu", &a) == 1 && a > 0) {
            sync_every = a;
        } else if (sscanf(argv[i], "host=%llu", &a) == 1) {
            host_ns = a * 1000ull;
        } else if (sscanf(argv[i], "idlers=%llu", &a) == 1) {
            idlers = (int)a;
        } else if (sscanf(argv[i], "parked=%llu", &a) == 1) {
            parked = a != 0;
        } else if (sscanf(argv[i], "devices=%llu", &a) == 1) {
            ndev = a == 2 ? 2 : 1;
        }
    }
    pid_t kids[64];
    for (int i = 0; i < children && i < 64; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char *args[] = {argv[0], argv[1], argv[2], argv[3], NULL};
            execv("/proc/self/exe", args);
            _exit(127);
        }
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGet(&dev, 0);
    if (r == CUDA_SUCCESS)
        r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_SUCCESS)
        r = cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS)
        r = cuModuleLoadData(&mod, "fakegpu");
    if (r == CUDA_SUCCESS)
        r = cuModuleGetFunction(&g_f, mod, "fakegpu_sleep");
    if (r == CUDA_SUCCESS && strcmp(g_path, "ptsz") != 0)
        r = cuStreamCreate(&g_stream, 0);
    if (r != CUDA_SUCCESS)
        die("init", r);
    if (strcmp(g_path, "ptsz") == 0) {
        CUdriverProcAddressQueryResult st;
        r = cuGetProcAddress_v2("cuLaunchKernel", (void **)&g_ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                &st);
        if (r != CUDA_SUCCESS || g_ptsz == NULL)
            die("cuGetProcAddress_v2", r);
    } else if (strcmp(g_path, "ex") == 0) {
        g_ex = need("cuLaunchKernelEx");
    } else if (strcmp(g_path, "coop") == 0) {
        g_coop = need("cuLaunchCooperativeKernel");
    } else if (strcmp(g_path, "graph") == 0) {
        g_graph_launch = need("cuGraphLaunch");
        g_graph_create = need("cuGraphCreate");
        g_graph_add_kernel = need("cuGraphAddKernelNode_v2");
        g_graph_instantiate = need("cuGraphInstantiateWithFlags");
        for (int i = 0; i < 4; i++)
            g_graph_exec[i] = build_graph(mixed[i]);
        g_graph_exec[4] = build_graph(kernel_ns);
    } else if (strcmp(g_path, "kernel") != 0) {
        fprintf(stderr, "unknown path %s\n", g_path);
        return 2;
    }
    if (reset && strcmp(g_path, "kernel") == 0) {
        for (int i = 0; i < 3; i++)
            launch(kernel_ns, 4);
        sync_stream();
        r = cuDevicePrimaryCtxReset_v2(dev);
        if (r == CUDA_SUCCESS)
            r = cuDevicePrimaryCtxRetain(&ctx, dev);
        if (r == CUDA_SUCCESS)
            r = cuCtxSetCurrent(ctx);
        if (r == CUDA_SUCCESS)
            r = cuModuleLoadData(&mod, "fakegpu");
        if (r == CUDA_SUCCESS)
            r = cuModuleGetFunction(&g_f, mod, "fakegpu_sleep");
        if (r == CUDA_SUCCESS)
            r = cuStreamCreate(&g_stream, 0);
        if (r != CUDA_SUCCESS)
            die("reset", r);
    }
    g_ctx = ctx;
    if (ndev == 2) {
        g_ctxs[0] = ctx, g_fs[0] = g_f, g_streams[0] = g_stream;
        CUdevice d1;
        r = cuDeviceGet(&d1, 1);
        if (r == CUDA_SUCCESS)
            r = cuDevicePrimaryCtxRetain(&g_ctxs[1], d1);
        if (r == CUDA_SUCCESS)
            r = cuCtxSetCurrent(g_ctxs[1]);
        if (r == CUDA_SUCCESS)
            r = cuModuleLoadData(&mod, "fakegpu");
        if (r == CUDA_SUCCESS)
            r = cuModuleGetFunction(&g_fs[1], mod, "fakegpu_sleep");
        if (r == CUDA_SUCCESS)
            r = cuStreamCreate(&g_streams[1], 0);
        if (r == CUDA_SUCCESS)
            r = cuCtxSetCurrent(ctx);
        if (r != CUDA_SUCCESS)
            die("device 1", r);
    }
    pthread_t capturer;
    CUevent probe = NULL;
    if (capture) {
        g_begin_capture = need("cuStreamBeginCapture_v2");
        g_end_capture = need("cuStreamEndCapture");
        g_graph_instantiate = need("cuGraphInstantiateWithFlags");
        g_graph_launch = need("cuGraphLaunch");
        if ((r = cuEventCreate(&probe, 0)) != CUDA_SUCCESS)
            die("cuEventCreate", r);
        if (pthread_create(&capturer, NULL, capture_thread, NULL) != 0)
            die("pthread_create", 0);
    }
    for (int i = 0; i < idlers; i++) {
        static uint64_t idler_ns;
        idler_ns = kernel_ns ? kernel_ns : mixed[0];
        g_idler_done = 0;
        pthread_t th;
        if (pthread_create(&th, NULL, idle_thread, &idler_ns) != 0)
            die("pthread_create", 0);
        pthread_detach(th);
        while (!g_idler_done) /* launch() is not thread-safe */
            usleep(100);
    }
    if (parked) {
        static uint64_t parked_ns;
        parked_ns = kernel_ns ? kernel_ns : mixed[0];
        pthread_t th;
        if (pthread_create(&th, NULL, parked_thread, &parked_ns) != 0)
            die("pthread_create", 0);
        pthread_detach(th);
        while (!g_parked_launched) /* launch() is not thread-safe */
            usleep(100);
    }
    printf("ready\n");
    fflush(stdout);
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), launches = 0;
    size_t nlat = 0;
    static char lat[65536];
    int which = 0;
    while (now_ns() < end) {
        uint64_t ns = kernel_ns;
        int w = 4;
        if (is_mixed) {
            w = which++ % 4;
            ns = mixed[w];
        }
        if (burst_work) {
            uint64_t t0 = now_ns();
            for (uint64_t done = 0; done < burst_work; done += ns) {
                launch(ns, w);
                launches++;
            }
            sync_stream();
            uint64_t t1 = now_ns();
            nlat += (size_t)snprintf(lat + nlat, nlat < sizeof lat - 32 ? sizeof lat - nlat : 0, "%s%llu",
                                     nlat ? "," : "", (unsigned long long)((t1 - t0) / 1000));
            uint64_t next = t0 + burst_period;
            while (now_ns() < next) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        if (duty_on && ((now_ns() - start) % (duty_on + duty_off)) >= duty_on) {
            sync_stream();
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (per_thread) {
            struct thread_job j = {ns, w, per_thread};
            pthread_t th;
            if (pthread_create(&th, NULL, launch_thread, &j) != 0)
                die("pthread_create", 0);
            pthread_join(th, NULL);
            launches += (uint64_t)per_thread;
            if (launches % 64 < (uint64_t)per_thread)
                sync_stream();
            continue;
        }
        if (ndev == 2) {
            int d = (int)(launches % 2);
            if ((r = cuCtxSetCurrent(g_ctxs[d])) != CUDA_SUCCESS)
                die("cuCtxSetCurrent", r);
            g_f = g_fs[d], g_stream = g_streams[d];
            launch(ns, w);
            if (++launches % 64 == 0) {
                for (d = 0; d < 2; d++) {
                    cuCtxSetCurrent(g_ctxs[d]);
                    g_stream = g_streams[d];
                    sync_stream();
                }
            }
            continue;
        }
        launch(ns, w);
        if (host_ns > 0) {
            struct timespec ts = {(time_t)(host_ns / 1000000000ull), (long)(host_ns % 1000000000ull)};
            nanosleep(&ts, NULL);
        }
        if (capture == 2) {
            cuEventRecord(probe, g_stream);
            cuEventQuery(probe); /* unsafe during another thread's GLOBAL capture */
        }
        if (++launches % sync_every == 0) {
            if (capture)
                pthread_mutex_lock(&g_capture_mu); /* the sync is an unsafe call too */
            sync_stream();
            if (capture)
                pthread_mutex_unlock(&g_capture_mu);
        }
    }
    if (capture) {
        g_capture_stop = 1;
        pthread_join(capturer, NULL);
    }
    sync_stream();
    for (int i = 0; i < children && i < 64; i++)
        waitpid(kids[i], NULL, 0);
    if (capture)
        printf("done launches=%llu captures=%lu invalidated=%lu lat_us=%s\n", (unsigned long long)launches, g_captures,
               g_invalidated, lat);
    else
        printf("done launches=%llu lat_us=%s\n", (unsigned long long)launches, lat);
    fflush(stdout);
    return 0;
}
