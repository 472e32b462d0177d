/* cu_pool.c — the stream-ordered allocator: memory pools and cuMemAllocAsync.
 *
 * A pool reserves physical memory from its device in chunks of
 * max(32 MiB, request rounded up to 2 MiB) and serves allocations from a chunk's
 * free bytes (placement within a chunk is not modelled: a chunk fits a request
 * when size - used >= request). Freed memory stays reserved; at every
 * synchronisation (stream, context, event) a pool releases wholly unused chunks
 * while it reserves more than CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (default 0), and
 * cuMemPoolTrimTo releases them down to its argument. The RESERVED/USED
 * attributes report these numbers exactly: the hook charges what is reserved. */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

#define FG_POOL_CHUNK (32ull << 20)
#define FG_POOL_ROUND (2ull << 20)

struct fg_chunk {
    uint64_t size, used;
    struct CUmemPoolHandle_st *pool;
    struct fg_chunk *next;
};

struct CUmemPoolHandle_st {
    uint32_t magic;
    int dev;
    int is_default;
    int destroyed;
    pthread_mutex_t mu;
    uint64_t max_size; /* CUmemPoolProps.maxSize; 0: no limit but the device */
    uint64_t threshold, reserved, reserved_high, used, used_high;
    int reuse[3]; /* CU_MEMPOOL_ATTR_REUSE_* (1..3) */
    struct fg_chunk *chunks;
    struct CUmemPoolHandle_st *next; /* every pool of the process */
};

static struct CUmemPoolHandle_st default_pools[FG_MAX_DEVICES];
static struct CUmemPoolHandle_st *current_pool[FG_MAX_DEVICES];
static struct CUmemPoolHandle_st *created; /* created pools; never freed */
static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;

static void pool_setup(struct CUmemPoolHandle_st *p, int dev, int is_default)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->dev = dev;
    p->is_default = is_default;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->magic = FG_MAGIC_POOL;
}

void fg_pools_init(void)
{
    for (int d = 0; d < FG_MAX_DEVICES; d++) {
        pool_setup(&default_pools[d], d, 1);
        current_pool[d] = &default_pools[d];
    }
}

/* Fork child: the parent's pools (and the memory they reserved) are not ours. */
void fg_pools_reset(void)
{
    pthread_mutex_init(&pools_mu, NULL);
    created = NULL;
    for (int d = 0; d < FG_MAX_DEVICES; d++)
        current_pool[d] = NULL;
}

static int pool_valid(struct CUmemPoolHandle_st *p)
{
    if (!p)
        return 0;
    if (p >= &default_pools[0] && p < &default_pools[FG_MAX_DEVICES])
        return p == &default_pools[p - &default_pools[0]] && fg_valid_dev(p->dev);
    pthread_mutex_lock(&pools_mu);
    struct CUmemPoolHandle_st *q = created;
    while (q && q != p)
        q = q->next;
    pthread_mutex_unlock(&pools_mu);
    return q && !q->destroyed;
}

/* Releases wholly unused chunks while more than keep bytes are reserved. */
static void release_unused(struct CUmemPoolHandle_st *p, uint64_t keep)
{
    struct fg_chunk **pp = &p->chunks;
    while (*pp && p->reserved > keep) {
        struct fg_chunk *c = *pp;
        if (c->used != 0) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        p->reserved -= c->size;
        fg_uncharge(p->dev, c->size);
        free(c);
    }
}

void fg_pools_sync(int dev)
{
    struct CUmemPoolHandle_st *p = &default_pools[dev];
    pthread_mutex_lock(&p->mu);
    release_unused(p, p->threshold);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_lock(&pools_mu);
    struct CUmemPoolHandle_st *list = created;
    pthread_mutex_unlock(&pools_mu);
    for (p = list; p; p = p->next) {
        if (p->dev != dev)
            continue;
        pthread_mutex_lock(&p->mu);
        release_unused(p, p->destroyed ? 0 : p->threshold);
        pthread_mutex_unlock(&p->mu);
    }
}

static struct fg_chunk *reserve_chunk(struct CUmemPoolHandle_st *p, uint64_t n, CUresult *r)
{
    uint64_t need = (n + FG_POOL_ROUND - 1) & ~(FG_POOL_ROUND - 1);
    uint64_t size = need < FG_POOL_CHUNK ? FG_POOL_CHUNK : need;
    if (p->max_size) {
        /* The pool may never reserve more than maxSize: shrink the chunk to the request, or fail. */
        uint64_t room = p->reserved < p->max_size ? p->max_size - p->reserved : 0;
        if (size > room)
            size = need;
        if (need < n || size > room) {
            *r = CUDA_ERROR_OUT_OF_MEMORY;
            return NULL;
        }
    }
    struct fg_chunk *c = calloc(1, sizeof *c);
    if (!c) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    *r = fg_charge(p->dev, size);
    if (*r != CUDA_SUCCESS) {
        free(c);
        return NULL;
    }
    c->size = size;
    c->pool = p;
    c->next = p->chunks;
    p->chunks = c;
    p->reserved += size;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    return c;
}

static CUresult pool_alloc(struct CUmemPoolHandle_st *p, CUdeviceptr *dptr, uint64_t n)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&p->mu);
    struct fg_chunk *c = p->chunks;
    while (c && c->size - c->used < n)
        c = c->next;
    if (!c)
        c = reserve_chunk(p, n, &r);
    if (c) {
        c->used += n;
        p->used += n;
        if (p->used > p->used_high)
            p->used_high = p->used;
    }
    pthread_mutex_unlock(&p->mu);
    if (!c)
        return r;
    struct fg_entry e = {
        .key = fg_va_alloc(n, 512),
        .size = n,
        .aux = c,
        .dev = p->dev,
        .kind = FG_KIND_POOL,
    };
    fg_table_insert(&e);
    *dptr = e.key;
    return CUDA_SUCCESS;
}

void fg_pool_release_entry(const struct fg_entry *e)
{
    struct fg_chunk *c = e->aux;
    struct CUmemPoolHandle_st *p = c->pool;
    pthread_mutex_lock(&p->mu);
    c->used -= e->size;
    p->used -= e->size;
    if (p->destroyed)
        release_unused(p, 0);
    pthread_mutex_unlock(&p->mu);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, struct CUmemPoolHandle_st *pool, CUstream hStream)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_stream *s = fg_stream_resolve(hStream, ctx);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pool)
        pool = current_pool[s->ctx->dev];
    else if (!pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return pool_alloc(pool, dptr, bytesize);
}

FG_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream);
}

FG_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream);
}

static CUresult from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (!pool)
        return fg_ready() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return alloc_async(dptr, bytesize, pool, hStream);
}

FG_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return from_pool(dptr, bytesize, pool, hStream);
}

FG_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    return from_pool(dptr, bytesize, pool, hStream);
}

/* Stream order is not modelled for frees: the memory is reusable at once. */
static CUresult free_async(CUdeviceptr dptr, CUstream hStream)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!fg_stream_resolve(hStream, ctx))
        return CUDA_ERROR_INVALID_HANDLE;
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return cuMemFree_v2(dptr);
}

FG_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

FG_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

FG_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(poolProps->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUmemPoolHandle_st *p = malloc(sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pool_setup(p, poolProps->location.id, 0);
    p->max_size = poolProps->maxSize;
    pthread_mutex_lock(&pools_mu);
    p->next = created;
    created = p;
    pthread_mutex_unlock(&pools_mu);
    *pool = p;
    return CUDA_SUCCESS;
}

/* Chunks still in use are released when their last allocation is freed. */
FG_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool_valid(pool) || pool->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool->mu);
    pool->destroyed = 1;
    release_unused(pool, 0);
    pthread_mutex_unlock(&pool->mu);
    pthread_mutex_lock(&pools_mu);
    if (current_pool[pool->dev] == pool)
        current_pool[pool->dev] = &default_pools[pool->dev];
    pthread_mutex_unlock(&pools_mu);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool_valid(pool) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&pool->mu);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr - 1] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* Only a reset (to the current value) is allowed. */
        if (*(cuuint64_t *)value != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            pool->reserved_high = pool->reserved;
        else
            pool->used_high = pool->used;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool->mu);
    return r;
}

FG_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool_valid(pool) || !value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&pool->mu);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr - 1];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool->mu);
    return r;
}

FG_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool->mu);
    release_unused(pool, minBytesToKeep);
    pthread_mutex_unlock(&pool->mu);
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = &default_pools[dev];
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&pools_mu);
    *pool = current_pool[dev];
    pthread_mutex_unlock(&pools_mu);
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fg_valid_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool_valid(pool) || pool->dev != dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_mu);
    current_pool[dev] = pool;
    pthread_mutex_unlock(&pools_mu);
    return CUDA_SUCCESS;
}
