/* gpuprobe — the user workload of the real-node scenario (test/e2e/gpunode):
 * a CUDA driver API client that loads libcuda.so.1 the way CUDA programs do
 * (dlopen from the default library path, where CDI put the driver) and
 * reports, one line each, what its container sees:
 *
 *   devices N
 *   device I uuid GPU-… total_mib M
 *   meminfo free_mib F total_mib T
 *   alloc MIB ok|refused NAME used_mib U      (steps of -step MiB, then the rest)
 *   fill MIB ok|refused NAME used_mib U       (exactly what cuMemGetInfo calls free)
 *   over 1 ok|refused NAME used_mib U         (one MiB past the cap)
 *   holding_mib H
 *
 * then keeps H MiB allocated until SIGTERM, so the node monitor sees it.
 * Usage: gpuprobe [-step MiB] [-hold MiB]. Built statically against no CUDA
 * headers: the few driver API types are declared here. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGetCount)(int *);
static CUresult (*cuDeviceGet)(CUdevice *, int);
static CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
static CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemGetInfo)(size_t *, size_t *);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuGetErrorName)(CUresult, const char **);

#define MIB (1024ULL * 1024ULL)
#define MAX_BLOCKS 4096

static CUdeviceptr blocks[MAX_BLOCKS];
static size_t sizes[MAX_BLOCKS];
static int nblocks;
static size_t used;

static void die(const char *what, CUresult r) {
    const char *name = "?";
    if (cuGetErrorName) cuGetErrorName(r, &name);
    printf("error %s %d %s\n", what, r, name);
    fflush(stdout);
    exit(1);
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        printf("error dlsym %s: %s\n", name, dlerror());
        fflush(stdout);
        exit(1);
    }
    return p;
}

/* try allocates size bytes and prints the outcome; 1 when it succeeded. */
static int try(const char *label, size_t size) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, size);
    if (r == 0 && nblocks < MAX_BLOCKS) {
        blocks[nblocks] = p;
        sizes[nblocks++] = size;
        used += size;
        printf("%s %llu ok - used_mib %llu\n", label, (unsigned long long)(size / MIB), (unsigned long long)(used / MIB));
        return 1;
    }
    const char *name = "?";
    cuGetErrorName(r, &name);
    printf("%s %llu refused %s used_mib %llu\n", label, (unsigned long long)(size / MIB), name, (unsigned long long)(used / MIB));
    return 0;
}

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv) {
    unsigned long long step = 512, hold = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-step")) step = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "-hold")) hold = strtoull(argv[i + 1], NULL, 10);
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    setvbuf(stdout, NULL, _IOLBF, 0);

    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("error dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    cuInit = sym(lib, "cuInit");
    cuDeviceGetCount = sym(lib, "cuDeviceGetCount");
    cuDeviceGet = sym(lib, "cuDeviceGet");
    cuDeviceGetUuid = sym(lib, "cuDeviceGetUuid");
    cuDeviceTotalMem = sym(lib, "cuDeviceTotalMem_v2");
    cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    cuMemGetInfo = sym(lib, "cuMemGetInfo_v2");
    cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    cuMemFree = sym(lib, "cuMemFree_v2");
    cuGetErrorName = sym(lib, "cuGetErrorName");

    CUresult r;
    if ((r = cuInit(0))) die("cuInit", r);
    int count = 0;
    if ((r = cuDeviceGetCount(&count))) die("cuDeviceGetCount", r);
    printf("devices %d\n", count);
    for (int i = 0; i < count; i++) {
        CUdevice d;
        CUuuid u;
        size_t total = 0;
        if ((r = cuDeviceGet(&d, i))) die("cuDeviceGet", r);
        if ((r = cuDeviceGetUuid(&u, d))) die("cuDeviceGetUuid", r);
        if ((r = cuDeviceTotalMem(&total, d))) die("cuDeviceTotalMem", r);
        const unsigned char *b = (const unsigned char *)u.bytes;
        printf("device %d uuid GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x total_mib %llu\n", i,
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
               (unsigned long long)(total / MIB));
    }
    if (count == 0) return 1;
    CUdevice d0;
    CUcontext ctx;
    if ((r = cuDeviceGet(&d0, 0))) die("cuDeviceGet", r);
    if ((r = cuDevicePrimaryCtxRetain(&ctx, d0))) die("cuDevicePrimaryCtxRetain", r);
    if ((r = cuCtxSetCurrent(ctx))) die("cuCtxSetCurrent", r);
    size_t free_b = 0, total_b = 0;
    if ((r = cuMemGetInfo(&free_b, &total_b))) die("cuMemGetInfo", r);
    printf("meminfo free_mib %llu total_mib %llu\n", (unsigned long long)(free_b / MIB), (unsigned long long)(total_b / MIB));

    while (step > 0 && try("alloc", step * MIB)) {
    }
    if ((r = cuMemGetInfo(&free_b, &total_b))) die("cuMemGetInfo", r);
    if (free_b > 0) try("fill", free_b);
    try("over", MIB);

    /* Keep hold MiB: free the newest blocks until at most that is left. */
    while (nblocks > 0 && used > hold * MIB) {
        nblocks--;
        if ((r = cuMemFree(blocks[nblocks]))) die("cuMemFree", r);
        used -= sizes[nblocks];
    }
    printf("holding_mib %llu\n", (unsigned long long)(used / MIB));
    for (;;) pause();
}
