/* unit_test.c — C unit tests of the hook's pieces that need no driver: the
 * environment parser, the region protocol (claim, charge, reap), the per-object
 * table and the array size rule. Run by `make test-hook-unit`. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pacing.h"
#include "abi_files.h"
#include "accounting.h"
#include "balloon.h"
#include "config.h"
#include "limiter.h"
#include "log.h"
#include "once.h"
#include "region.h"

static int failures;

#define CHECK(cond)                                                                                                \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                        \
            failures++;                                                                                            \
        }                                                                                                          \
    } while (0)

/* ---- hook_once ---- */

static hook_once_t g_once;
static _Atomic int g_once_runs, g_once_done, g_once_release;

static void slow_once(void)
{
    atomic_fetch_add(&g_once_runs, 1);
    while (!atomic_load(&g_once_release))
        usleep(1000);
    atomic_store(&g_once_done, 1);
}

static void *call_once(void *seen_done)
{
    hook_once(&g_once, slow_once);
    *(int *)seen_done = atomic_load(&g_once_done);
    return NULL;
}

/* 8 threads: one runs the function, every one returns only after it has finished.
 * A child forked while it runs does not wait for a thread it does not have: it runs
 * the function itself, as with pthread_once. */
static void test_once(void)
{
    pthread_t th[8];
    int seen[8] = {0};
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, call_once, &seen[i]);
    while (atomic_load(&g_once_runs) == 0) /* until one of them is inside slow_once */
        usleep(1000);
    usleep(20 * 1000); /* the others are waiting */
    pid_t child = fork();
    if (child == 0) {
        int done = 0;
        atomic_store(&g_once_release, 1);
        call_once(&done);
        _exit(done && atomic_load(&g_once_runs) == 2 ? 0 : 1);
    }
    atomic_store(&g_once_release, 1);
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK(seen[i] == 1);
    }
    CHECK(atomic_load(&g_once_runs) == 1);
    int status = -1;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    hook_once(&g_once, slow_once);
    CHECK(atomic_load(&g_once_runs) == 1);
}

/* ---- config ---- */

static const char *const *g_env;

static const char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (const char *const *e = g_env; *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

static int parse(const char *const *env, struct hook_config *c, char *err)
{
    g_env = env;
    return config_parse(c, fake_getenv, err, 256);
}

static void test_config(void)
{
    struct hook_config c;
    char err[256];
    const char *none[] = {NULL};
    CHECK(parse(none, &c, err) == 0 && !c.has_limits && !c.has_region && c.ctx_reserve_bytes == 0 &&
          c.log_level == HOOK_LOG_WARN);
    const char *good[] = {"TESSERA_REGION=/r", "TESSERA_LIMITS=/l", "TESSERA_CORE_LIMITS=/c",
                          "TESSERA_CTX_RESERVE_MIB=300", "TESSERA_LOG=debug", NULL};
    CHECK(parse(good, &c, err) == 0 && c.has_limits && strcmp(c.limits_path, "/l") == 0 &&
          c.ctx_reserve_bytes == 300ull << 20 && c.log_level == HOOK_LOG_DEBUG && c.has_core_limits);
    const char *bad[][3] = {
        {"TESSERA_CTX_RESERVE_MIB=12x", NULL},  {"TESSERA_CTX_RESERVE_MIB=-1", NULL},
        {"TESSERA_CTX_RESERVE_MIB=", NULL},     {"TESSERA_CTX_RESERVE_MIB=99999999999", NULL},
        {"TESSERA_LOG=verbose", NULL},          {"TESSERA_REGION=", NULL},
        {"TESSERA_LIMITS=/l", NULL}, /* limits without a region */
    };
    const char *want[] = {"TESSERA_CTX_RESERVE_MIB", "TESSERA_CTX_RESERVE_MIB", "TESSERA_CTX_RESERVE_MIB",
                          "TESSERA_CTX_RESERVE_MIB", "TESSERA_LOG", "TESSERA_REGION", "TESSERA_REGION"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], &c, err);
        CHECK(rc == -1);
        CHECK(strstr(err, want[i]) != NULL);
    }
}

/* ---- files ---- */

static char g_dir[64];

static void make_limits(const char *path, uint64_t cap)
{
    const char *uuids[] = {"GPU-aaaa", "GPU-bbbb"};
    const uint64_t caps[] = {cap, 0};
    const uint32_t cores[] = {0, 40};
    abi_write_limits(path, 2, uuids, caps, cores);
}

static void test_bad_files(void)
{
    char path[128], err[256];
    tessera_region *r;
    const tessera_limits *l;
    snprintf(path, sizeof path, "%s/bad", g_dir);
    CHECK(region_map("/nonexistent/region", &r, err, sizeof err) == -1 && strstr(err, "open") != NULL);
    abi_write_file(path, "TSREGION", 8);
    CHECK(region_map(path, &r, err, sizeof err) == -1 && strstr(err, "truncated") != NULL);
    abi_write_region(path);
    CHECK(limits_map(path, &l, err, sizeof err) == -1 && strstr(err, "magic") != NULL);
    CHECK(region_map(path, &r, err, sizeof err) == 0);
    r->abi_version = 99;
    CHECK(region_map(path, &r, err, sizeof err) == -1 && strstr(err, "ABI version 99") != NULL);
}

static void test_proc_identity(void)
{
    uint64_t st = 0;
    bool z = true;
    CHECK(proc_identity(getpid(), &st, &z) == 0 && st > 0 && !z);
    CHECK(proc_alive((uint32_t)getpid(), st));
    CHECK(!proc_alive((uint32_t)getpid(), st + 1)); /* pid reuse: different start time */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    CHECK(!proc_alive((uint32_t)child, 0));
}

static void test_limiter(void)
{
    char rpath[128], lpath[128], err[256];
    snprintf(rpath, sizeof rpath, "%s/region", g_dir);
    snprintf(lpath, sizeof lpath, "%s/limits", g_dir);
    abi_write_region(rpath);
    make_limits(lpath, 1000);
    struct hook_config cfg = {.has_region = true, .has_limits = true, .has_core_limits = true};
    strcpy(cfg.region_path, rpath);
    strcpy(cfg.limits_path, lpath);
    strcpy(cfg.core_limits_path, lpath);
    /* One file as both regions is refused before anything is mapped. */
    struct hook_config same = cfg;
    same.has_core_region = true;
    strcpy(same.core_region_path, rpath);
    CHECK(limiter_open(&same, err, sizeof err) == -1 && strstr(err, "same file as TESSERA_REGION") != NULL);
    /* A FIFO named as a region is refused, not waited on: the same-file check
     * opens both paths before region_map does (which opens with O_NONBLOCK for
     * this reason). The alarm turns a hang into a failure. */
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/region-fifo", g_dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    struct hook_config piped = same;
    strcpy(piped.region_path, fifo);
    alarm(10);
    CHECK(limiter_open(&piped, err, sizeof err) == -1 && strstr(err, "not a regular file") != NULL);
    alarm(0);
    CHECK(limiter_open(&cfg, err, sizeof err) == 0);
    CHECK(limiter_index("GPU-aaaa") == 0 && limiter_index("GPU-bbbb") == 1 && limiter_index("GPU-cccc") == -1);
    CHECK(limiter_core_pct("GPU-bbbb") == 40);
    CHECK(limiter_charge(0, 600) == LIMITER_OK);
    CHECK(limiter_charge(0, 400) == LIMITER_OK); /* exactly at the cap */
    CHECK(limiter_charge(0, 1) == LIMITER_OVER_CAP);
    CHECK(limiter_usage(0) == 1000);
    limiter_uncharge(0, 400);
    CHECK(limiter_charge(0, 401) == LIMITER_OVER_CAP);
    CHECK(limiter_charge(0, UINT64_MAX) == LIMITER_OVER_CAP);
    CHECK(limiter_charge(1, 1ull << 40) == LIMITER_OK); /* uncapped entry: counted, never refused */
    CHECK(limiter_usage(1) == 1ull << 40);
    CHECK(limiter_charge(1, UINT64_MAX) == LIMITER_OVER_CAP); /* ...unless absurd: it would wrap */
    CHECK(limiter_usage(1) == 1ull << 40);

    /* A dead process holding usage is reaped when it stands in the way. */
    tessera_region *r;
    CHECK(region_map(rpath, &r, err, sizeof err) == 0);
    CHECK(atomic_load(&r->refused[0]) == 3);
    pid_t child = fork();
    if (child == 0) {
        limiter_atfork_child();
        _exit(limiter_charge(0, 300) == LIMITER_OK ? 0 : 1); /* dies holding 300 */
    }
    int st;
    waitpid(child, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(limiter_usage(0) == 900);
    CHECK(limiter_charge(0, 400) == LIMITER_OK); /* fits only once the child's 300 is reaped */
    CHECK(limiter_usage(0) == 1000);
    CHECK(atomic_load(&r->reaped_procs) == 1 && atomic_load(&r->reaped_bytes) == 300);

    /* Saturating uncharge never wraps the slot. */
    limiter_uncharge(0, 1ull << 50);
    CHECK(limiter_usage(0) == 0);

    /* At exit the slot is released and its usage disappears at once. */
    limiter_release();
    CHECK(limiter_usage(1) == 0);
    uint32_t hwm = atomic_load(&r->slot_hwm);
    int owned = 0;
    for (uint32_t i = 0; i < hwm; i++)
        owned += atomic_load(&r->slots[i].pid) != 0;
    CHECK(owned == 0);
}

static void test_region_claim_exec_and_reuse(void)
{
    char rpath[128], err[256];
    snprintf(rpath, sizeof rpath, "%s/region2", g_dir);
    abi_write_region(rpath);
    tessera_region *r;
    CHECK(region_map(rpath, &r, err, sizeof err) == 0);
    uint64_t st;
    bool z;
    proc_identity(getpid(), &st, &z);
    int a = region_claim(r, (uint32_t)getpid(), st);
    atomic_store(&r->slots[a].used_bytes[3], 77);
    /* The same process image again (after exec): same slot, usage reset. */
    int b = region_claim(r, (uint32_t)getpid(), st);
    CHECK(a == b && atomic_load(&r->slots[b].used_bytes[3]) == 0);
    /* A slot with our pid but another start time is a dead predecessor. */
    atomic_store(&r->slots[5].pid, (uint32_t)getpid());
    atomic_store(&r->slots[5].start_time, st + 12345);
    atomic_store(&r->slots[5].used_bytes[0], 5);
    atomic_store(&r->slot_hwm, 6);
    CHECK(region_reap(r, (uint32_t)getpid(), st) == 1 && atomic_load(&r->slots[5].pid) == 0);
    /* A slot being cleared by the node reaper is left alone; one whose container
     * reaper died is taken over. */
    atomic_store(&r->slots[2].pid, TESSERA_SLOT_RECLAIM_BIT | TESSERA_REAPER_NODE);
    atomic_store(&r->slots[3].pid, TESSERA_SLOT_RECLAIM_BIT | 0x3ffffe);
    atomic_store(&r->slots[3].used_bytes[0], 9);
    CHECK(region_reap(r, (uint32_t)getpid(), st) == 1);
    CHECK(atomic_load(&r->slots[2].pid) == (TESSERA_SLOT_RECLAIM_BIT | TESSERA_REAPER_NODE));
    CHECK(atomic_load(&r->slots[3].pid) == 0 && region_usage(r, 0) == 0);
}

/* Launch-sequence words (tessera_abi.h, "Launch sequences"): a word whose time
 * has passed is expired once, taking its count from its device; the owner's
 * refresh sees 0 and counts itself again; clearing a slot (reap, release, a
 * claim after exec) expires every word it holds. */
static void test_seq_words(void)
{
    char rpath[128], err[256];
    snprintf(rpath, sizeof rpath, "%s/region-seq", g_dir);
    abi_write_region(rpath);
    tessera_region *r;
    CHECK(region_map(rpath, &r, err, sizeof err) == 0);
    tessera_proc_slot *s = &r->slots[1];
    atomic_store(&r->compute[2].inflight, 3);
    atomic_store(&r->compute[5].inflight, 1);
    atomic_store(&s->seq_until[0], (1000000ull & ~TESSERA_SEQ_DEV_MASK) | 2); /* past */
    atomic_store(&s->seq_until[3], (9000000ull & ~TESSERA_SEQ_DEV_MASK) | 2); /* ahead */
    atomic_store(&s->seq_until[5], (1000000ull & ~TESSERA_SEQ_DEV_MASK) | 5); /* past */
    CHECK(region_expire_seqs(r, s, 5000000ull) == 2);
    CHECK(atomic_load(&r->compute[2].inflight) == 2 && atomic_load(&r->compute[5].inflight) == 0);
    CHECK(atomic_load(&s->seq_until[0]) == 0 && atomic_load(&s->seq_until[5]) == 0 &&
          atomic_load(&s->seq_until[3]) != 0);
    /* Expired already: nothing more to take. */
    CHECK(region_expire_seqs(r, s, 5000000ull) == 0 && atomic_load(&r->compute[2].inflight) == 2);
    /* A count another party already took back never wraps the device's count. */
    atomic_store(&s->seq_until[1], (1000000ull & ~TESSERA_SEQ_DEV_MASK) | 5);
    CHECK(region_expire_seqs(r, s, 5000000ull) == 1 && atomic_load(&r->compute[5].inflight) == 0);

    /* A dead process's slot: reaping expires its words whatever their time. */
    uint64_t st;
    bool z;
    proc_identity(getpid(), &st, &z);
    atomic_store(&s->pid, 0x3ffffe); /* no such process */
    atomic_store(&s->start_time, 1);
    atomic_store(&r->slot_hwm, 2);
    CHECK(region_reap(r, (uint32_t)getpid(), st) == 1);
    CHECK(atomic_load(&s->seq_until[3]) == 0 && atomic_load(&r->compute[2].inflight) == 1);

    /* Our own slot taken back after exec: the old image's words are expired. */
    int a = region_claim(r, (uint32_t)getpid(), st);
    atomic_store(&r->slots[a].seq_until[2], (UINT64_MAX & ~TESSERA_SEQ_DEV_MASK) | 2);
    CHECK(region_claim(r, (uint32_t)getpid(), st) == a);
    CHECK(atomic_load(&r->slots[a].seq_until[2]) == 0 && atomic_load(&r->compute[2].inflight) == 0);

    /* Release at exit does the same. */
    atomic_store(&r->compute[7].inflight, 1);
    atomic_store(&r->slots[a].seq_until[4], (UINT64_MAX & ~TESSERA_SEQ_DEV_MASK) | 7);
    region_release(r, a, (uint32_t)getpid());
    CHECK(atomic_load(&r->slots[a].pid) == 0 && atomic_load(&r->compute[7].inflight) == 0);
    region_unmap(r);
}

/* ---- table ---- */

static void test_table(void)
{
    enum { N = 20000 };
    for (uint64_t i = 0; i < N; i++) {
        struct acct_rec rec = {.key = 0x7f0000000000ull + i * 512, .bytes = i, .idx = 0, .space = ACCT_PTR};
        CHECK(acct_put(&rec) == 0);
    }
    struct acct_rec arr = {.key = 0x7f0000000000ull, .bytes = 99, .idx = 1, .space = ACCT_ARRAY};
    CHECK(acct_put(&arr) == 0);
    CHECK(acct_count() == N + 1);
    struct acct_rec out;
    int ok = 1;
    for (uint64_t i = 0; i < N; i += 2)
        ok &= acct_take(ACCT_PTR, 0x7f0000000000ull + i * 512, &out) && out.bytes == i;
    CHECK(ok);
    for (uint64_t i = 1; i < N; i += 2)
        ok &= acct_take(ACCT_PTR, 0x7f0000000000ull + i * 512, &out) && out.bytes == i;
    CHECK(ok);
    CHECK(!acct_take(ACCT_PTR, 0x7f0000000000ull, &out));
    CHECK(acct_take(ACCT_ARRAY, 0x7f0000000000ull, &out) && out.bytes == 99);
    CHECK(acct_count() == 0);
}

static void test_table_ranges_owners_and_vmm(void)
{
    struct acct_rec out[8];
    for (uint64_t i = 0; i < 6; i++) {
        struct acct_rec m = {.key = 0x1000 + i * 0x100, .owner = 77, .space = ACCT_MAP};
        struct acct_rec p = {.key = 0x1000 + i * 0x100, .owner = i % 2 ? 5 : 6, .bytes = 1, .space = ACCT_PTR};
        CHECK(acct_put(&m) == 0 && acct_put(&p) == 0);
    }
    /* [0x1100, 0x1300): two mappings, and no pointer records. */
    CHECK(acct_take_range(ACCT_MAP, 0x1100, 0x1300, out, 8) == 2 && out[0].owner == 77);
    CHECK(acct_take_range(ACCT_MAP, 0x1100, 0x1300, out, 8) == 0);
    CHECK(acct_take_owned(5, out, 8) == 3 && acct_take_owned(5, out, 8) == 0);
    CHECK(acct_take_range(ACCT_MAP, 0, UINT64_MAX, out, 8) == 4);
    CHECK(acct_take_owned(6, out, 2) == 2 && acct_take_owned(6, out, 8) == 1);
    CHECK(acct_count() == 0);

    struct acct_rec h = {.key = 9, .bytes = 4096, .idx = 0, .space = ACCT_VMM};
    CHECK(acct_put(&h) == 0);
    CHECK(acct_vmm_update(10, 1, 0, out) == -1);   /* unknown handle */
    CHECK(acct_vmm_update(9, 1, 0, out) == 0);     /* mapped */
    CHECK(acct_vmm_update(9, 0, 1, out) == 0);     /* released while mapped: kept */
    CHECK(acct_vmm_update(9, -1, 0, out) == 1 && out[0].bytes == 4096); /* last unmap frees */
    CHECK(acct_count() == 0);
    CHECK(acct_put(&h) == 0);
    CHECK(acct_vmm_update(9, 0, 1, out) == 1); /* never mapped: the release frees */
}

static void test_sizes(void)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 100, .Height = 0, .Depth = 0, .Format = CU_AD_FORMAT_FLOAT,
                                 .NumChannels = 4};
    CHECK(array_bytes(&d) == 1600 + 448 - 0); /* 1600 rounded up to 2048 */
    d.Height = 10;
    d.Depth = 3;
    CHECK(array_bytes(&d) == 48000 + 128); /* 48000 -> 48128 */
    /* Formats the hook has no size rule for (block-compressed, YUV, newer ones) are
     * never charged less than they can take: at most 16 bytes per texel. */
    d.Format = (CUarray_format)0x9d; /* CU_AD_FORMAT_BC7_UNORM */
    d.NumChannels = 4;
    CHECK(array_bytes(&d) >= 100 * 10 * 3 * 16);
    d.Format = (CUarray_format)0xc2; /* CU_AD_FORMAT_UNORM_INT8X4: 4 bytes per texel */
    CHECK(array_bytes(&d) == 12288);
    d.Format = (CUarray_format)0xcb; /* CU_AD_FORMAT_SNORM_INT16X4: 8 bytes per texel */
    CHECK(array_bytes(&d) == 24064);
    d.Width = 0;
    CHECK(array_bytes(&d) == 0);
    CUDA_ARRAY3D_DESCRIPTOR m = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    /* levels 64x64, 32x32, 16x16, 8x8: 4096 + 1024 + 256 + 64 = 5440, rounded once */
    CHECK(mipmap_bytes(&m, 4) == 5632);
    /* a 1-D mipmap keeps its zero extents: 1000 + 500 + 250 bytes */
    CUDA_ARRAY3D_DESCRIPTOR m1 = {.Width = 1000, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CHECK(mipmap_bytes(&m1, 3) == 2048);
    m1.Format = (CUarray_format)0xb0; /* CU_AD_FORMAT_NV12 */
    CHECK(mipmap_bytes(&m1, 3) >= 1750 * 16);
    CUuuid u;
    for (int i = 0; i < 16; i++)
        u.bytes[i] = (char)(i * 17);
    char s[48];
    uuid_format(&u, s);
    CHECK(strcmp(s, "GPU-00112233-4455-6677-8899-aabbccddeeff") == 0);
}

/* The grant rule and the container's token bucket (pacing.c). */
static void test_pacing(void)
{
    const uint64_t now = 10000000000ull, arb = TESSERA_GRANT_ARBITRATED;
    /* The arbiter's grant while its heartbeat is fresh. */
    CHECK(pacing_rate(arb | TESSERA_GRANT_UNPACED, now - 1000, TESSERA_POLICY_HARD, 30, now) == PACING_UNPACED);
    CHECK(pacing_rate(arb | 0, now, TESSERA_POLICY_GUARANTEED, 30, now) == 0);
    CHECK(pacing_rate(arb | 250000, now, TESSERA_POLICY_HARD, 30, now) == 250000);
    CHECK(pacing_rate(arb | 5000000, now, TESSERA_POLICY_HARD, 30, now) == TESSERA_GRANT_PPM_MAX);
    /* No arbiter, or a stale one: the static share. */
    CHECK(pacing_rate(0, 0, TESSERA_POLICY_HARD, 30, now) == 300000);
    CHECK(pacing_rate(0, 0, TESSERA_POLICY_GUARANTEED, 30, now) == PACING_UNPACED);
    CHECK(pacing_rate(arb | 0, now - TESSERA_HEARTBEAT_STALE_NS, TESSERA_POLICY_HARD, 30, now) == 300000);
    CHECK(pacing_rate(0, 0, TESSERA_POLICY_HARD, 100, now) == PACING_UNPACED);
    /* A turn with a deadline (5 ms after the heartbeat): its rate until then,
     * stopped from then on; a stale heartbeat still falls back. */
    const uint64_t until5ms = 5000ull << TESSERA_GRANT_UNTIL_SHIFT;
    CHECK(pacing_rate(arb | until5ms | TESSERA_GRANT_UNPACED, now - 4999999, TESSERA_POLICY_HARD, 30, now) == PACING_UNPACED);
    CHECK(pacing_rate(arb | until5ms | TESSERA_GRANT_UNPACED, now - 5000000, TESSERA_POLICY_HARD, 30, now) == 0);
    CHECK(pacing_rate(arb | until5ms | 250000, now - 6000000, TESSERA_POLICY_GUARANTEED, 30, now) == 0);
    CHECK(pacing_rate(arb | until5ms | 250000, now + 1000, TESSERA_POLICY_GUARANTEED, 30, now) == 250000);
    CHECK(pacing_rate(arb | until5ms | TESSERA_GRANT_UNPACED, now - TESSERA_HEARTBEAT_STALE_NS, TESSERA_POLICY_GUARANTEED, 30, now) ==
          PACING_UNPACED);
    /* The bucket: starts empty, earns rate × time, at most PACING_BUCKET_NS. */
    tessera_device_compute c;
    memset(&c, 0, sizeof c);
    pacing_refill(&c, 500000, now);
    CHECK(pacing_tokens(&c) == 0);
    pacing_refill(&c, 500000, now + 1000000); /* 1 ms at 50 % */
    CHECK(pacing_tokens(&c) == 500000);
    pacing_refill(&c, 500000, now + 1000000); /* the same instant earns nothing twice */
    CHECK(pacing_tokens(&c) == 500000);
    pacing_refill(&c, 500000, now + 60000000000ull);
    CHECK(pacing_tokens(&c) == PACING_BUCKET_NS);
    pacing_charge(&c, 3000000);
    CHECK(pacing_tokens(&c) == PACING_BUCKET_NS - 3000000);
    pacing_charge(&c, 10000000000ull); /* debt is bounded */
    CHECK(pacing_tokens(&c) == -PACING_DEBT_NS);
    /* Waits: none with tokens, the poll when stopped, bounded otherwise. */
    CHECK(pacing_wait_ns(1, 300000) == 0);
    CHECK(pacing_wait_ns(-1000, 0) == PACING_POLL_NS);
    CHECK(pacing_wait_ns(-300000, 300000) == 1000000);
    CHECK(pacing_wait_ns(-1, 300000) == 50000);
    CHECK(pacing_wait_ns(-PACING_DEBT_NS, 1) == 2000000);
}

static int never(void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static int after_three(void *arg) { return ++*(int *)arg >= 3; }

/* The wait for a burst in flight is bounded: a burst that never completes (a
 * hung stream, work that waits on the host) releases the thread after the
 * bound, stamping the tenant's demand meanwhile; one that completes ends the
 * wait at once. */
static void test_inflight_wait_bound(void)
{
    CHECK(pacing_inflight_bound_ns(0) == PACING_INFLIGHT_MIN_NS);
    CHECK(pacing_inflight_bound_ns(50000000ull) == 400000000ull); /* 8 x a 50 ms burst */
    CHECK(pacing_inflight_bound_ns(10000000000ull) == PACING_INFLIGHT_MAX_NS);

    int polls = 0;
    _Atomic uint64_t demand = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK(!pacing_wait_bounded(never, &polls, 30000000ull, &demand)); /* 30 ms */
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t took = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
    CHECK(took >= 30000000ull);
    CHECK(took < 5000000000ull); /* returned: generous for a loaded machine */
    CHECK(polls >= 2);
    CHECK(atomic_load(&demand) != 0); /* stamped while waiting */

    polls = 0;
    CHECK(pacing_wait_bounded(after_three, &polls, 5000000000ull, NULL));
    CHECK(polls == 3);
}

/* Ended waits land in the lane of their duration; a full lane wraps to 0 without
 * carrying into its neighbour, and the admitted count wraps without touching the
 * expired one. */
static void test_balloon_wait_histogram(void)
{
    tessera_device_balloon b;
    memset(&b, 0, sizeof b);
    balloon_count_wait(&b, 500000u, 1);       /* 0.5 ms: lane 0 */
    balloon_count_wait(&b, 1000000u, 1);      /* exactly 1 ms: lane 0 (bounds are inclusive) */
    balloon_count_wait(&b, 1000001u, 1);      /* lane 1 */
    balloon_count_wait(&b, 300000000u, 1);    /* 300 ms: lane 4 */
    balloon_count_wait(&b, 3000000000ull, 0); /* 3 s, expired: lane 7 */
    CHECK(atomic_load(&b.wait_hist[0]) == (2ull | 1ull << 16));
    CHECK(atomic_load(&b.wait_hist[1]) == (1ull | 1ull << 48));
    CHECK(atomic_load(&b.waits_ended) == (4ull | 1ull << 32));
    atomic_store(&b.wait_hist[0], 0xffffull); /* lane 0 full */
    balloon_count_wait(&b, 1u, 1);
    CHECK(atomic_load(&b.wait_hist[0]) == 0); /* wrapped; lane 1 untouched */
    atomic_store(&b.waits_ended, 0xffffffffull | 5ull << 32);
    balloon_count_wait(&b, 1u, 1);
    CHECK(atomic_load(&b.waits_ended) == 5ull << 32);
}

/* A limits file's wait word, however corrupt, bounds the wait: 0 is the default,
 * anything past a minute is a minute. */
static void test_balloon_wait_bound(void)
{
    CHECK(balloon_wait_ms(0) == TESSERA_BALLOON_DEFAULT_WAIT_MS);
    CHECK(balloon_wait_ms(1) == 1);
    CHECK(balloon_wait_ms(60000) == 60000);
    CHECK(balloon_wait_ms(60001) == 60000);
    CHECK(balloon_wait_ms(UINT64_MAX) == 60000);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/hook-unit-XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return 2;
    hook_log_threshold = -1; /* the tests provoke errors on purpose */
    test_once();
    test_config();
    test_bad_files();
    test_proc_identity();
    test_limiter();
    test_region_claim_exec_and_reuse();
    test_seq_words();
    test_table();
    test_table_ranges_owners_and_vmm();
    test_sizes();
    test_pacing();
    test_inflight_wait_bound();
    test_balloon_wait_bound();
    test_balloon_wait_histogram();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        failures++;
    if (failures) {
        fprintf(stderr, "hook unit tests: %d failures\n", failures);
        return 1;
    }
    printf("hook unit tests: ok\n");
    return 0;
}
