/* pools.c — pool reservation tracking. A small array under a process-local mutex;
 * the mutex is never held across a driver call (reservations are read first,
 * applied under the lock, and only if no other change was applied in between:
 * a reservation read before another thread's growth must never overwrite it). */
#include "pools.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "devices.h"
#include "limiter.h"
#include "log.h"
#include "real.h"

struct pool_rec {
    CUmemoryPool pool;
    int idx;
    bool destroyed;
    uint64_t charged;  /* charged for the pool: its reservation as last read + pending */
    uint64_t pending;  /* pre-charges of allocations in flight */
    uint64_t gen;      /* bumped by every change of charged */
    int64_t outstanding;
};

#define MAX_POOLS 256

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool_rec g_pools[MAX_POOLS];
static int g_npools;
_Atomic int pools_known;

static struct pool_rec *find(CUmemoryPool pool)
{
    for (int i = 0; i < g_npools; i++) {
        if (g_pools[i].pool == pool)
            return &g_pools[i];
    }
    return NULL;
}

static void drop(struct pool_rec *p)
{
    limiter_uncharge(p->idx, p->charged);
    *p = g_pools[--g_npools];
}

bool pool_note(CUmemoryPool pool, int idx)
{
    /* Pools of pass-through devices (idx -1) are remembered too, so that their
     * allocations are never charged to the current context's device instead. */
    if (pool == NULL || idx == DEVICE_UNKNOWN)
        return false;
    bool tracked = true;
    pthread_mutex_lock(&g_mu);
    if (find(pool) == NULL) {
        if (g_npools < MAX_POOLS) {
            g_pools[g_npools++] = (struct pool_rec){.pool = pool, .idx = idx};
            atomic_store(&pools_known, 1);
        } else {
            static bool warned; /* once: this runs for every allocation from such a pool */
            tracked = false;
            if (!warned)
                hook_log(HOOK_LOG_WARN, "more than %d memory pools: pool %p and later ones are charged per "
                                        "allocation", MAX_POOLS, (void *)pool);
            warned = true;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return tracked;
}

int pool_index(CUmemoryPool pool, int def)
{
    pthread_mutex_lock(&g_mu);
    struct pool_rec *p = find(pool);
    int idx = p ? p->idx : def;
    pthread_mutex_unlock(&g_mu);
    return idx;
}

static int query(CUmemoryPool pool, CUmemPool_attribute attr, uint64_t *v)
{
    cuuint64_t x = 0;
    if (REAL.cuMemPoolGetAttribute == NULL || REAL.cuMemPoolGetAttribute(pool, attr, &x) != CUDA_SUCCESS)
        return -1;
    *v = x;
    return 0;
}

uint64_t pool_headroom(CUmemoryPool pool)
{
    uint64_t reserved, used;
    if (query(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != 0 ||
        query(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != 0)
        return 0;
    return reserved > used ? reserved - used : 0;
}

void pool_add_charge(CUmemoryPool pool, uint64_t n)
{
    pthread_mutex_lock(&g_mu);
    struct pool_rec *p = find(pool);
    if (p != NULL) {
        p->charged += n;
        p->pending += n;
        p->gen++;
    }
    pthread_mutex_unlock(&g_mu);
}

/* Bring charged to reserved + pending (less pre, which the caller settles).
 * Under g_mu. 0, or -1 (nothing changed) when checked growth does not fit. */
static int apply(struct pool_rec *p, uint64_t reserved, int checked, uint64_t pre)
{
    uint64_t pending = p->pending > pre ? p->pending - pre : 0;
    uint64_t target = reserved + pending;
    if (target > p->charged) {
        uint64_t grow = target - p->charged;
        if (!checked)
            limiter_force(p->idx, grow);
        else if (limiter_charge(p->idx, grow) != LIMITER_OK)
            return -1;
    } else if (target < p->charged) {
        limiter_uncharge(p->idx, p->charged - target);
    }
    p->charged = target;
    p->pending = pending;
    p->gen++;
    return 0;
}

int pool_reconcile_pre(CUmemoryPool pool, int checked, uint64_t pre)
{
    for (;;) {
        pthread_mutex_lock(&g_mu);
        struct pool_rec *p = find(pool);
        uint64_t gen = p != NULL ? p->gen : 0;
        pthread_mutex_unlock(&g_mu);
        if (p == NULL)
            return 0;
        uint64_t reserved;
        int known = query(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == 0;
        int rc = 0;
        pthread_mutex_lock(&g_mu);
        p = find(pool);
        if (p == NULL || p->destroyed) {
            /* Nothing to follow: the charge goes when the pool is dropped. */
        } else if (!known) {
            /* Cannot read it: keep what is charged (pre stays, as a plain charge). */
            p->pending = p->pending > pre ? p->pending - pre : 0;
        } else if (p->gen != gen) {
            rc = 1; /* changed since we read: that reading may be older than it */
        } else {
            rc = apply(p, reserved, checked, pre);
        }
        pthread_mutex_unlock(&g_mu);
        if (rc != 1)
            return rc;
    }
}

int pool_reconcile(CUmemoryPool pool, int checked) { return pool_reconcile_pre(pool, checked, 0); }

void pool_reconcile_all(void)
{
    CUmemoryPool snap[MAX_POOLS];
    int n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_npools; i++) {
        if (!g_pools[i].destroyed)
            snap[n++] = g_pools[i].pool;
    }
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < n; i++)
        pool_reconcile(snap[i], 0);
}

void pool_outstanding(CUmemoryPool pool, int delta)
{
    pthread_mutex_lock(&g_mu);
    struct pool_rec *p = find(pool);
    if (p != NULL) {
        p->outstanding += delta;
        if (p->destroyed && p->outstanding <= 0)
            drop(p);
    }
    pthread_mutex_unlock(&g_mu);
}

void pool_destroyed(CUmemoryPool pool)
{
    pthread_mutex_lock(&g_mu);
    struct pool_rec *p = find(pool);
    if (p != NULL) {
        p->destroyed = true;
        if (p->outstanding <= 0)
            drop(p);
    }
    pthread_mutex_unlock(&g_mu);
}

void pools_atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
void pools_atfork_parent(void) { pthread_mutex_unlock(&g_mu); }

void pools_atfork_child(void)
{
    g_npools = 0;
    atomic_store(&pools_known, 0);
    pthread_mutex_unlock(&g_mu);
}
