/* fgtest_mem.c — every allocation API within and beyond physical capacity.
 * Device 0 has 1024 MiB and this process is its only user. */
#include <stdlib.h>

#include "fgtest.h"

int scenario_alloc(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    size_t f, cap;
    CHECK(cuMemGetInfo_v2(&f, &cap), CUDA_SUCCESS);
    EXPECT_EQ(cap, 1024 * MiB);
    EXPECT_EQ(f, cap);
    CUdeviceptr p, q;
    /* Exactly at capacity, then one byte over. */
    CHECK(cuMemAlloc_v2(&p, cap), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), cap);
    CHECK(cuMemAlloc_v2(&q, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(fgt_used(), 0);
    CHECK(cuMemAlloc_v2(&p, cap + 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAlloc_v2(&p, (size_t)-1), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(fgt_used(), 0);
    /* Free then re-allocate; addresses of live allocations never collide. */
    enum { N = 200 };
    CUdeviceptr ptrs[N];
    for (int i = 0; i < N; i++)
        CHECK(cuMemAlloc_v2(&ptrs[i], (size_t)(i + 1) * 1000), CUDA_SUCCESS);
    for (int i = 1; i < N; i++)
        EXPECT(ptrs[i] >= ptrs[i - 1] + (size_t)i * 1000);
    EXPECT_EQ(fgt_used(), 1000ull * N * (N + 1) / 2);
    for (int i = 0; i < N; i += 2)
        CHECK(cuMemFree_v2(ptrs[i]), CUDA_SUCCESS);
    CHECK(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
    for (int i = 1; i < N; i += 2)
        EXPECT(p != ptrs[i]);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    for (int i = 1; i < N; i += 2)
        CHECK(cuMemFree_v2(ptrs[i]), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 0);
    /* Pitch: rows padded to 512 bytes. */
    size_t pitch = 0;
    CHECK(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 4), CUDA_SUCCESS);
    EXPECT_EQ(pitch, 1024);
    EXPECT_EQ(fgt_used(), 10240);
    CHECK(cuMemAllocPitch_v2(&q, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocPitch_v2(&q, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocPitch_v2(&q, &pitch, MiB, 1024, 16), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK(cuMemAllocPitch_v2(&q, &pitch, MiB, 1024, 16), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), cap);
    CHECK(cuMemFree_v2(q), CUDA_SUCCESS);
    /* Managed memory is charged to the device in full. */
    CHECK(cuMemAllocManaged(&p, cap, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), cap);
    CHECK(cuMemAllocManaged(&q, 1, CU_MEM_ATTACH_HOST), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK(cuMemAllocManaged(&q, 1, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocManaged(&q, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(fgt_used(), 0);
    return 0;
}

static unsigned long long array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, int mip_levels)
{
    CUarray a;
    CUmipmappedArray m;
    unsigned long long before = fgt_used(), delta;
    if (mip_levels) {
        CHECK(cuMipmappedArrayCreate(&m, d, (unsigned)mip_levels), CUDA_SUCCESS);
        delta = fgt_used() - before;
        CHECK(cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
        CHECK(cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_HANDLE);
    } else {
        CHECK(cuArray3DCreate_v2(&a, d), CUDA_SUCCESS);
        delta = fgt_used() - before;
        CHECK(cuArrayDestroy(a), CUDA_SUCCESS);
        CHECK(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
    }
    EXPECT_EQ(fgt_used(), before);
    return delta;
}

int scenario_arrays(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUarray a;
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 100, .Height = 10, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CHECK(cuArrayCreate_v2(&a, &d2), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 16384); /* 100*10*16 = 16000 -> 16384 */
    CHECK(cuMemFree_v2((CUdeviceptr)(uintptr_t)a), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuArrayDestroy(a), CUDA_SUCCESS);
    CUDA_ARRAY_DESCRIPTOR d1 = {.Width = 10, .Height = 0, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CHECK(cuArrayCreate_v2(&a, &d1), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 512);
    CHECK(cuArrayDestroy(a), CUDA_SUCCESS);
    d1.NumChannels = 3;
    CHECK(cuArrayCreate_v2(&a, &d1), CUDA_ERROR_INVALID_VALUE);
    d1.NumChannels = 1;
    d1.Format = (CUarray_format)0x77;
    CHECK(cuArrayCreate_v2(&a, &d1), CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 64, .Depth = 64, .Format = CU_AD_FORMAT_HALF, .NumChannels = 2};
    EXPECT_EQ(array_bytes(&d3, 0), 64ull * 64 * 64 * 4);
    CUDA_ARRAY3D_DESCRIPTOR m2 = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    EXPECT_EQ(array_bytes(&m2, 3), 5632); /* 4096 + 1024 + 256 = 5376 -> 5632 */
    CUDA_ARRAY3D_DESCRIPTOR m1 = {.Width = 1000, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    EXPECT_EQ(array_bytes(&m1, 10), 8192); /* 4*(1000+500+250+125+62+31+15+7+3+1) = 7976 -> 8192 */
    CUmipmappedArray m;
    CHECK(cuMipmappedArrayCreate(&m, &m2, 8), CUDA_ERROR_INVALID_VALUE); /* 64 has 7 levels */
    CHECK(cuMipmappedArrayCreate(&m, &m2, 0), CUDA_ERROR_INVALID_VALUE);
    /* Beyond capacity. */
    CUDA_ARRAY3D_DESCRIPTOR big = {.Width = 1024, .Height = 1024, .Depth = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CHECK(cuArray3DCreate_v2(&a, &big), CUDA_ERROR_OUT_OF_MEMORY);
    CUDA_ARRAY3D_DESCRIPTOR exact = {.Width = 256 * 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CHECK(cuArray3DCreate_v2(&a, &exact), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 1024 * MiB);
    CHECK(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMipmappedArrayCreate(&m, &m2, 1), CUDA_ERROR_OUT_OF_MEMORY);
    return 0;
}

int scenario_vmm(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    EXPECT_EQ(gran, 2 * MiB);
    CUmemGenericAllocationHandle h, hh, big;
    CHECK(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 4 * MiB);
    CHECK(cuMemCreate(&big, 1020 * MiB, &prop, 0), CUDA_SUCCESS);
    CHECK(cuMemCreate(&hh, 2 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemRelease(big), CUDA_SUCCESS);
    CHECK(cuMemRelease(big), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemCreate(&hh, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp host = prop;
    host.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CHECK(cuMemCreate(&hh, 2048 * MiB, &host, 0), CUDA_SUCCESS); /* host memory: no device charge */
    EXPECT_EQ(fgt_used(), 4 * MiB);
    CHECK(cuMemRelease(hh), CUDA_SUCCESS);
    prop.location.id = 1; /* charged to device 1, not the current device */
    CHECK(cuMemCreate(&hh, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 4 * MiB);
    CHECK(cuMemRelease(hh), CUDA_SUCCESS);
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(va % (2 * MiB), 0);
    CHECK(cuMemMap(va + 2 * MiB, 4 * MiB, 0, h, 0), CUDA_SUCCESS);
    CHECK(cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlaps */
    CHECK(cuMemMap(va + 64 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* not reserved */
    /* offset, like ptr and size, must be a multiple of the minimum granularity. */
    CHECK(cuMemMap(va, 2 * MiB, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemMap(va, 2 * MiB, 2 * MiB, h, 0), CUDA_SUCCESS); /* an aligned offset is fine */
    CHECK(cuMemUnmap(va, 2 * MiB), CUDA_SUCCESS);
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va + 2 * MiB, 4 * MiB, &acc, 1), CUDA_SUCCESS);
    CHECK(cuMemSetAccess(va, 8 * MiB, &acc, 1), CUDA_ERROR_INVALID_VALUE);
    /* Released while mapped: the memory stays until unmapped. */
    CHECK(cuMemRelease(h), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 4 * MiB);
    CHECK(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CHECK(cuMemUnmap(va + 2 * MiB, 4 * MiB), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 0);
    CHECK(cuMemUnmap(va + 2 * MiB, 4 * MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
    return 0;
}

static unsigned long long pool_attr(CUmemoryPool p, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    CHECK(cuMemPoolGetAttribute(p, a, &v), CUDA_SUCCESS);
    return v;
}

static void pool_defaults(CUmemoryPool dp)
{
    CUdeviceptr a, b;
    CHECK(cuMemAllocAsync(&a, MiB, NULL), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 32 * MiB);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), MiB);
    EXPECT_EQ(fgt_used(), 32 * MiB);
    CHECK(cuMemAllocAsync(&b, 39 * MiB + 1, NULL), CUDA_SUCCESS); /* own chunk: 40 MiB */
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 72 * MiB);
    EXPECT_EQ(fgt_used(), 72 * MiB);
    CHECK(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    CHECK(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 40 * MiB + 1);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 72 * MiB); /* kept until sync */
    CHECK(cuStreamSynchronize(NULL), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 72 * MiB);
    EXPECT_EQ(fgt_used(), 0);
    cuuint64_t zero = 0;
    CHECK(cuMemPoolSetAttribute(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0);
    cuuint64_t one = 1;
    CHECK(cuMemPoolSetAttribute(dp, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemPoolSetAttribute(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
}

static void pool_threshold_and_trim(CUmemoryPool dp)
{
    CUdeviceptr a, b;
    cuuint64_t keep = 64 * MiB;
    CHECK(cuMemPoolSetAttribute(dp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 64 * MiB);
    CHECK(cuMemAllocAsync(&a, MiB, NULL), CUDA_SUCCESS);
    CHECK(cuMemAllocAsync(&b, 40 * MiB, NULL), CUDA_SUCCESS);
    CHECK(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    CHECK(cuMemFree_v2(b), CUDA_SUCCESS); /* cuMemFree accepts pool memory too */
    CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
    /* Unused chunks go until at most 64 MiB stay reserved: 72 -> 32. */
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 32 * MiB);
    EXPECT_EQ(fgt_used(), 32 * MiB);
    CHECK(cuMemAllocAsync(&a, 16 * MiB, NULL), CUDA_SUCCESS); /* reuses the kept chunk */
    EXPECT_EQ(fgt_used(), 32 * MiB);
    CHECK(cuMemPoolTrimTo(dp, 0), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 32 * MiB); /* in use: cannot be released */
    CHECK(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    CHECK(cuMemPoolTrimTo(dp, 0), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
    EXPECT_EQ(fgt_used(), 0);
    keep = 0;
    CHECK(cuMemPoolSetAttribute(dp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), CUDA_SUCCESS);
}

static void pool_created(CUmemoryPool dp)
{
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool p, cur;
    CUdeviceptr a, b;
    CHECK(cuMemPoolCreate(&p, &props), CUDA_SUCCESS);
    CHECK(cuMemAllocFromPoolAsync(&a, 100 * MiB, p, NULL), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 100 * MiB);
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0);
    CHECK(cuDeviceSetMemPool(0, p), CUDA_SUCCESS);
    CHECK(cuDeviceGetMemPool(&cur, 0), CUDA_SUCCESS);
    EXPECT(cur == p);
    CHECK(cuDeviceSetMemPool(1, p), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocAsync(&b, MiB, NULL), CUDA_SUCCESS);
    EXPECT_EQ(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 132 * MiB);
    /* Destroyed with allocations outstanding: their chunks go when they are freed. */
    CHECK(cuMemPoolDestroy(p), CUDA_SUCCESS);
    CHECK(cuDeviceGetMemPool(&cur, 0), CUDA_SUCCESS);
    EXPECT(cur == dp);
    EXPECT_EQ(fgt_used(), 132 * MiB);
    CHECK(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 32 * MiB);
    CHECK(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 0);
    CHECK(cuMemPoolDestroy(dp), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocFromPoolAsync(&a, MiB, p, NULL), CUDA_ERROR_INVALID_VALUE);
    props.location.id = 5;
    CHECK(cuMemPoolCreate(&p, &props), CUDA_ERROR_INVALID_DEVICE);
}

/* maxSize caps what a created pool may reserve: past it the pool is out of memory
 * even though the device has room. */
static void pool_max_size(void)
{
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                            .maxSize = 64 * MiB};
    CUmemoryPool p;
    CUdeviceptr a, b, c;
    CHECK(cuMemPoolCreate(&p, &props), CUDA_SUCCESS);
    CHECK(cuMemAllocFromPoolAsync(&a, 40 * MiB, p, NULL), CUDA_SUCCESS);
    CHECK(cuMemAllocFromPoolAsync(&b, 100 * MiB, p, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocFromPoolAsync(&b, 30 * MiB, p, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocFromPoolAsync(&b, 20 * MiB, p, NULL), CUDA_SUCCESS);
    EXPECT(pool_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) <= 64 * MiB);
    EXPECT(fgt_used() <= 64 * MiB);
    CHECK(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    CHECK(cuMemAllocFromPoolAsync(&c, 30 * MiB, p, NULL), CUDA_SUCCESS); /* reuses the freed chunk */
    CHECK(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
    CHECK(cuMemFreeAsync(c, NULL), CUDA_SUCCESS);
    CHECK(cuMemPoolDestroy(p), CUDA_SUCCESS);
    EXPECT_EQ(fgt_used(), 0);
}

static void pool_capacity(CUmemoryPool dp)
{
    CUdeviceptr a, b;
    CHECK(cuMemAllocAsync(&a, 1024 * MiB, NULL), CUDA_SUCCESS);
    CHECK(cuMemAllocAsync(&b, 1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocAsync(&b, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
    CHECK(cuMemAllocAsync(&b, 1, NULL), CUDA_SUCCESS); /* fits the freed chunk */
    EXPECT_EQ(pool_attr(dp, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1024 * MiB);
    CHECK(cuMemFreeAsync(b, (CUstream)0x2), CUDA_SUCCESS);
    CUevent ev;
    CHECK(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    CHECK(cuEventRecord(ev, NULL), CUDA_SUCCESS);
    CHECK(cuEventSynchronize(ev), CUDA_SUCCESS); /* event sync releases too */
    EXPECT_EQ(fgt_used(), 0);
    CHECK(cuEventDestroy_v2(ev), CUDA_SUCCESS);
}

int scenario_pool(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fgt_setup(0);
    CUmemoryPool dp, cur;
    CHECK(cuDeviceGetDefaultMemPool(&dp, 0), CUDA_SUCCESS);
    CHECK(cuDeviceGetMemPool(&cur, 0), CUDA_SUCCESS);
    EXPECT(dp == cur);
    CHECK(cuDeviceGetDefaultMemPool(&dp, 3), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGetDefaultMemPool(&dp, 0), CUDA_SUCCESS);
    pool_defaults(dp);
    pool_threshold_and_trim(dp);
    pool_created(dp);
    pool_max_size();
    pool_capacity(dp);
    return 0;
}
