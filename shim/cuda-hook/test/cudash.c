/* cudash — a small CUDA "shell" that the hook tests and the demo drive. It reads one
 * command per line on stdin and answers one line on stdout: "ok ..." or
 * "err <code> <name>". It reaches the driver the way real programs do, chosen with
 * -mode: direct (linked against libcuda.so.1), dlsym (dlopen + dlsym), gpa / gpa-ptsz
 * (cuGetProcAddress_v2, legacy or per-thread stream) or gpa1 (cuGetProcAddress). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver.h"

/* NVML, declared here (the hook's own declarations are private to it). */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvml_mem;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvml_mem2;
int nvmlInit_v2(void);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvml_mem *);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvml_mem2 *);

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*PrimaryRetain)(CUcontext *, CUdevice);
    CUresult (*PrimaryRelease)(CUdevice);
    CUresult (*PrimaryReset)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxCreate)(CUcontext *, unsigned, CUdevice);
    CUresult (*CtxDestroy)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*MemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*DeviceGetMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*MemPoolDestroy)(CUmemoryPool);
    CUresult (*MemPoolTrimTo)(CUmemoryPool, size_t);
    CUresult (*MemPoolGetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*ArrayCreate)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*Array3DCreate)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*ArrayDestroy)(CUarray);
    CUresult (*MipmappedArrayCreate)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
    CUresult (*MipmappedArrayDestroy)(CUmipmappedArray);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    int (*NvmlInit)(void);
    int (*NvmlHandle)(unsigned, nvmlDevice_t *);
    int (*NvmlMem)(nvmlDevice_t, nvml_mem *);
    int (*NvmlMem2)(nvmlDevice_t, nvml_mem2 *);
} api;

struct binding {
    void **slot;
    const char *exported; /* dlsym name */
    const char *base;     /* cuGetProcAddress name */
    void *linked;
};

#define B(f, exp, base) {(void **)&api.f, #exp, base, (void *)exp}
static struct binding bindings[] = {
    B(Init, cuInit, "cuInit"),
    B(DeviceGet, cuDeviceGet, "cuDeviceGet"),
    B(DeviceTotalMem, cuDeviceTotalMem_v2, "cuDeviceTotalMem"),
    B(DeviceGetUuid, cuDeviceGetUuid, "cuDeviceGetUuid"),
    B(PrimaryRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    B(PrimaryRelease, cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease"),
    B(PrimaryReset, cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset"),
    B(CtxSetCurrent, cuCtxSetCurrent, "cuCtxSetCurrent"),
    B(CtxCreate, cuCtxCreate_v2, NULL),
    B(CtxDestroy, cuCtxDestroy_v2, "cuCtxDestroy"),
    B(CtxSynchronize, cuCtxSynchronize, "cuCtxSynchronize"),
    B(StreamSynchronize, cuStreamSynchronize, "cuStreamSynchronize"),
    B(MemGetInfo, cuMemGetInfo_v2, "cuMemGetInfo"),
    B(MemAlloc, cuMemAlloc_v2, "cuMemAlloc"),
    B(MemAllocPitch, cuMemAllocPitch_v2, "cuMemAllocPitch"),
    B(MemAllocManaged, cuMemAllocManaged, "cuMemAllocManaged"),
    B(MemFree, cuMemFree_v2, "cuMemFree"),
    B(MemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync"),
    B(MemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync"),
    B(MemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync"),
    B(MemPoolCreate, cuMemPoolCreate, "cuMemPoolCreate"),
    B(DeviceGetMemPool, cuDeviceGetMemPool, "cuDeviceGetMemPool"),
    B(MemPoolDestroy, cuMemPoolDestroy, "cuMemPoolDestroy"),
    B(MemPoolTrimTo, cuMemPoolTrimTo, "cuMemPoolTrimTo"),
    B(MemPoolGetAttribute, cuMemPoolGetAttribute, "cuMemPoolGetAttribute"),
    B(MemCreate, cuMemCreate, "cuMemCreate"),
    B(MemRelease, cuMemRelease, "cuMemRelease"),
    B(MemAddressReserve, cuMemAddressReserve, "cuMemAddressReserve"),
    B(MemMap, cuMemMap, "cuMemMap"),
    B(MemUnmap, cuMemUnmap, "cuMemUnmap"),
    B(ArrayCreate, cuArrayCreate_v2, "cuArrayCreate"),
    B(Array3DCreate, cuArray3DCreate_v2, "cuArray3DCreate"),
    B(ArrayDestroy, cuArrayDestroy, "cuArrayDestroy"),
    B(MipmappedArrayCreate, cuMipmappedArrayCreate, "cuMipmappedArrayCreate"),
    B(MipmappedArrayDestroy, cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy"),
    B(ModuleLoadData, cuModuleLoadData, "cuModuleLoadData"),
    B(ModuleGetFunction, cuModuleGetFunction, "cuModuleGetFunction"),
    B(LaunchKernel, cuLaunchKernel, "cuLaunchKernel"),
};

static void die(const char *what)
{
    printf("fatal %s\n", what);
    fflush(stdout);
    exit(2);
}

static void bind_nvml(const char *mode)
{
    if (strcmp(mode, "direct") == 0) {
        api.NvmlInit = nvmlInit_v2;
        api.NvmlHandle = nvmlDeviceGetHandleByIndex_v2;
        api.NvmlMem = nvmlDeviceGetMemoryInfo;
        api.NvmlMem2 = nvmlDeviceGetMemoryInfo_v2;
        return;
    }
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (h == NULL)
        die("dlopen libnvidia-ml.so.1");
    *(void **)&api.NvmlInit = dlsym(h, "nvmlInit_v2");
    *(void **)&api.NvmlHandle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&api.NvmlMem = dlsym(h, "nvmlDeviceGetMemoryInfo");
    *(void **)&api.NvmlMem2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
}

static void bind(const char *mode)
{
    size_t n = sizeof bindings / sizeof bindings[0];
    void *h = NULL;
    if (strcmp(mode, "direct") != 0 && (h = dlopen("libcuda.so.1", RTLD_NOW)) == NULL)
        die("dlopen libcuda.so.1");
    CUresult (*gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = NULL;
    CUresult (*gpa1)(const char *, void **, int, cuuint64_t) = NULL;
    cuuint64_t flags = strcmp(mode, "gpa-ptsz") == 0 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                     : CU_GET_PROC_ADDRESS_DEFAULT;
    if (strncmp(mode, "gpa", 3) == 0) {
        *(void **)&gpa2 = dlsym(h, "cuGetProcAddress_v2");
        *(void **)&gpa1 = dlsym(h, "cuGetProcAddress");
        if ((strcmp(mode, "gpa1") == 0 ? (void *)gpa1 : (void *)gpa2) == NULL)
            die("cuGetProcAddress missing");
        /* cuInit must come first: cuGetProcAddress needs an initialised driver on some versions. */
    }
    for (size_t i = 0; i < n; i++) {
        struct binding *b = &bindings[i];
        void *p = NULL;
        if (strcmp(mode, "direct") == 0) {
            p = b->linked;
        } else if (strcmp(mode, "dlsym") == 0 || b->base == NULL) {
            p = dlsym(h, b->exported);
        } else if (strcmp(mode, "gpa1") == 0) {
            if (gpa1(b->base, &p, 11040, flags) != CUDA_SUCCESS)
                p = NULL;
        } else {
            CUdriverProcAddressQueryResult st;
            if (gpa2(b->base, &p, 12000, flags, &st) != CUDA_SUCCESS)
                p = NULL;
        }
        *b->slot = p;
    }
    bind_nvml(mode);
}

static const char *err_name(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return "CUDA_ERROR_OTHER";
    }
}

/* ---- named objects ---- */

enum kind { K_PTR = 1, K_ASYNC, K_ARRAY, K_MIPMAP, K_VMM, K_POOL, K_CTX, K_VA };
struct obj {
    char name[32];
    enum kind kind;
    unsigned long long v;
};
#define MAX_OBJS 8192
static struct obj objs[MAX_OBJS];
static int nobjs;

static struct obj *find(const char *name)
{
    for (int i = 0; i < nobjs; i++) {
        if (strcmp(objs[i].name, name) == 0)
            return &objs[i];
    }
    return NULL;
}

static void put(const char *name, enum kind k, unsigned long long v)
{
    struct obj *o = find(name);
    if (o == NULL) {
        if (nobjs == MAX_OBJS)
            die("too many objects");
        o = &objs[nobjs++];
    }
    snprintf(o->name, sizeof o->name, "%s", name);
    o->kind = k;
    o->v = v;
}

static void drop(struct obj *o) { *o = objs[--nobjs]; }

static CUresult free_obj(struct obj *o)
{
    switch (o->kind) {
    case K_PTR: return api.MemFree(o->v);
    case K_ASYNC: return api.MemFreeAsync(o->v, NULL);
    case K_ARRAY: return api.ArrayDestroy((CUarray)(uintptr_t)o->v);
    case K_MIPMAP: return api.MipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)o->v);
    case K_VMM: return api.MemRelease(o->v);
    case K_POOL: return api.MemPoolDestroy((CUmemoryPool)(uintptr_t)o->v);
    case K_CTX: return api.CtxDestroy((CUcontext)(uintptr_t)o->v);
    case K_VA: return CUDA_SUCCESS; /* address ranges are not charged; left to exit */
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- commands ---- */

static int reply(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reply(CUresult r, const char *fmt, ...)
{
    if (r != CUDA_SUCCESS) {
        printf("err %d %s\n", (int)r, err_name(r));
    } else {
        char buf[512] = "";
        if (fmt != NULL) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(buf, sizeof buf, fmt, ap);
            va_end(ap);
        }
        printf("ok%s%s\n", buf[0] ? " " : "", buf);
    }
    fflush(stdout);
    return 0;
}

static unsigned long long num(const char *s) { return s ? strtoull(s, NULL, 0) : 0; }

static CUresult set_ctx(int ord)
{
    CUdevice dev;
    CUcontext ctx;
    CUresult r = api.DeviceGet(&dev, ord);
    if (r == CUDA_SUCCESS)
        r = api.PrimaryRetain(&ctx, dev);
    if (r == CUDA_SUCCESS)
        r = api.CtxSetCurrent(ctx);
    return r;
}

struct thread_job {
    size_t bytes;
    int iters, failures;
    CUcontext ctx;
};

static void *thread_main(void *arg)
{
    struct thread_job *j = arg;
    api.CtxSetCurrent(j->ctx);
    for (int i = 0; i < j->iters; i++) {
        CUdeviceptr p;
        if (api.MemAlloc(&p, j->bytes) != CUDA_SUCCESS) {
            j->failures++;
            continue;
        }
        if (api.MemFree(p) != CUDA_SUCCESS)
            j->failures++;
    }
    return NULL;
}

static CUresult run_threads(int n, size_t bytes, int iters, int *failures)
{
    pthread_t t[64];
    struct thread_job jobs[64];
    CUcontext ctx;
    CUresult r = set_ctx(0);
    if (r != CUDA_SUCCESS)
        return r;
    extern CUresult cuCtxGetCurrent(CUcontext *);
    cuCtxGetCurrent(&ctx);
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct thread_job){.bytes = bytes, .iters = iters, .ctx = ctx};
        pthread_create(&t[i], NULL, thread_main, &jobs[i]);
    }
    *failures = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        *failures += jobs[i].failures;
    }
    return CUDA_SUCCESS;
}

/* Threads allocating from one pool at once; what they got stays allocated until
 * pool_race_free. */
#define RACE_MAX 4096
static CUdeviceptr race_ptrs[RACE_MAX];
static _Atomic int race_n;
static _Atomic int race_failures;

struct race_job {
    CUmemoryPool pool;
    CUcontext ctx;
    int per;
    size_t bytes;
};

static void *race_main(void *arg)
{
    struct race_job *j = arg;
    api.CtxSetCurrent(j->ctx);
    for (int i = 0; i < j->per; i++) {
        CUdeviceptr p;
        if (api.MemAllocFromPoolAsync(&p, j->bytes, j->pool, NULL) != CUDA_SUCCESS) {
            race_failures++;
            continue;
        }
        int k = race_n++;
        if (k < RACE_MAX)
            race_ptrs[k] = p;
    }
    return NULL;
}

static _Atomic int race_done;

/* Reads the memory view (where the hook re-reads pool reservations) until the
 * allocating threads are done. */
static void *race_watch(void *arg)
{
    struct race_job *j = arg;
    api.CtxSetCurrent(j->ctx);
    while (!race_done) {
        size_t f, t;
        api.MemGetInfo(&f, &t);
    }
    return NULL;
}

#define RACE_WATCHERS 4

static CUresult pool_race(CUmemoryPool pool, int n, int per, size_t bytes, int *failures)
{
    pthread_t t[64], w[RACE_WATCHERS];
    struct race_job job = {.pool = pool, .per = per, .bytes = bytes};
    extern CUresult cuCtxGetCurrent(CUcontext *);
    cuCtxGetCurrent(&job.ctx);
    race_failures = 0;
    race_done = 0;
    if (n > 64)
        n = 64;
    for (int i = 0; i < RACE_WATCHERS; i++)
        pthread_create(&w[i], NULL, race_watch, &job);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, race_main, &job);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    race_done = 1;
    for (int i = 0; i < RACE_WATCHERS; i++)
        pthread_join(w[i], NULL);
    *failures = race_failures;
    return CUDA_SUCCESS;
}

static CUresult pool_race_free(void)
{
    CUresult r = CUDA_SUCCESS;
    int n = race_n < RACE_MAX ? race_n : RACE_MAX;
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = api.MemFreeAsync(race_ptrs[i], NULL);
    race_n = 0;
    return r;
}

/* exitrace: threads allocate and free in a tight loop while the main thread exits. */
static void *churn_main(void *arg)
{
    struct thread_job *j = arg;
    api.CtxSetCurrent(j->ctx);
    for (;;) {
        CUdeviceptr p;
        if (api.MemAlloc(&p, j->bytes) == CUDA_SUCCESS)
            api.MemFree(p);
    }
    return NULL;
}

static void exit_race(int n, size_t bytes, unsigned us)
{
    static pthread_t t[64];
    static struct thread_job job;
    extern CUresult cuCtxGetCurrent(CUcontext *);
    job.bytes = bytes;
    cuCtxGetCurrent(&job.ctx);
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, churn_main, &job);
    usleep(us);
    exit(0);
}

static char **g_argv;
static pid_t child_pid;
static int child_pipe = -1;

/* fork: the child sets up its own context, allocates, reports, then waits until
 * the parent ends it (so the test can look at the region meanwhile). */
static CUresult do_fork(size_t bytes, char *out, size_t outlen)
{
    int report[2], hold[2];
    if (pipe(report) != 0 || pipe(hold) != 0)
        return CUDA_ERROR_UNKNOWN;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(report[0]);
        close(hold[1]);
        CUdeviceptr p;
        CUresult r = api.Init(0); /* a fork child starts without CUDA */
        if (r == CUDA_SUCCESS)
            r = set_ctx(0);
        if (r == CUDA_SUCCESS)
            r = api.MemAlloc(&p, bytes);
        int code = (int)r;
        ssize_t w = write(report[1], &code, sizeof code);
        (void)w;
        char c;
        ssize_t rd = read(hold[0], &c, 1);
        (void)rd;
        if (r == CUDA_SUCCESS)
            api.MemFree(p);
        _exit(0);
    }
    close(report[1]);
    close(hold[0]);
    int code = -1;
    if (read(report[0], &code, sizeof code) != sizeof code)
        code = -1;
    close(report[0]);
    child_pid = pid;
    child_pipe = hold[1];
    snprintf(out, outlen, "pid=%d child=%s", (int)pid, code < 0 ? "died" : err_name((CUresult)code));
    return CUDA_SUCCESS;
}

static void *command_loop(void *arg);

static int command(char **tok, int n)
{
    const char *c = tok[0];
    CUresult r;
    char out[256];
    if (strcmp(c, "init") == 0)
        return reply(api.Init(0), NULL);
    if (strcmp(c, "ctx") == 0)
        return reply(set_ctx((int)num(tok[1])), NULL);
    if (strcmp(c, "ctxrelease") == 0)
        return reply(api.PrimaryRelease((CUdevice)num(tok[1])), NULL);
    if (strcmp(c, "ctxreset") == 0)
        return reply(api.PrimaryReset((CUdevice)num(tok[1])), NULL);
    if (strcmp(c, "release") == 0 && n >= 2) {
        /* cuMemRelease without forgetting the name (to release it twice). */
        struct obj *o = find(tok[1]);
        if (o == NULL || o->kind != K_VMM)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        return reply(api.MemRelease(o->v), NULL);
    }
    if (strcmp(c, "mainexit") == 0) {
        /* The main thread exits (pthread_exit); a new thread goes on reading commands.
         * The process lives on, but /proc shows its thread-group leader as a zombie. */
        pthread_t t;
        if (pthread_create(&t, NULL, command_loop, (void *)1) != 0)
            return reply(CUDA_ERROR_UNKNOWN, NULL);
        reply(CUDA_SUCCESS, NULL);
        pthread_exit(NULL);
    }
    if (strcmp(c, "dup") == 0 && n >= 3) {
        /* A second name for an object (to free it twice). */
        struct obj *o = find(tok[1]);
        if (o == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        put(tok[2], o->kind, o->v);
        return reply(CUDA_SUCCESS, NULL);
    }
    if (strcmp(c, "forget") == 0 && n >= 2) {
        /* Drop a name without freeing it (the driver freed it with its context). */
        struct obj *o = find(tok[1]);
        if (o == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        drop(o);
        return reply(CUDA_SUCCESS, NULL);
    }
    if (strcmp(c, "vareserve") == 0 && n >= 3) {
        CUdeviceptr va;
        if ((r = api.MemAddressReserve(&va, num(tok[2]), 0, 0, 0)) == CUDA_SUCCESS)
            put(tok[1], K_VA, va);
        return reply(r, NULL);
    }
    if ((strcmp(c, "map") == 0 || strcmp(c, "unmap") == 0) && n >= 3) {
        struct obj *va = find(tok[1]), *h = c[0] == 'm' && n >= 4 ? find(tok[2]) : NULL;
        if (va == NULL || (c[0] == 'm' && h == NULL))
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        size_t size = num(tok[c[0] == 'm' ? 3 : 2]);
        return reply(c[0] == 'm' ? api.MemMap(va->v, size, 0, h->v, 0) : api.MemUnmap(va->v, size), NULL);
    }
    if (strcmp(c, "ctxnew") == 0 && n >= 3) {
        CUcontext ctx;
        if ((r = api.CtxCreate(&ctx, 0, (CUdevice)num(tok[2]))) == CUDA_SUCCESS)
            put(tok[1], K_CTX, (uintptr_t)ctx);
        return reply(r, NULL);
    }
    if (strcmp(c, "alloc") == 0 || strcmp(c, "managed") == 0 || strcmp(c, "async") == 0) {
        CUdeviceptr p;
        size_t b = num(tok[2]);
        r = c[0] == 'm' ? api.MemAllocManaged(&p, b, CU_MEM_ATTACH_GLOBAL)
            : c[0] == 'a' && c[1] == 's' ? api.MemAllocAsync(&p, b, NULL)
                                         : api.MemAlloc(&p, b);
        if (r == CUDA_SUCCESS)
            put(tok[1], c[1] == 's' ? K_ASYNC : K_PTR, p);
        return reply(r, NULL);
    }
    if (strcmp(c, "pitch") == 0 && n >= 5) {
        CUdeviceptr p;
        size_t pitch = 0;
        if ((r = api.MemAllocPitch(&p, &pitch, num(tok[2]), num(tok[3]), (unsigned)num(tok[4]))) == CUDA_SUCCESS)
            put(tok[1], K_PTR, p);
        return reply(r, "pitch=%zu", pitch);
    }
    if (strcmp(c, "pool") == 0 && n >= 3) {
        CUmemoryPool pool;
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = (int)num(tok[2]);
        if ((r = api.MemPoolCreate(&pool, &props)) == CUDA_SUCCESS)
            put(tok[1], K_POOL, (uintptr_t)pool);
        return reply(r, NULL);
    }
    if (strcmp(c, "defaultpool") == 0 && n >= 3) {
        CUmemoryPool pool;
        CUdevice dev;
        r = api.DeviceGet(&dev, (int)num(tok[2]));
        if (r == CUDA_SUCCESS && (r = api.DeviceGetMemPool(&pool, dev)) == CUDA_SUCCESS)
            put(tok[1], K_POOL, (uintptr_t)pool);
        return reply(r, NULL);
    }
    if (strcmp(c, "poolalloc") == 0 && n >= 4) {
        struct obj *pool = find(tok[2]);
        CUdeviceptr p;
        if (pool == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        if ((r = api.MemAllocFromPoolAsync(&p, num(tok[3]), (CUmemoryPool)(uintptr_t)pool->v, NULL)) ==
            CUDA_SUCCESS)
            put(tok[1], K_ASYNC, p);
        return reply(r, NULL);
    }
    if (strcmp(c, "poolrace") == 0 && n >= 5) {
        /* poolrace POOL THREADS PER BYTES: threads allocate at once and keep it all. */
        struct obj *pool = find(tok[1]);
        int failures = 0;
        if (pool == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        r = pool_race((CUmemoryPool)(uintptr_t)pool->v, (int)num(tok[2]), (int)num(tok[3]), num(tok[4]),
                      &failures);
        return reply(r, "failures=%d", failures);
    }
    if (strcmp(c, "poolracefree") == 0)
        return reply(pool_race_free(), NULL);
    if (strcmp(c, "pooltrim") == 0 && n >= 3) {
        struct obj *pool = find(tok[1]);
        if (pool == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        return reply(api.MemPoolTrimTo((CUmemoryPool)(uintptr_t)pool->v, num(tok[2])), NULL);
    }
    if (strcmp(c, "poolreserved") == 0 && n >= 2) {
        struct obj *pool = find(tok[1]);
        cuuint64_t v = 0;
        if (pool == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        r = api.MemPoolGetAttribute((CUmemoryPool)(uintptr_t)pool->v, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
        return reply(r, "reserved=%llu", (unsigned long long)v);
    }
    if ((strcmp(c, "vmm") == 0 && n >= 4) || (strcmp(c, "vmmhost") == 0 && n >= 3)) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        int host = c[3] == 'h';
        prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = host ? 0 : (int)num(tok[2]);
        CUmemGenericAllocationHandle h;
        if ((r = api.MemCreate(&h, num(tok[host ? 2 : 3]), &prop, 0)) == CUDA_SUCCESS)
            put(tok[1], K_VMM, h);
        return reply(r, NULL);
    }
    if ((strcmp(c, "array") == 0 && n >= 6) || (strcmp(c, "array3d") == 0 && n >= 7) ||
        (strcmp(c, "mipmap") == 0 && n >= 8)) {
        CUDA_ARRAY3D_DESCRIPTOR d = {.Width = num(tok[2]), .Height = num(tok[3])};
        int i = 4;
        if (c[0] == 'm' || c[5] == '3')
            d.Depth = num(tok[i++]);
        d.Format = (CUarray_format)num(tok[i++]);
        d.NumChannels = (unsigned)num(tok[i++]);
        if (c[0] == 'm') {
            CUmipmappedArray m;
            if ((r = api.MipmappedArrayCreate(&m, &d, (unsigned)num(tok[i]))) == CUDA_SUCCESS)
                put(tok[1], K_MIPMAP, (uintptr_t)m);
            return reply(r, NULL);
        }
        CUarray a;
        if (c[5] == '3') {
            r = api.Array3DCreate(&a, &d);
        } else {
            CUDA_ARRAY_DESCRIPTOR d2 = {.Width = d.Width, .Height = d.Height, .Format = d.Format,
                                        .NumChannels = d.NumChannels};
            r = api.ArrayCreate(&a, &d2);
        }
        if (r == CUDA_SUCCESS)
            put(tok[1], K_ARRAY, (uintptr_t)a);
        return reply(r, NULL);
    }
    if (strcmp(c, "free") == 0 && n >= 2) {
        struct obj *o = find(tok[1]);
        if (o == NULL)
            return reply(CUDA_ERROR_INVALID_VALUE, NULL);
        if ((r = free_obj(o)) == CUDA_SUCCESS)
            drop(o);
        return reply(r, NULL);
    }
    if (strcmp(c, "fill") == 0 && n >= 3) {
        /* Allocate chunks of the given size until refused; they get names prefix0.. */
        size_t b = num(tok[2]);
        int count = 0;
        CUdeviceptr p;
        while ((r = api.MemAlloc(&p, b)) == CUDA_SUCCESS) {
            char name[32];
            snprintf(name, sizeof name, "%s%d", tok[1], count++);
            put(name, K_PTR, p);
        }
        return reply(CUDA_SUCCESS, "n=%d last=%s", count, err_name(r));
    }
    if (strcmp(c, "freeall") == 0) {
        int count = 0;
        while (nobjs > 0) {
            free_obj(&objs[nobjs - 1]);
            nobjs--;
            count++;
        }
        return reply(CUDA_SUCCESS, "n=%d", count);
    }
    if (strcmp(c, "info") == 0) {
        size_t f = 0, t = 0;
        r = api.MemGetInfo(&f, &t);
        return reply(r, "free=%zu total=%zu", f, t);
    }
    if (strcmp(c, "total") == 0) {
        size_t t = 0;
        CUdevice dev;
        r = api.DeviceGet(&dev, (int)num(tok[1]));
        if (r == CUDA_SUCCESS)
            r = api.DeviceTotalMem(&t, dev);
        return reply(r, "total=%zu", t);
    }
    if (strcmp(c, "nvml") == 0) {
        nvmlDevice_t d;
        nvml_mem m = {0};
        nvml_mem2 m2 = {.version = (unsigned)(sizeof(nvml_mem2) | (2u << 24))};
        int e = api.NvmlInit();
        if (e == 0)
            e = api.NvmlHandle((unsigned)num(tok[1]), &d);
        if (e == 0)
            e = api.NvmlMem(d, &m);
        if (e == 0)
            e = api.NvmlMem2(d, &m2);
        if (e != 0) {
            printf("err %d NVML\n", e);
            fflush(stdout);
            return 0;
        }
        return reply(CUDA_SUCCESS, "total=%llu free=%llu used=%llu total2=%llu free2=%llu used2=%llu", m.total,
                     m.free, m.used, m2.total, m2.free, m2.used);
    }
    if (strcmp(c, "sync") == 0)
        return reply(api.CtxSynchronize(), NULL);
    if (strcmp(c, "streamsync") == 0)
        return reply(api.StreamSynchronize(NULL), NULL);
    if (strcmp(c, "launch") == 0 && n >= 2) {
        CUmodule mod;
        CUfunction f;
        unsigned long long ns = n >= 3 ? num(tok[2]) : 0;
        void *params[] = {&ns};
        r = api.ModuleLoadData(&mod, "fakegpu");
        if (r == CUDA_SUCCESS)
            r = api.ModuleGetFunction(&f, mod, ns ? "fakegpu_sleep" : "noop");
        for (unsigned long long i = 0; r == CUDA_SUCCESS && i < num(tok[1]); i++)
            r = api.LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
        return reply(r, NULL);
    }
    if (strcmp(c, "loop") == 0 && n >= 2) {
        /* Tight alloc/free until killed. */
        size_t b = num(tok[1]);
        printf("ok looping\n");
        fflush(stdout);
        for (;;) {
            CUdeviceptr p;
            if (api.MemAlloc(&p, b) == CUDA_SUCCESS)
                api.MemFree(p);
        }
    }
    if (strcmp(c, "exitrace") == 0 && n >= 4) {
        /* exitrace THREADS BYTES MICROSECONDS: exit while threads churn. */
        reply(CUDA_SUCCESS, NULL);
        exit_race((int)num(tok[1]), num(tok[2]), (unsigned)num(tok[3]));
    }
    if (strcmp(c, "threads") == 0 && n >= 4) {
        int failures = 0;
        r = run_threads((int)num(tok[1]), num(tok[2]), (int)num(tok[3]), &failures);
        return reply(r, "failures=%d", failures);
    }
    if (strcmp(c, "fork") == 0 && n >= 2) {
        r = do_fork(num(tok[1]), out, sizeof out);
        return reply(r, "%s", out);
    }
    if (strcmp(c, "cloneexit") == 0) {
        /* A child made by the raw clone system call (no pthread_atfork handlers, as
         * some runtimes spawn) that ends with exit(), running the destructors. */
        fflush(stdout);
        pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0)
            exit(0);
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid)
            return reply(CUDA_ERROR_UNKNOWN, NULL);
        return reply(CUDA_SUCCESS, "status=%d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    if (strcmp(c, "forkend") == 0) {
        int st = 0;
        if (child_pipe >= 0)
            close(child_pipe);
        child_pipe = -1;
        waitpid(child_pid, &st, 0);
        return reply(CUDA_SUCCESS, "status=%d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    if (strcmp(c, "uuid") == 0) {
        CUuuid u;
        CUdevice dev;
        r = api.DeviceGet(&dev, (int)num(tok[1]));
        if (r == CUDA_SUCCESS)
            r = api.DeviceGetUuid(&u, dev);
        const unsigned char *b = (const unsigned char *)u.bytes;
        return reply(r, "uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                     b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    if (strcmp(c, "exec") == 0) {
        /* Replace this image with a fresh cudash (same pid, same start time). */
        reply(CUDA_SUCCESS, NULL);
        execv("/proc/self/exe", g_argv);
        printf("fatal exec: %s\n", strerror(errno));
        fflush(stdout);
        return -1;
    }
    if (strcmp(c, "pid") == 0)
        return reply(CUDA_SUCCESS, "pid=%d", (int)getpid());
    if (strcmp(c, "exit") == 0) {
        fflush(stdout);
        exit(0);
    }
    printf("fatal unknown command %s\n", c);
    fflush(stdout);
    return -1;
}

/* Commands until end of input (NULL) or a fatal one (non-NULL); exits the process
 * when it ends on a thread other than main. */
static void *command_loop(void *arg)
{
    char line[1024];
    int main_thread = arg == NULL;
    while (fgets(line, sizeof line, stdin) != NULL) {
        char *tok[16] = {0}, *save = NULL;
        int n = 0;
        for (char *s = strtok_r(line, " \t\r\n", &save); s != NULL && n < 15; s = strtok_r(NULL, " \t\r\n", &save))
            tok[n++] = s;
        if (n == 0 || tok[0][0] == '#')
            continue;
        if (command(tok, n) != 0) {
            if (!main_thread)
                exit(1);
            return (void *)1;
        }
    }
    if (!main_thread)
        exit(0);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = "direct";
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "-mode") == 0)
            mode = argv[++i];
    }
    g_argv = argv;
    bind(mode);
    return command_loop(NULL) == NULL ? 0 : 1;
}
