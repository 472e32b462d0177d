/* bench_hook — what the hook adds, measured in one process against the same
 * simulated driver: the hook's entry points (dlopen'd privately, so this process's
 * own calls stay direct) versus the driver's, interleaved in rounds, medians
 * compared. Also the start-up cost LD_PRELOAD adds to a program that never uses
 * CUDA. Prints BENCH lines only.
 *
 * usage: bench_hook libtessera-hook.so libempty.so [shared]   (LD_LIBRARY_PATH finds libcuda.so.1)
 * shared: only the launch overhead, with a 30 % compute share in force (core
 * limits and core region, the arbiter's grant "run" with a turn deadline far
 * ahead, its heartbeat refreshed every 10 ms as the arbiter does): every launch
 * goes through the burst bookkeeping, its events and the deadline check.
 * libempty.so is an empty shared object: preloading it is the dynamic loader's
 * share of the start-up cost, which any preloaded library pays. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "abi_files.h"
#include "cuda_driver.h"

extern char **environ;

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

#define ROUNDS 21
#define LAUNCHES 200000
#define PAIRS 100000
#define SPAWNS 400

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void *must(void *p, const char *what)
{
    if (p == NULL) {
        fprintf(stderr, "bench_hook: %s: %s\n", what, dlerror());
        exit(1);
    }
    return p;
}

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "bench_hook: %s failed: %d\n", what, (int)r);
        exit(1);
    }
}

/* A container with a 100 GiB cap on device 0, as the device plugin would set it up. */
static void make_container(const char *dir, const char *uuid)
{
    char path[256];
    const char *uuids[] = {uuid};
    const uint64_t caps[] = {100ull << 30};
    const uint32_t cores[] = {0};
    snprintf(path, sizeof path, "%s/limits", dir);
    abi_write_limits(path, 1, uuids, caps, cores);
    setenv("TESSERA_LIMITS", path, 1);
    snprintf(path, sizeof path, "%s/region", dir);
    abi_write_region(path);
    setenv("TESSERA_REGION", path, 1);
}

/* A 30 % compute share on device 0, granted (unpaced, not solo) by an arbiter
 * whose heartbeat stays fresh for the run. */
/* The arbiter's part: a fresh heartbeat (past, so the deadline is judged). */
static void *heartbeat(void *limits)
{
    tessera_limits *l = limits;
    for (;;) {
        atomic_store(&l->devices[0].compute_heartbeat_ns, (uint64_t)now_ns());
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return NULL;
}

static void make_core_share(const char *dir, const char *uuid)
{
    char path[256];
    const char *uuids[] = {uuid};
    const uint64_t caps[] = {0};
    const uint32_t cores[] = {30};
    snprintf(path, sizeof path, "%s/core-limits", dir);
    abi_write_limits(path, 1, uuids, caps, cores);
    setenv("TESSERA_CORE_LIMITS", path, 1);
    int fd = open(path, O_RDWR);
    tessera_limits *l = fd < 0 ? MAP_FAILED : mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (l == MAP_FAILED) {
        fprintf(stderr, "bench_hook: cannot map %s\n", path);
        exit(1);
    }
    l->devices[0].compute_grant =
        TESSERA_GRANT_ARBITRATED | TESSERA_GRANT_UNPACED | (TESSERA_GRANT_UNTIL_US_MAX << TESSERA_GRANT_UNTIL_SHIFT);
    l->devices[0].compute_heartbeat_ns = (uint64_t)now_ns();
    close(fd);
    pthread_t beat;
    if (pthread_create(&beat, NULL, heartbeat, l) != 0) {
        fprintf(stderr, "bench_hook: cannot start the heartbeat thread\n");
        exit(1);
    }
    snprintf(path, sizeof path, "%s/core-region", dir);
    abi_write_region(path);
    setenv("TESSERA_CORE_REGION", path, 1);
}

/* Make 63 more slots of the region look owned by live processes (pid 1 with its real
 * start time), so that every charge sums 64 slots: a container with many processes. */
static void crowd_region(const char *dir)
{
    char path[256], buf[1024];
    snprintf(path, sizeof path, "%s/region", dir);
    int fd = open(path, O_RDWR);
    tessera_region *r = fd < 0 ? MAP_FAILED : mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int sfd = open("/proc/1/stat", O_RDONLY);
    ssize_t n = sfd < 0 ? -1 : read(sfd, buf, sizeof buf - 1);
    if (r == MAP_FAILED || n <= 0) {
        fprintf(stderr, "bench_hook: cannot crowd the region\n");
        exit(1);
    }
    buf[n] = '\0';
    const char *p = strrchr(buf, ')') + 2;
    for (int field = 3; field < 22; field++)
        p = strchr(p, ' ') + 1;
    uint64_t start = strtoull(p, NULL, 10);
    for (int i = 1; i < 64; i++) {
        r->slots[i].start_time = start;
        r->slots[i].pid = 1;
    }
    r->slot_hwm = 64;
    munmap(r, sizeof *r);
    close(fd);
    close(sfd);
}

static double time_launches(launch_fn f, CUfunction fn)
{
    double t0 = now_ns();
    for (int i = 0; i < LAUNCHES; i++)
        f(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    return (now_ns() - t0) / LAUNCHES;
}

static double time_pairs(alloc_fn a, free_fn f)
{
    double t0 = now_ns();
    for (int i = 0; i < PAIRS; i++) {
        CUdeviceptr p;
        if (a(&p, 1 << 20) == CUDA_SUCCESS)
            f(p);
    }
    return (now_ns() - t0) / PAIRS;
}

static double spawn_once(char *const envp[])
{
    char *const argv[] = {"/bin/true", NULL};
    pid_t pid;
    double t0 = now_ns();
    if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, envp) != 0)
        exit(1);
    waitpid(pid, NULL, 0);
    return now_ns() - t0;
}

/* Start-up of /bin/true with lib preloaded minus with base preloaded (NULL: nothing),
 * spawned alternately; the median of the per-pair differences, so that one slow
 * spawn does not skew it. */
static double spawn_overhead(const char *lib, const char *base, double *base_ns)
{
    char pre[512], pre_base[512];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", lib);
    snprintf(pre_base, sizeof pre_base, "LD_PRELOAD=%s", base ? base : "");
    char *with[] = {pre, NULL}, *without[] = {pre_base, NULL};
    double diff[SPAWNS], b[SPAWNS];
    for (int i = 0; i < SPAWNS; i++) {
        b[i] = spawn_once(base ? without : without + 1);
        diff[i] = spawn_once(with) - b[i];
    }
    *base_ns = median(b, SPAWNS);
    return median(diff, SPAWNS);
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "shared") == 0)) {
        fprintf(stderr, "usage: bench_hook libtessera-hook.so libempty.so [shared]\n");
        return 2;
    }
    int shared = argc == 4;
    char dir[] = "/tmp/bench-hook-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    char state[300];
    snprintf(state, sizeof state, "%s/fakegpu.state", dir);
    setenv("FAKEGPU_STATE", state, 1);

    void *cu = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), "dlopen libcuda.so.1");
    CUresult (*init)(unsigned) = must(dlsym(cu, "cuInit"), "cuInit");
    CUresult (*dget)(CUdevice *, int) = must(dlsym(cu, "cuDeviceGet"), "cuDeviceGet");
    CUresult (*uuid)(CUuuid *, CUdevice) = must(dlsym(cu, "cuDeviceGetUuid"), "cuDeviceGetUuid");
    CUresult (*retain)(CUcontext *, CUdevice) = must(dlsym(cu, "cuDevicePrimaryCtxRetain"), "retain");
    CUresult (*setcur)(CUcontext) = must(dlsym(cu, "cuCtxSetCurrent"), "cuCtxSetCurrent");
    CUresult (*modload)(CUmodule *, const void *) = must(dlsym(cu, "cuModuleLoadData"), "cuModuleLoadData");
    CUresult (*getfn)(CUfunction *, CUmodule, const char *) = must(dlsym(cu, "cuModuleGetFunction"), "getfn");
    launch_fn launch_direct = must(dlsym(cu, "cuLaunchKernel"), "cuLaunchKernel");
    alloc_fn alloc_direct = must(dlsym(cu, "cuMemAlloc_v2"), "cuMemAlloc_v2");
    free_fn free_direct = must(dlsym(cu, "cuMemFree_v2"), "cuMemFree_v2");

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUuuid u;
    check(init(0), "cuInit");
    check(dget(&dev, 0), "cuDeviceGet");
    check(uuid(&u, dev), "cuDeviceGetUuid");
    check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(setcur(ctx), "cuCtxSetCurrent");
    check(modload(&mod, "bench"), "cuModuleLoadData");
    check(getfn(&fn, mod, "noop"), "cuModuleGetFunction");

    char uuid_s[48];
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(uuid_s, sizeof uuid_s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    make_container(dir, uuid_s);
    if (shared)
        make_core_share(dir, uuid_s);

    void *hook = must(dlopen(argv[1], RTLD_NOW | RTLD_LOCAL), "dlopen hook");
    launch_fn launch_hook = must(dlsym(hook, "cuLaunchKernel"), "hook cuLaunchKernel");
    alloc_fn alloc_hook = must(dlsym(hook, "cuMemAlloc_v2"), "hook cuMemAlloc_v2");
    free_fn free_hook = must(dlsym(hook, "cuMemFree_v2"), "hook cuMemFree_v2");
    CUdeviceptr probe;
    check(alloc_hook(&probe, 1), "hooked cuMemAlloc_v2"); /* initialises the hook outside the timing */
    check(free_hook(probe), "hooked cuMemFree_v2");

    if (shared) {
        double d[ROUNDS], o[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            d[r] = time_launches(launch_direct, fn);
            o[r] = time_launches(launch_hook, fn) - d[r];
        }
        printf("BENCH hook.launch_overhead_shared_ns %.1f ns\n", median(o, ROUNDS));
        printf("BENCH hook.launch_direct_shared_run_ns %.1f ns\n", median(d, ROUNDS));
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        return system(cmd) == 0 ? 0 : 1;
    }
    /* Each round times both sides back to back; the overhead is the median of the
     * per-round differences, so drift in machine load cancels out. */
    double ld[ROUNDS], dl[ROUNDS], ad[ROUNDS], da[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        ld[r] = time_launches(launch_direct, fn);
        dl[r] = time_launches(launch_hook, fn) - ld[r];
        ad[r] = time_pairs(alloc_direct, free_direct);
        da[r] = time_pairs(alloc_hook, free_hook) - ad[r];
    }
    double mld = median(ld, ROUNDS), mlo = median(dl, ROUNDS);
    double mad = median(ad, ROUNDS), mao = median(da, ROUNDS);
    crowd_region(dir);
    for (int r = 0; r < ROUNDS; r++)
        da[r] = time_pairs(alloc_hook, free_hook) - time_pairs(alloc_direct, free_direct);
    double mao64 = median(da, ROUNDS);
    double msd, mse, spawn = spawn_overhead(argv[1], NULL, &msd);
    double spawn_vs_empty = spawn_overhead(argv[1], argv[2], &mse);
    printf("BENCH hook.launch_overhead_ns %.1f ns\n", mlo);
    printf("BENCH hook.allocfree_overhead_ns %.1f ns\n", mao);
    printf("BENCH hook.allocfree_overhead_64procs_ns %.1f ns\n", mao64);
    printf("BENCH hook.launch_direct_ns %.1f ns\n", mld);
    printf("BENCH hook.allocfree_direct_ns %.1f ns\n", mad);
    printf("BENCH hook.nocuda_startup_overhead_us %.1f us\n", spawn / 1e3);
    printf("BENCH hook.nocuda_startup_direct_us %.1f us\n", msd / 1e3);
    printf("BENCH hook.nocuda_startup_vs_empty_preload_us %.1f us\n", spawn_vs_empty / 1e3);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
