/* fgtest_basic.c — init, errors, devices, contexts and entry-point lookup. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"

/* Expects a default-free environment with 2 devices: "Test GPU:1024:10;Other:2048:20". */
int scenario_errors(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    CUdeviceptr p;
    int n;
    size_t f, t;
    CUcontext c;
    CHECK(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(cuDriverGetVersion(&n), CUDA_SUCCESS);
    EXPECT_EQ(n, 12080);
    CHECK(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuInit(0), CUDA_SUCCESS);
    CHECK(cuInit(0), CUDA_SUCCESS);
    CHECK(cuDeviceGetCount(&n), CUDA_SUCCESS);
    EXPECT_EQ(n, 2);
    CHECK(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
    CUdevice d;
    CHECK(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGet(&d, 1), CUDA_SUCCESS);
    char name[64];
    CHECK(cuDeviceGetName(name, sizeof name, 1), CUDA_SUCCESS);
    EXPECT(strcmp(name, "Other") == 0);
    CHECK(cuDeviceGetName(name, 3, 0), CUDA_SUCCESS);
    EXPECT(strcmp(name, "Te") == 0);
    CHECK(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuDeviceGetName(name, sizeof name, 7), CUDA_ERROR_INVALID_DEVICE);
    size_t total;
    CHECK(cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
    EXPECT_EQ(total, 2048 * MiB);
    CHECK(cuDeviceTotalMem_v2(&total, 2), CUDA_ERROR_INVALID_DEVICE);
    int v;
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1), CUDA_SUCCESS);
    EXPECT_EQ(v, 20);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
    EXPECT_EQ(v, 9);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0), CUDA_SUCCESS);
    EXPECT_EQ(v, 0);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0), CUDA_SUCCESS);
    EXPECT_EQ(v, 1);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
    EXPECT_EQ(v, 1);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0), CUDA_SUCCESS);
    EXPECT_EQ(v, 1);
    CHECK(cuDeviceGetAttribute(&v, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
    /* Without a current context. */
    CHECK(cuMemAlloc_v2(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CUstream s;
    CHECK(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuMemAllocAsync(&p, 1, NULL), CUDA_ERROR_INVALID_CONTEXT);
    /* Argument checks with a context. */
    fgt_setup(0);
    CHECK(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAlloc_v2(NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree_v2(0), CUDA_SUCCESS); /* free(NULL) semantics, as the real driver */
    CHECK(cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemGetInfo_v2(NULL, &t), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);
    const char *str;
    CHECK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str), CUDA_SUCCESS);
    EXPECT(strcmp(str, "out of memory") == 0);
    CHECK(cuGetErrorName(CUDA_ERROR_INVALID_CONTEXT, &str), CUDA_SUCCESS);
    EXPECT(strcmp(str, "CUDA_ERROR_INVALID_CONTEXT") == 0);
    CHECK(cuGetErrorName((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);
    return 0;
}

static void *thread_has_no_context(void *arg)
{
    CUcontext c = (CUcontext)1;
    CUdeviceptr p;
    CHECK(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT(c == NULL);
    CHECK(cuMemAlloc_v2(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxSetCurrent((CUcontext)arg), CUDA_SUCCESS);
    CHECK(cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    return NULL;
}

int scenario_ctx(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    CUcontext a, b, cur, prim, prim2;
    CUdevice d;
    CUdeviceptr p;
    size_t f, t;
    CHECK(cuInit(0), CUDA_SUCCESS);
    CHECK(cuCtxPopCurrent_v2(&cur), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxCreate_v2(&a, 0, 0), CUDA_SUCCESS);
    CHECK(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    EXPECT(cur == a);
    CHECK(cuCtxCreate_v2(&b, 0, 1), CUDA_SUCCESS);
    CHECK(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT_EQ(d, 1);
    CHECK(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    EXPECT(cur == b);
    CHECK(cuCtxGetDevice(&d), CUDA_SUCCESS);
    EXPECT_EQ(d, 0);
    CHECK(cuCtxPushCurrent_v2(b), CUDA_SUCCESS);
    CHECK(cuCtxCreate_v2(&cur, 0, 9), CUDA_ERROR_INVALID_DEVICE);
    /* Destroying a context frees its memory. */
    unsigned long long base = fgt_used();
    CHECK(cuMemAlloc_v2(&p, 100 * MiB), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), base + 100 * MiB);
    CHECK(cuCtxDestroy_v2(b), CUDA_SUCCESS);
    CHECK(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    EXPECT(cur == a);
    CHECK(cuCtxDestroy_v2(b), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxSetCurrent(b), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPushCurrent_v2((CUcontext)&base), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxCreate_v2(&b, 0, 1), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 0);
    CHECK(cuCtxDestroy_v2(b), CUDA_SUCCESS);
    /* A destroyed context that is still on the stack (it was not current when destroyed)
     * gives CONTEXT_IS_DESTROYED once it is current again, not INVALID_CONTEXT. */
    CHECK(cuCtxCreate_v2(&b, 0, 1), CUDA_SUCCESS);
    CHECK(cuCtxPushCurrent_v2(a), CUDA_SUCCESS);
    CHECK(cuCtxDestroy_v2(b), CUDA_SUCCESS);
    CHECK(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    EXPECT(cur == a);
    CHECK(cuMemAlloc_v2(&p, 1), FGT_CONTEXT_IS_DESTROYED);
    CHECK(cuMemGetInfo_v2(&f, &t), FGT_CONTEXT_IS_DESTROYED);
    CHECK(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    EXPECT(cur == b);
    /* Stream-ordered and VMM memory belongs to no context: destroying one keeps it
     * (NVIDIA: cuCtxDestroy does not free cuMemCreate/cuMemAllocAsync memory). */
    base = fgt_used();
    CHECK(cuCtxCreate_v2(&b, 0, 0), CUDA_SUCCESS);
    CHECK(cuMemAllocAsync(&p, MiB, NULL), CUDA_SUCCESS);
    CUmemAllocationProp vp = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle vh;
    CHECK(cuMemCreate(&vh, 2 * MiB, &vp, 0), CUDA_SUCCESS);
    CHECK(cuCtxDestroy_v2(b), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), base + 34 * MiB);
    CHECK(cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    CHECK(cuMemRelease(vh), CUDA_SUCCESS);
    CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), base);
    /* Primary contexts: one handle, reference counted; release frees memory. */
    CHECK(cuDevicePrimaryCtxRetain(&prim, 0), CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRetain(&prim2, 0), CUDA_SUCCESS);
    EXPECT(prim == prim2 && prim != a);
    CHECK(cuCtxDestroy_v2(prim), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPushCurrent_v2(prim), CUDA_SUCCESS);
    base = fgt_used();
    CHECK(cuMemAlloc_v2(&p, 10 * MiB), CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), base + 10 * MiB);
    CHECK(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK(cuMemAlloc_v2(&p, 1), FGT_CONTEXT_IS_DESTROYED); /* inactive primary is current */
    CHECK(cuCtxGetDevice(&d), FGT_CONTEXT_IS_DESTROYED);
    CHECK(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), base);
    CHECK(cuDevicePrimaryCtxRetain(&prim, 0), CUDA_SUCCESS);
    CHECK(cuCtxPushCurrent_v2(prim), CUDA_SUCCESS);
    CHECK(cuMemAlloc_v2(&p, 10 * MiB), CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    CHECK(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), base);
    /* A reset does not release: the retain still needs its release. */
    CHECK(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuDevicePrimaryCtxRelease_v2(5), CUDA_ERROR_INVALID_DEVICE);
    /* The context stack is per thread. */
    pthread_t th;
    pthread_create(&th, NULL, thread_has_no_context, a);
    pthread_join(th, NULL);
    CHECK(cuCtxDestroy_v2(a), CUDA_SUCCESS);
    CHECK(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    EXPECT(cur == NULL);
    return 0;
}

/* Prints what the Go tests compare with NVML and their own derivation. */
int scenario_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    int n;
    if (cuInit(0) != CUDA_SUCCESS)
        return 1;
    CHECK(cuDeviceGetCount(&n), CUDA_SUCCESS);
    for (int ordinal = 0; ordinal < n; ordinal++) {
        CUuuid u, u2;
        int bus, sms;
        char name[96];
        CUdevice d;
        CHECK(cuDeviceGet(&d, ordinal), CUDA_SUCCESS);
        CHECK(cuDeviceGetUuid_v2(&u, d), CUDA_SUCCESS);
        CHECK(cuDeviceGetUuid(&u2, d), CUDA_SUCCESS);
        EXPECT(memcmp(u.bytes, u2.bytes, 16) == 0);
        CHECK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d), CUDA_SUCCESS);
        CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d), CUDA_SUCCESS);
        CHECK(cuDeviceGetName(name, sizeof name, d), CUDA_SUCCESS);
        printf("device %d uuid ", ordinal);
        for (int i = 0; i < 16; i++)
            printf("%02x", (unsigned char)u.bytes[i]);
        printf(" bus %d sms %d name %s\n", bus, sms, name);
    }
    return 0;
}

struct proc_case {
    const char *sym;
    int version;
    cuuint64_t flags;
    void *want;
    CUresult rc; /* of cuGetProcAddress (11.x); _v2 returns CUDA_SUCCESS and reports through status */
    CUdriverProcAddressQueryResult status;
};

int scenario_procaddr(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const int PTDS = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const struct proc_case cases[] = {
        {"cuInit", 12080, 0, (void *)cuInit, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc", 12080, 0, (void *)cuMemAlloc_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc", 3010, 0, NULL, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        {"cuMemFree", 12000, 0, (void *)cuMemFree_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemGetInfo", 11080, 0, (void *)cuMemGetInfo_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxCreate", 12080, 0, (void *)cuCtxCreate_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDeviceTotalMem", 12080, 0, (void *)cuDeviceTotalMem_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuGetProcAddress", 11080, 0, (void *)cuGetProcAddress, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDeviceGetUuid", 11040, 0, (void *)cuDeviceGetUuid_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDeviceGetUuid", 11030, 0, (void *)cuDeviceGetUuid, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDevicePrimaryCtxRelease", 11000, 0, (void *)cuDevicePrimaryCtxRelease_v2, CUDA_SUCCESS,
         CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDevicePrimaryCtxRelease", 10020, 0, NULL, CUDA_ERROR_NOT_FOUND,
         CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        {"cuStreamDestroy", 12080, 0, (void *)cuStreamDestroy_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuEventDestroy", 12080, 0, (void *)cuEventDestroy_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 12080, 0, (void *)cuLaunchKernel, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 12080, PTDS, (void *)cuLaunchKernel_ptsz, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 12080, CU_GET_PROC_ADDRESS_LEGACY_STREAM, (void *)cuLaunchKernel, CUDA_SUCCESS,
         CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocAsync", 11020, PTDS, (void *)cuMemAllocAsync_ptsz, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocAsync", 11010, 0, NULL, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        {"cuMemFreeAsync", 12000, PTDS, (void *)cuMemFreeAsync_ptsz, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocFromPoolAsync", 12000, 0, (void *)cuMemAllocFromPoolAsync, CUDA_SUCCESS,
         CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemCreate", 12000, 0, (void *)cuMemCreate, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuArray3DCreate", 12000, 0, (void *)cuArray3DCreate_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocPitch", 12000, PTDS, (void *)cuMemAllocPitch_v2, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuNoSuchFunction", 12080, 0, NULL, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
        {"cuMemAlloc_v2", 12080, 0, NULL, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
    };
    /* Works before cuInit: runtimes fetch cuInit itself this way. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        CUresult rc = cuGetProcAddress_v2(cases[i].sym, &fn, cases[i].version, cases[i].flags, &st);
        if (rc != CUDA_SUCCESS || fn != cases[i].want || st != cases[i].status) {
            printf("FAIL procaddr %s@%d flags %llu: rc %d fn %p status %d\n", cases[i].sym, cases[i].version,
                   (unsigned long long)cases[i].flags, rc, fn, st);
            fg_failures++;
        }
        fn = (void *)1;
        rc = cuGetProcAddress(cases[i].sym, &fn, cases[i].version, cases[i].flags);
        EXPECT(rc == cases[i].rc && fn == cases[i].want);
    }
    void *fn;
    CHECK(cuGetProcAddress_v2(NULL, &fn, 12080, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGetProcAddress_v2("cuInit", NULL, 12080, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGetProcAddress_v2("cuInit", &fn, 12080, 4, NULL), CUDA_ERROR_INVALID_VALUE);
    /* A version newer than the driver's (12.8) is refused, by both entry points. */
    CHECK(cuGetProcAddress_v2("cuInit", &fn, 12090, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGetProcAddress("cuInit", &fn, 13000, 0), CUDA_ERROR_INVALID_VALUE);
    return 0;
}

/* The dlopen + dlsym path PyTorch and cudart take, then cuGetProcAddress from it. */
int scenario_dlopen(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    EXPECT(h != NULL);
    if (!h)
        return 1;
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(
            h, "cuGetProcAddress_v2");
    void *alloc_sym = dlsym(h, "cuMemAlloc_v2");
    EXPECT(init && gpa && alloc_sym);
    EXPECT(dlsym(h, "fg_state_charge") == NULL); /* internals stay hidden */
    if (!init || !gpa)
        return 1;
    CHECK(init(0), CUDA_SUCCESS);
    void *alloc_pa = NULL;
    CHECK(gpa("cuMemAlloc", &alloc_pa, 12080, 0, NULL), CUDA_SUCCESS);
    EXPECT(alloc_pa == alloc_sym);
    CUcontext c;
    CHECK(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(c), CUDA_SUCCESS);
    CUdeviceptr p;
    CHECK(((CUresult(*)(CUdeviceptr *, size_t))alloc_pa)(&p, MiB), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), MiB);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    return 0;
}

/* resolve <base> <symbol> <ptds 0|1> ...: cuGetProcAddress_v2(base, 12080) must
 * return the exported <symbol>. */
int scenario_resolve(int argc, char **argv)
{
    for (int i = 0; i + 2 < argc; i += 3) {
        void *want = dlsym(RTLD_DEFAULT, argv[i + 1]), *got = NULL;
        cuuint64_t flags = atoi(argv[i + 2]) ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
        CUresult rc = cuGetProcAddress_v2(argv[i], &got, 12080, flags, NULL);
        if (!want || rc != CUDA_SUCCESS || got != want) {
            printf("FAIL resolve %s (flags %llu): rc %d, got %p, want %s = %p\n", argv[i], (unsigned long long)flags,
                   rc, got, argv[i + 1], want);
            fg_failures++;
        }
    }
    return 0;
}
