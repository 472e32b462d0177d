/* limiter.c — the charging protocol: charge our own slot, sum all slots, retract if
 * over the cap. No lock is ever held here; the only mutex serialises this process's
 * one-time slot claim and is never held across a driver call. */
#include "limiter.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "glibc_baseline.h"
#include "log.h"
#include "region.h"

/* 2^56 bytes (64 PiB): no request or reservation is larger. */
#define LIMITER_MAX_BYTES (1ull << 56)

static tessera_region *g_region;
static const tessera_limits *g_limits;
static const tessera_limits *g_core_limits;
static tessera_region *g_core_region;
static _Atomic int g_slot = -1;
static uint32_t g_pid;
static uint64_t g_start;
static pthread_mutex_t g_claim_mu = PTHREAD_MUTEX_INITIALIZER;

static bool file_id(const char *path, struct stat *st)
{
    /* O_NONBLOCK: a FIFO named as a region would otherwise hold the process
     * here until a writer opens it; region_map then refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    bool ok = baseline_fstat(fd, st) == 0;
    close(fd);
    return ok;
}

/* Whether a and b name one file (both exist). */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return file_id(a, &sa) && file_id(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int limiter_open(const struct hook_config *cfg, char *err, size_t errlen)
{
    /* A process holds a slot in each region, the same pid in both: in one
     * file the compute side's claim would take the memory side's slot for
     * its own from before an exec and zero its usage. */
    if (cfg->has_region && cfg->has_core_region && same_file(cfg->region_path, cfg->core_region_path)) {
        snprintf(err, errlen, "TESSERA_CORE_REGION %s is the same file as TESSERA_REGION %s: the core region "
                              "must be a file of its own", cfg->core_region_path, cfg->region_path);
        return -1;
    }
    if (cfg->has_region && region_map(cfg->region_path, &g_region, err, errlen) != 0)
        return -1;
    if (cfg->has_limits && limits_map(cfg->limits_path, &g_limits, err, errlen) != 0)
        return -1;
    if (cfg->has_core_limits && limits_map(cfg->core_limits_path, &g_core_limits, err, errlen) != 0)
        return -1;
    if (cfg->has_core_region && region_map(cfg->core_region_path, &g_core_region, err, errlen) != 0)
        return -1;
    return 0;
}

void limiter_core_files(const tessera_limits **core_limits, tessera_region **core_region)
{
    *core_limits = g_core_limits;
    *core_region = g_core_region;
}

bool limiter_active(void) { return g_limits != NULL && g_region != NULL; }

static int find_uuid(const tessera_limits *l, const char *uuid)
{
    for (uint32_t i = 0; i < l->device_count; i++) {
        if (strncmp(l->devices[i].uuid, uuid, TESSERA_UUID_LEN) == 0)
            return (int)i;
    }
    return -1;
}

int limiter_index(const char *uuid) { return limiter_active() ? find_uuid(g_limits, uuid) : -1; }

uint32_t limiter_core_pct(const char *uuid)
{
    if (g_core_limits == NULL)
        return 0;
    int i = find_uuid(g_core_limits, uuid);
    return i < 0 ? 0 : atomic_load(&g_core_limits->devices[i].core_limit_pct);
}

uint64_t limiter_cap(int idx)
{
    if (idx < 0 || !limiter_active())
        return 0;
    return atomic_load_explicit(&g_limits->devices[idx].mem_limit_bytes, memory_order_acquire);
}

uint64_t limiter_usage(int idx) { return idx < 0 || g_region == NULL ? 0 : region_usage(g_region, idx); }

static tessera_proc_slot *claim_slow(void)
{
    pthread_mutex_lock(&g_claim_mu);
    int slot = atomic_load(&g_slot);
    if (slot < 0) {
        bool zombie;
        g_pid = (uint32_t)getpid();
        if (proc_identity((pid_t)g_pid, &g_start, &zombie) != 0)
            g_start = 0;
        slot = region_claim(g_region, g_pid, g_start);
        if (slot < 0)
            hook_log(HOOK_LOG_ERROR, "usage region: all %d process slots belong to live processes; refusing "
                                     "GPU allocations", TESSERA_MAX_PROCS);
        else
            hook_log(HOOK_LOG_DEBUG, "claimed region slot %d", slot);
        atomic_store(&g_slot, slot);
    }
    pthread_mutex_unlock(&g_claim_mu);
    return slot < 0 ? NULL : &g_region->slots[slot];
}

static inline tessera_proc_slot *my_slot(void)
{
    int slot = atomic_load_explicit(&g_slot, memory_order_acquire);
    if (__builtin_expect(slot >= 0, 1))
        return &g_region->slots[slot];
    return claim_slow();
}

static void note_peak(int idx, uint64_t total)
{
    _Atomic uint64_t *peak = &g_region->peak_bytes[idx];
    uint64_t cur = atomic_load_explicit(peak, memory_order_relaxed);
    while (cur < total && !atomic_compare_exchange_weak(peak, &cur, total))
        ;
}

const tessera_limits *limiter_limits(void) { return limiter_active() ? g_limits : NULL; }
tessera_region *limiter_region(void) { return limiter_active() ? g_region : NULL; }

void limiter_note_refused(int idx)
{
    if (idx >= 0 && limiter_active())
        atomic_fetch_add(&g_region->refused[idx], 1);
}

int limiter_charge(int idx, uint64_t n)
{
    int rc = limiter_try(idx, n);
    if (rc == LIMITER_OVER_CAP)
        limiter_note_refused(idx);
    return rc;
}

int limiter_try(int idx, uint64_t n)
{
    if (idx < 0 || n == 0 || !limiter_active())
        return LIMITER_OK; /* taking nothing fits even under a cap lowered below usage */
    if (n > LIMITER_MAX_BYTES) {
        /* No GPU has this much (the driver would refuse too); adding it could wrap the
         * slot's counter and corrupt everyone's sum. */
        return LIMITER_OVER_CAP;
    }
    tessera_proc_slot *s = my_slot();
    if (s == NULL)
        return LIMITER_NO_SLOT;
    for (int attempt = 0;; attempt++) {
        uint64_t cap = limiter_cap(idx);
        if (cap == 0 || n <= cap) {
            atomic_fetch_add(&s->used_bytes[idx], n); /* seq_cst: store before the loads below */
            uint64_t total = region_usage(g_region, idx);
            if (cap == 0 || total <= cap) {
                note_peak(idx, total);
                return LIMITER_OK;
            }
            atomic_fetch_sub(&s->used_bytes[idx], n);
        }
        if (attempt > 0)
            break;
        /* Dead processes' usage may be what is in the way; a racing charge may also
         * have retracted by now. Look once more. */
        region_reap(g_region, g_pid, g_start);
    }
    return LIMITER_OVER_CAP;
}

void limiter_force(int idx, uint64_t n)
{
    if (idx < 0 || !limiter_active() || n == 0 || n > LIMITER_MAX_BYTES)
        return;
    tessera_proc_slot *s = my_slot();
    if (s == NULL)
        return;
    atomic_fetch_add(&s->used_bytes[idx], n);
    note_peak(idx, region_usage(g_region, idx));
}

void limiter_uncharge(int idx, uint64_t n)
{
    if (idx < 0 || !limiter_active() || n == 0)
        return;
    int slot = atomic_load_explicit(&g_slot, memory_order_acquire);
    if (slot < 0)
        return; /* nothing of ours is charged (a fork child freeing its parent's memory) */
    _Atomic uint64_t *w = &g_region->slots[slot].used_bytes[idx];
    uint64_t cur = atomic_load(w);
    /* Saturate: if a reaper zeroed our slot (it took us for dead), never wrap. */
    while (!atomic_compare_exchange_weak(w, &cur, cur > n ? cur - n : 0))
        ;
}

void limiter_atfork_child(void)
{
    pthread_mutex_init(&g_claim_mu, NULL);
    atomic_store(&g_slot, -1);
}

void limiter_release(void)
{
    /* A child made without pthread_atfork (the raw clone system call) still holds
     * its parent's slot number: the slot is the parent's, leave it alone. */
    if ((uint32_t)getpid() != g_pid)
        return;
    int slot = atomic_exchange(&g_slot, -1);
    if (slot >= 0 && g_region != NULL)
        region_release(g_region, slot, g_pid);
}
