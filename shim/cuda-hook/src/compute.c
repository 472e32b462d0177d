/* compute.c — bursts, events and the grant; see compute.h and docs/hook.md
 * "Compute time slices". Per-thread state only (no lock): each thread brackets
 * its own launches with its own events, one set per context it launches in
 * (a thread may drive several GPUs in turn without waiting for one to switch
 * to the other). Container-wide words live in the core
 * region and are changed by atomic add or CAS (pacing.c). */
#include "compute.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accounting.h"
#include "launch_types.h"
#include "log.h"
#include "pacing.h"
#include "real.h"
#include "region.h"
#include "glibc_baseline.h"

/* Thread-exit destructors: before glibc 2.34 pthread keys lived in libpthread
 * only, which the hook does not link (include/glibc_baseline.h); weak, at the
 * base version, and used only when resolved — any process with a CUDA driver
 * loaded has libpthread (the driver needs it). */
__asm__(".symver pthread_key_create,pthread_key_create@" GLIBC_BASELINE_VERSION);
__asm__(".symver pthread_setspecific,pthread_setspecific@" GLIBC_BASELINE_VERSION);
#pragma weak pthread_key_create
#pragma weak pthread_setspecific

#define MAX_ORDINALS 64
#define COMPUTE_DEPTH 2               /* bursts of one thread in flight at most */
#define SOLO_DEPTH 8                  /* ... while no other tenant is active on the GPU */
#define RING (SOLO_DEPTH + 1)         /* + the open one */
#define BURST_GPU_NS 500000ull        /* aim: ~0.5 ms of GPU work per burst */
#define BURST_WALL_NS 1000000ull      /* close a burst after 1 ms of wall time */
#define MAX_BURST_LAUNCHES 4096u
#define CTX_SLOTS 4                   /* contexts one thread keeps events in at once */
#define SEQ_GRACE_NS 2000000ull       /* a sequence's word expires this long after its work should be done */
#define SWEEP_EVERY_NS 2000000ull     /* how often a process looks for expired words */
#define UNMEASURED_AHEAD_NS 25000000ull /* work in flight assumed before a burst is measured */

bool compute_enabled;

static const tessera_limits *g_limits;
static tessera_region *g_region;
/* This process's part of each device's region `inflight` count held by
 * sequences without a word of their own (all words taken): what an exit takes
 * back (a thread's exit accounts its own; the rest leaves with the process,
 * whose queued work the driver drops). Counts held by words are taken back
 * through the words (tessera_abi.h, "Launch sequences"). */
static _Atomic uint64_t g_proc_inflight[TESSERA_MAX_DEVICES];
/* This process's slot in the core region, whose seq_until[] words its
 * sequences hold: SLOT_NONE until the first is needed, SLOT_FAILED when every
 * slot belonged to a live process (then counts are held without words). */
#define SLOT_NONE (-1)
#define SLOT_FAILED (-2)
static _Atomic int g_cslot = SLOT_NONE;
static pthread_mutex_t g_cslot_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_cslot_pid;
static _Atomic uint32_t g_words_taken; /* bit k: seq_until[k] is some thread's */
static _Atomic uint64_t g_next_sweep;
static _Atomic int g_ordinal_idx[MAX_ORDINALS]; /* index + 2; 1 = unmanaged; 0 = unresolved */
/* Bumped by a fork (in the child) and by every context's end (destroy, primary
 * reset or last release); a thread whose epoch differs catches up before it
 * touches its events again (catch_up). */
static _Atomic uint64_t g_epoch;
static _Atomic uint64_t g_fork_epoch; /* the epoch of the last fork */
#define GONE_RING 16
static struct {
    _Atomic uint64_t epoch; /* which bump wrote this entry */
    _Atomic uintptr_t ctx;  /* the context that ended; 0: not known */
} g_gone[GONE_RING];

struct burst {
    CUevent start, end;
    uint32_t launches;
    uint32_t beside; /* the container's sequences in flight when it opened */
};

/* One thread's bursts in one context. */
struct ctx_state {
    CUcontext ctx;       /* the events belong to this context; NULL: slot free */
    int idx;             /* core-limits entry of its device, -1 unmanaged */
    bool events;         /* ring events created */
    bool open;           /* ring[head] is open on stream */
    CUstream stream;
    uint64_t opened_ns;
    uint32_t head, count; /* count: closed bursts in flight, ring[(head - count) ..] */
    bool live;            /* counted in the region's `inflight` (open or count > 0) */
    uint8_t word;         /* 1 + its seq_until[] word in the process's core slot; 0: none */
    uint32_t target;      /* launches per burst */
    uint32_t measured;    /* bursts accounted so far (up to SOLO_DEPTH) */
    uint64_t per_launch_ns;  /* GPU time per launch: average */
    uint64_t peak_launch_ns; /* ... and a decaying peak: bursts are sized by it, so that
                              * mixed kernel sizes cannot queue many long ones at once */
    struct burst ring[RING];
};

struct thread_state {
    uint64_t epoch;         /* g_epoch this state is current with */
    struct ctx_state *cur;  /* the slot of the context of the last launch */
    uint32_t evict;         /* next slot to reuse when all are taken */
    bool exit_armed;        /* thread_exit registered */
    struct ctx_state slots[CTX_SLOTS];
};

static _Thread_local struct thread_state thr;

/* Its destructor accounts what an exiting thread left in flight and frees its
 * events (thread_exit); its value is only a non-NULL marker. */
static pthread_key_t g_exit_key;
static bool g_exit_key_ok;
static void thread_exit(void *unused);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool managed_pct(uint32_t pct) { return pct > 0 && pct < 100; }

static void inflight_inc(int idx)
{
    atomic_fetch_add_explicit(&g_region->compute[idx].inflight, 1, memory_order_relaxed);
}

/* This process's slot in the core region, claimed at the first need; NULL
 * when none could be had. */
static tessera_proc_slot *core_slot(void)
{
    int slot = atomic_load_explicit(&g_cslot, memory_order_acquire);
    if (__builtin_expect(slot >= 0, 1))
        return &g_region->slots[slot];
    if (slot == SLOT_FAILED)
        return NULL;
    pthread_mutex_lock(&g_cslot_mu);
    slot = atomic_load(&g_cslot);
    if (slot == SLOT_NONE) {
        uint64_t start = 0;
        bool zombie;
        g_cslot_pid = (uint32_t)getpid();
        if (proc_identity((pid_t)g_cslot_pid, &start, &zombie) != 0)
            start = 0;
        slot = region_claim(g_region, g_cslot_pid, start);
        if (slot < 0) {
            slot = SLOT_FAILED;
            hook_log(HOOK_LOG_WARN, "compute: no free slot in the core region; a thread that stops "
                                    "launching keeps its work counted in flight until it launches again");
        }
        atomic_store_explicit(&g_cslot, slot, memory_order_release);
    }
    pthread_mutex_unlock(&g_cslot_mu);
    return slot >= 0 ? &g_region->slots[slot] : NULL;
}

/* 1 + a free seq_until[] word of this process; 0 when all are taken. */
static uint8_t take_word(void)
{
    if (core_slot() == NULL)
        return 0;
    uint32_t cur = atomic_load_explicit(&g_words_taken, memory_order_relaxed);
    for (;;) {
        int k = 0;
        while (k < TESSERA_SEQ_RECORDS && (cur & (1u << k)))
            k++;
        if (k == TESSERA_SEQ_RECORDS)
            return 0;
        if (atomic_compare_exchange_weak(&g_words_taken, &cur, cur | (1u << k)))
            return (uint8_t)(k + 1);
    }
}

/* Where cs's count is held, from one reading of the process's slot (exit
 * may give the slot back at any moment; two readings could disagree). */
enum word_state {
    WORD_NONE, /* no word: the count is held in g_proc_inflight too */
    WORD_HELD, /* *w is its word */
    WORD_GONE, /* its word's slot was given back at exit, which expired it */
};

static enum word_state word_of(const struct ctx_state *cs, _Atomic uint64_t **w)
{
    *w = NULL;
    if (cs->word == 0)
        return WORD_NONE;
    int slot = atomic_load_explicit(&g_cslot, memory_order_relaxed);
    if (slot < 0)
        return WORD_GONE;
    *w = &g_region->slots[slot].seq_until[cs->word - 1];
    return WORD_HELD;
}

static uint64_t word_value(int idx, uint64_t until)
{
    uint64_t v = until & ~TESSERA_SEQ_DEV_MASK;
    return (v != 0 ? v : TESSERA_SEQ_DEV_MASK + 1) | (uint64_t)idx;
}

/* Counts cs in flight until `until` (a live sequence whose count was expired
 * counts itself again). */
static void seq_hold(struct ctx_state *cs, uint64_t until)
{
    if (!cs->live && cs->word == 0)
        cs->word = take_word();
    _Atomic uint64_t *w;
    enum word_state ws = word_of(cs, &w);
    if (ws == WORD_GONE) { /* nothing is counted for cs any more */
        cs->live = true;
        return;
    }
    if (ws == WORD_NONE) {
        if (!cs->live) {
            inflight_inc(cs->idx);
            atomic_fetch_add_explicit(&g_proc_inflight[cs->idx], 1, memory_order_relaxed);
        }
    } else if (atomic_exchange_explicit(w, word_value(cs->idx, until), memory_order_relaxed) == 0) {
        inflight_inc(cs->idx); /* new, or expired meanwhile */
    }
    cs->live = true;
}

/* Stops counting cs in flight and gives its word back: a sequence with
 * nothing in flight needs none, and one kept by an idle sequence (a pool's
 * thread that served one request) would leave a later sequence of the
 * process without a word, counted for good if its thread then waits. */
static void seq_drop(struct ctx_state *cs)
{
    _Atomic uint64_t *w;
    enum word_state ws = word_of(cs, &w);
    if (cs->live && ws != WORD_GONE) {
        if (ws == WORD_NONE) {
            region_dec_floor(&g_region->compute[cs->idx].inflight, 1);
            region_dec_floor(&g_proc_inflight[cs->idx], 1);
        } else if (atomic_exchange_explicit(w, 0, memory_order_relaxed) != 0) {
            region_dec_floor(&g_region->compute[cs->idx].inflight, 1);
        }
    }
    cs->live = false;
    if (cs->word > 0) {
        atomic_fetch_and(&g_words_taken, ~(1u << (cs->word - 1)));
        cs->word = 0;
    }
}

/* Expires the words of the container's sequences whose work should long be
 * done (a thread that went on to wait on the host, a process killed), at most
 * every SWEEP_EVERY_NS per process. */
static void sweep(uint64_t now)
{
    uint64_t next = atomic_load_explicit(&g_next_sweep, memory_order_relaxed);
    if (now < next || !atomic_compare_exchange_strong(&g_next_sweep, &next, now + SWEEP_EVERY_NS))
        return;
    uint32_t n = atomic_load_explicit(&g_region->slot_hwm, memory_order_relaxed);
    if (n > TESSERA_MAX_PROCS)
        n = TESSERA_MAX_PROCS;
    for (uint32_t i = 0; i < n; i++)
        region_expire_seqs(g_region, &g_region->slots[i], now);
}


bool compute_open(const tessera_limits *core_limits, tessera_region *core_region)
{
    g_limits = core_limits;
    g_region = core_region;
    if (core_limits == NULL || core_region == NULL)
        return false;
    for (uint32_t i = 0; i < core_limits->device_count; i++) {
        if (managed_pct(atomic_load(&core_limits->devices[i].core_limit_pct)))
            compute_enabled = true;
    }
    if (compute_enabled && &pthread_key_create != NULL && &pthread_setspecific != NULL)
        g_exit_key_ok = pthread_key_create(&g_exit_key, thread_exit) == 0;
    return compute_enabled;
}

/* Core-limits entry of an ordinal, by UUID; -1 when the share there is not
 * managed (none, or 100 %). */
static int ordinal_index(CUdevice dev)
{
    if (dev < 0 || dev >= MAX_ORDINALS)
        return -1;
    int c = atomic_load_explicit(&g_ordinal_idx[dev], memory_order_relaxed);
    if (c != 0)
        return c - 2;
    CUuuid u;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (REAL.cuDeviceGetUuid_v2 != NULL)
        r = REAL.cuDeviceGetUuid_v2(&u, dev);
    if (r != CUDA_SUCCESS && REAL.cuDeviceGetUuid != NULL)
        r = REAL.cuDeviceGetUuid(&u, dev);
    if (r != CUDA_SUCCESS)
        return -1; /* retried next time */
    char s[48];
    uuid_format(&u, s);
    int idx = -1;
    for (uint32_t i = 0; i < g_limits->device_count; i++) {
        if (strncmp(g_limits->devices[i].uuid, s, TESSERA_UUID_LEN) == 0 &&
            managed_pct(atomic_load(&g_limits->devices[i].core_limit_pct)))
            idx = (int)i;
    }
    atomic_store_explicit(&g_ordinal_idx[dev], idx + 2, memory_order_relaxed);
    return idx;
}

static struct burst *slot(struct ctx_state *cs, uint32_t i) { return &cs->ring[i % RING]; }

/* While another thread of the process captures a graph in GLOBAL mode, a
 * thread in the default capture interaction mode may not make "potentially
 * unsafe" calls: the hook's cuEventQuery at a burst's edge would fail and
 * invalidate that capture (the application's cuStreamEndCapture then returns
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), as PyTorch's NCCL watchdog did.
 * Around its own event calls the hook switches the thread to RELAXED and back
 * (burst edges only, never per launch). */
static CUstreamCaptureMode relax(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (REAL.cuThreadExchangeStreamCaptureMode == NULL || REAL.cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS)
        return CU_STREAM_CAPTURE_MODE_RELAXED;
    return m;
}

static void unrelax(CUstreamCaptureMode m)
{
    if (m != CU_STREAM_CAPTURE_MODE_RELAXED)
        REAL.cuThreadExchangeStreamCaptureMode(&m);
}

/* Keeps the region's count of the container's launch sequences with work in
 * flight (a thread's bursts in one context) in step with cs: counted until
 * `until` (0: keep the time it holds; a sequence that becomes live without
 * one is given SEQ_GRACE_NS from now). */
static void seq_update(struct ctx_state *cs, uint64_t until)
{
    bool live = cs->idx >= 0 && (cs->open || cs->count > 0);
    if (!live) {
        seq_drop(cs);
        return;
    }
    if (until == 0 && cs->live)
        return;
    seq_hold(cs, until != 0 ? until : now_ns() + SEQ_GRACE_NS);
}

/* The time by which cs's work in flight should be done, given `ahead` of it
 * from now at the measured pace (UNMEASURED_AHEAD_NS before any burst is
 * measured), with room for a GPU busier than measured. */
static uint64_t seq_until(const struct ctx_state *cs, uint64_t now, uint64_t ahead)
{
    return now + 2 * (cs->peak_launch_ns != 0 ? ahead : UNMEASURED_AHEAD_NS) + SEQ_GRACE_NS;
}

static int event_done(void *e) { return REAL.cuEventQuery((CUevent)e) != CUDA_ERROR_NOT_READY; }

/* Waits for an event, for a bounded time (pacing_inflight_bound_ns): false if
 * it is still pending then. A blocked tenant must not look idle to the
 * arbiter, so its demand is stamped first with when the wait should end (the
 * work in flight at the measured pace), then every millisecond. */
static bool wait_event(struct ctx_state *cs, CUevent e, tessera_device_compute *c)
{
    if (REAL.cuEventQuery(e) != CUDA_ERROR_NOT_READY)
        return true;
    uint64_t ahead = cs->peak_launch_ns * (slot(cs, cs->head + RING - cs->count)->launches + 1u);
    atomic_store_explicit(&c->demand_ns, now_ns() + (ahead < 1000000000ull ? ahead : 1000000000ull),
                          memory_order_relaxed);
    return pacing_wait_bounded(event_done, e, pacing_inflight_bound_ns(ahead), &c->demand_ns);
}

/* Accounts the oldest closed burst: its GPU time into the region and the bucket. */
static void account_oldest(struct ctx_state *cs, bool wait)
{
    struct burst *b = slot(cs, cs->head + RING - cs->count);
    if (wait && !wait_event(cs, b->end, &g_region->compute[cs->idx])) {
        /* Still running past the bound: no longer waited for nor billed
         * (its events are recorded again when the ring comes round, which
         * CUDA allows for a pending event). */
        static _Atomic int warned;
        if (!atomic_exchange(&warned, 1))
            hook_log(HOOK_LOG_WARN, "compute: a launch burst is still running after %llu ms; no longer waiting "
                                    "for it (work that waits on the host?)",
                     (unsigned long long)(pacing_inflight_bound_ns(cs->peak_launch_ns * b->launches) / 1000000));
        cs->count--;
        seq_update(cs, 0);
        return;
    }
    if (!wait && REAL.cuEventQuery(b->end) != CUDA_SUCCESS)
        return;
    float ms = 0;
    uint64_t busy = 0;
    if (REAL.cuEventElapsedTime(&ms, b->start, b->end) == CUDA_SUCCESS && ms > 0)
        busy = (uint64_t)((double)ms * 1e6);
    tessera_device_compute *c = &g_region->compute[cs->idx];
    /* Other launch sequences of the container in flight beside this one
     * (fork/exec'd children, other threads) shared the GPU's time slices
     * with it, and its events measured their slices too: each is billed its
     * part, so the container is billed the time once. */
    /* Sampled when it opened and now (a sibling may have started or drained
     * meanwhile). */
    uint64_t beside = atomic_load_explicit(&c->inflight, memory_order_relaxed) + b->beside;
    if (beside > 2)
        busy = busy * 2 / beside;
    cs->count--;
    seq_update(cs, 0);
    atomic_fetch_add_explicit(&c->busy_ns, busy, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->launches, b->launches, memory_order_relaxed);
    pacing_charge(c, busy);
    /* Size the next bursts to about BURST_GPU_NS of work at the peak pace,
     * growing at most twofold a burst: a first burst of short kernels says
     * nothing of the long ones after them (mixed sizes: 10 launches sized
     * by a 50 us kernel held 28 ms of work). */
    uint64_t per = b->launches ? busy / b->launches : busy;
    cs->per_launch_ns = cs->per_launch_ns == 0 ? per : (cs->per_launch_ns * 3 + per) / 4;
    cs->peak_launch_ns = per > cs->peak_launch_ns ? per : cs->peak_launch_ns - cs->peak_launch_ns / 16;
    uint64_t n = cs->peak_launch_ns ? BURST_GPU_NS / cs->peak_launch_ns : MAX_BURST_LAUNCHES;
    if (n > 2ull * cs->target)
        n = 2ull * cs->target;
    cs->target = n < 1 ? 1 : n > MAX_BURST_LAUNCHES ? MAX_BURST_LAUNCHES : (uint32_t)n;
    if (cs->measured < SOLO_DEPTH)
        cs->measured++;
}

/* Accounts whatever of cs finished, without waiting. */
static void account_done(struct ctx_state *cs)
{
    while (cs->count > 0) {
        uint32_t before = cs->count;
        account_oldest(cs, false);
        if (cs->count == before)
            break;
    }
}

/* A stream being captured into a graph runs nothing now (the graph's launch is
 * what counts), and an event recorded or queried there would change or
 * invalidate the capture. */
static bool capturing(CUstream s)
{
    int status = 0;
    return REAL.cuStreamIsCapturing != NULL && REAL.cuStreamIsCapturing(s, &status) == CUDA_SUCCESS && status != 0;
}

/* Closes cs's open burst; its context must be current (a NULL stream names the
 * current context's). */
static void close_burst(struct ctx_state *cs)
{
    if (!cs->open)
        return;
    if (capturing(cs->stream)) {
        /* Capture began on its stream since it opened: its end cannot be
         * recorded there; the burst is dropped unaccounted. */
        cs->open = false;
        seq_update(cs, 0);
        return;
    }
    REAL.cuEventRecord(slot(cs, cs->head)->end, cs->stream);
    cs->open = false;
    cs->head++;
    cs->count++;
}

/* Bills what cs has in flight, polling (a hung kernel must not hang a thread's
 * exit: after 1 s what is left goes unbilled; destroying a pending event is
 * allowed), and destroys its events. Its context must be current. */
static void retire(struct ctx_state *cs)
{
    if (cs->idx >= 0) {
        close_burst(cs);
        for (uint64_t give_up = now_ns() + 1000000000ull; cs->count > 0 && now_ns() < give_up;) {
            if (REAL.cuEventQuery(slot(cs, cs->head + RING - cs->count)->end) == CUDA_ERROR_NOT_READY)
                nanosleep(&(struct timespec){0, 100000}, NULL);
            else
                account_oldest(cs, true); /* done, or failed (then billed 0): no wait */
        }
    }
    if (cs->events) {
        for (int i = 0; i < RING; i++) {
            REAL.cuEventDestroy_v2(cs->ring[i].start);
            REAL.cuEventDestroy_v2(cs->ring[i].end);
        }
    }
    seq_drop(cs); /* what did not complete within the bound */
    memset(cs, 0, sizeof *cs);
}

/* Runs f on cs with cs's context current, then makes back current again. */
static void in_context(struct ctx_state *cs, CUcontext back, void (*f)(struct ctx_state *))
{
    bool switched = back != cs->ctx && REAL.cuCtxSetCurrent != NULL && REAL.cuCtxSetCurrent(cs->ctx) == CUDA_SUCCESS;
    f(cs);
    if (switched)
        REAL.cuCtxSetCurrent(back);
}

/* Brings this thread's state up to epoch ep: after a fork everything is the
 * parent's; after a context's end, events in that context are gone (a reset
 * primary context even keeps its handle, so cuCtxGetCurrent alone cannot tell)
 * and are forgotten, never destroyed: their handles may name others' events. */
static void catch_up(uint64_t ep)
{
    if (thr.epoch < atomic_load(&g_fork_epoch)) {
        memset(&thr, 0, sizeof thr);
        thr.epoch = ep;
        return;
    }
    for (uint64_t e = thr.epoch + 1; e <= ep; e++) {
        uint64_t written = atomic_load_explicit(&g_gone[e % GONE_RING].epoch, memory_order_acquire);
        if (written < e)
            return; /* still being written: look again at the next launch */
        uintptr_t ctx = atomic_load_explicit(&g_gone[e % GONE_RING].ctx, memory_order_relaxed);
        for (int i = 0; i < CTX_SLOTS; i++) {
            struct ctx_state *cs = &thr.slots[i];
            /* Overwritten (more than GONE_RING ends since) or unknown: assume ours. */
            if (cs->ctx != NULL && (written > e || ctx == 0 || ctx == (uintptr_t)cs->ctx)) {
                seq_drop(cs);
                memset(cs, 0, sizeof *cs);
            }
        }
        thr.epoch = e;
    }
}

static bool state_current(void)
{
    return thr.epoch == atomic_load_explicit(&g_epoch, memory_order_relaxed);
}

void compute_context_gone(CUcontext ctx)
{
    if (!compute_enabled)
        return;
    uint64_t e = atomic_fetch_add(&g_epoch, 1) + 1;
    atomic_store_explicit(&g_gone[e % GONE_RING].ctx, (uintptr_t)ctx, memory_order_relaxed);
    atomic_store_explicit(&g_gone[e % GONE_RING].epoch, e, memory_order_release);
}

/* A slot for ctx (this thread has none yet): a free one, else the next in
 * turn, whose work is billed first. */
static struct ctx_state *new_slot(CUcontext ctx)
{
    for (int i = 0; i < CTX_SLOTS; i++) {
        if (thr.slots[i].ctx == NULL)
            return &thr.slots[i];
    }
    struct ctx_state *cs = &thr.slots[thr.evict++ % CTX_SLOTS];
    in_context(cs, ctx, retire);
    return cs;
}

static bool switch_context(struct ctx_state *cs, CUcontext ctx);

/* This thread's state for the current context (thr.cur); false: launch unmanaged. */
static bool bind_context(void)
{
    uint64_t ep = atomic_load_explicit(&g_epoch, memory_order_relaxed);
    if (__builtin_expect(thr.epoch != ep, 0)) {
        catch_up(ep);
        if (thr.epoch != ep)
            return false; /* an end being published: this launch passes unmanaged */
    }
    CUcontext ctx = NULL;
    if (REAL.cuCtxGetCurrent == NULL || REAL.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL)
        return false;
    struct ctx_state *cs = thr.cur;
    if (__builtin_expect(cs != NULL && ctx == cs->ctx, 1))
        return cs->idx >= 0;
    CUstreamCaptureMode mode = relax();
    bool ok = switch_context(cs, ctx);
    unrelax(mode);
    return ok;
}

/* The thread launches in ctx, not in cs's context (cs: NULL or the last):
 * finds or makes its slot. */
static bool switch_context(struct ctx_state *cs, CUcontext ctx)
{
    /* The last context's open burst ends here (in its own context); what it
     * has in flight stays counted for when the thread comes back. */
    if (cs != NULL && cs->ctx != NULL && cs->open)
        in_context(cs, ctx, close_burst);
    thr.cur = NULL;
    for (int i = 0; i < CTX_SLOTS; i++) {
        if (thr.slots[i].ctx == ctx)
            thr.cur = &thr.slots[i];
    }
    if (thr.cur != NULL)
        return thr.cur->idx >= 0;
    cs = new_slot(ctx);
    thr.cur = cs;
    cs->ctx = ctx;
    CUdevice dev;
    cs->idx = REAL.cuCtxGetDevice(&dev) == CUDA_SUCCESS ? ordinal_index(dev) : -1;
    if (cs->idx < 0)
        return false;
    for (int i = 0; i < RING; i++) {
        if (REAL.cuEventCreate(&cs->ring[i].start, 0) != CUDA_SUCCESS ||
            REAL.cuEventCreate(&cs->ring[i].end, 0) != CUDA_SUCCESS) {
            hook_log(HOOK_LOG_WARN, "compute: cannot create timing events; launches on this thread are not paced");
            cs->idx = -1;
            return false;
        }
    }
    cs->events = true;
    cs->target = 1;
    if (g_exit_key_ok && !thr.exit_armed)
        thr.exit_armed = pthread_setspecific(g_exit_key, &thr) == 0;
    return true;
}

/* A thread that exits (a thread per request) would leave its open bursts and
 * those in flight unaccounted — all of its work, when it launched only a few
 * kernels — and its events allocated for the life of their contexts. Its work
 * is billed and its events destroyed. */
static void thread_exit(void *unused)
{
    (void)unused;
    uint64_t ep = atomic_load(&g_epoch);
    if (thr.epoch != ep)
        catch_up(ep);
    if (thr.epoch != ep)
        return;
    CUcontext cur = NULL;
    if (REAL.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
        cur = NULL;
    CUstreamCaptureMode mode = relax();
    for (int i = 0; i < CTX_SLOTS; i++) {
        if (thr.slots[i].ctx != NULL)
            in_context(&thr.slots[i], cur, retire);
    }
    unrelax(mode);
    thr.cur = NULL;
}

/* Waits while the container's grant leaves no tokens, accounting this
 * thread's bursts as they complete: a stopped holder's drained work is what
 * lets the arbiter hand its turn on (`inflight`). Returns the time it last
 * read (now when it did not wait). */
static uint64_t pace(struct ctx_state *cs, tessera_device_compute *c, uint64_t now)
{
    const tessera_device_limit *l = &g_limits->devices[cs->idx];
    uint64_t waited = 0;
    for (;;) {
        uint32_t rate = pacing_rate(atomic_load_explicit(&l->compute_grant, memory_order_acquire),
                                    atomic_load_explicit(&l->compute_heartbeat_ns, memory_order_relaxed),
                                    atomic_load_explicit(&l->compute_policy, memory_order_relaxed),
                                    atomic_load_explicit(&l->core_limit_pct, memory_order_relaxed), now);
        atomic_store_explicit(&c->demand_ns, now, memory_order_relaxed);
        if (rate == PACING_UNPACED)
            break;
        int64_t tokens = 0;
        if (rate > 0) { /* grant 0 stops the container whatever it banked */
            pacing_refill(c, rate, now);
            if ((tokens = pacing_tokens(c)) > 0)
                break;
        }
        account_done(cs);
        uint64_t w = pacing_wait_ns(tokens, rate);
        struct timespec ts = {(time_t)(w / 1000000000ull), (long)(w % 1000000000ull)};
        nanosleep(&ts, NULL);
        uint64_t after = now_ns();
        waited += after - now;
        now = after;
    }
    if (waited > 0) {
        atomic_fetch_add_explicit(&c->throttled_ns, waited, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->throttle_waits, 1, memory_order_relaxed);
    }
    return now;
}

static void open_burst(struct ctx_state *cs, CUstream s);

/* The GPU time cs's bursts in flight and `more` launches should take, at the
 * measured peak per launch (at most a second: the arbiter reads no further
 * ahead). */
static uint64_t inflight_ahead_ns(struct ctx_state *cs, uint32_t more)
{
    uint64_t launches = more;
    for (uint32_t i = 1; i <= cs->count; i++)
        launches += slot(cs, cs->head + RING - i)->launches;
    uint64_t ahead = cs->peak_launch_ns * launches;
    return ahead < 1000000000ull ? ahead : 1000000000ull;
}

void compute_admit_slow(CUstream s, bool per_thread)
{
    if (per_thread && s == NULL)
        s = HOOK_STREAM_PER_THREAD;
    if (!bind_context())
        return;
    struct ctx_state *cs = thr.cur;
    /* The common case: one more launch into the open burst. The clock is read
     * every 8th launch only (a burst's wall-time bound need not be exact). */
    struct burst *open = slot(cs, cs->head);
    if (cs->open && s == cs->stream && open->launches < cs->target &&
        ((open->launches & 7u) != 0 || now_ns() - cs->opened_ns < BURST_WALL_NS)) {
        open->launches++;
        return;
    }
    if (capturing(s))
        return;
    CUstreamCaptureMode mode = relax();
    open_burst(cs, s);
    unrelax(mode);
}

/* Closes cs's open burst, accounts what finished, waits while too much is in
 * flight or the grant says stop, and opens a burst on s. */
static void open_burst(struct ctx_state *cs, CUstream s)
{
    uint64_t now = now_ns();
    sweep(now);
    close_burst(cs);
    /* Account whatever finished; then bound the work in flight: the burst
     * launched COMPUTE_DEPTH bursts ago must be done before another opens. */
    account_done(cs);
    const tessera_device_limit *l = &g_limits->devices[cs->idx];
    /* In flight: 2 bursts beside others (one when a burst is 4 ms or more:
     * long kernels, whose tail would run into the next holder's turn),
     * deeper while alone — but never more than 2 long bursts: what a solo
     * tenant queued still runs when a higher priority arrives (8 bursts of
     * 10 ms kernels kept P2 on the GPU for 80 ms after P0 started). */
    /* Until the first burst is measured its kernels may be of any length:
     * as long ones; and the solo depth only once the burst size has been
     * measured a few times (8 unmeasured 10 ms kernels, or 8 bursts sized
     * by a first 50 us kernel, queued by a tenant alone ran for 80-200 ms
     * beside the next tenant to arrive). */
    bool solo = (atomic_load_explicit(&l->compute_grant, memory_order_relaxed) & TESSERA_GRANT_SOLO) != 0 &&
                cs->measured >= SOLO_DEPTH;
    bool long_bursts = cs->peak_launch_ns == 0 || (uint64_t)cs->peak_launch_ns * cs->target >= 8 * BURST_GPU_NS;
    uint32_t depth = long_bursts ? (solo ? 2 : 1) : solo ? SOLO_DEPTH : COMPUTE_DEPTH;
    if (cs->count >= depth) {
        while (cs->count >= depth)
            account_oldest(cs, true);
        now = now_ns(); /* that wait may have been a whole kernel long */
    }
    tessera_device_compute *c = &g_region->compute[cs->idx];
    now = pace(cs, c, now);
    struct burst *b = slot(cs, cs->head);
    b->launches = 1;
    REAL.cuEventRecord(b->start, s);
    cs->stream = s;
    cs->open = true;
    cs->opened_ns = now; /* read after any wait: the clock is not read again */
    uint64_t ahead = inflight_ahead_ns(cs, cs->target);
    /* Counted in flight until its work should be done, even if this thread
     * does not come back (it may go on to wait on the host for good). */
    seq_update(cs, seq_until(cs, now, ahead));
    b->beside = (uint32_t)atomic_load_explicit(&c->inflight, memory_order_relaxed);
    /* Until its work in flight should be done the tenant is not idle, even if
     * this thread does not come back meanwhile (host work between launches, a
     * process the OS does not run): the arbiter would otherwise hand its turn
     * on without waiting for that work to drain, and the two tenants' work
     * would share the GPU's time slices, each billed for the other's. */
    atomic_store_explicit(&c->demand_ns, cs->opened_ns + ahead, memory_order_relaxed);
}

/* The slot of the current context, if this thread has launched in it and its
 * state is current; NULL otherwise. */
static struct ctx_state *sync_slot(void)
{
    struct ctx_state *cs = thr.cur;
    if (cs == NULL || cs->ctx == NULL || cs->idx < 0 || !state_current())
        return NULL;
    CUcontext ctx = NULL;
    if (REAL.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx != cs->ctx)
        return NULL;
    return cs;
}

void compute_before_sync_slow(void)
{
    struct ctx_state *cs = sync_slot();
    if (cs != NULL) {
        CUstreamCaptureMode mode = relax();
        close_burst(cs);
        unrelax(mode);
        /* The driver's wait stamps nothing: not idle while it waits for
         * what is in flight (and counted in flight as long). */
        if (cs->count > 0) {
            uint64_t now = now_ns(), ahead = inflight_ahead_ns(cs, 0);
            atomic_store_explicit(&g_region->compute[cs->idx].demand_ns, now + ahead, memory_order_relaxed);
            seq_update(cs, seq_until(cs, now, ahead));
        }
    }
}

void compute_after_sync_slow(void)
{
    struct ctx_state *cs = sync_slot();
    if (cs != NULL && cs->count > 0) {
        CUstreamCaptureMode mode = relax();
        account_done(cs);
        unrelax(mode);
        /* All of it done: the stamp ahead for its work in flight (open_burst)
         * no longer applies; a tenant that synchronises and pauses goes idle
         * from now. */
        if (cs->count == 0 && !cs->open)
            atomic_store_explicit(&g_region->compute[cs->idx].demand_ns, now_ns(), memory_order_relaxed);
    }
}

void compute_atfork_child(void)
{
    atomic_store(&g_fork_epoch, atomic_fetch_add(&g_epoch, 1) + 1);
    /* The core slot and its words stay the parent's. */
    pthread_mutex_init(&g_cslot_mu, NULL);
    atomic_store(&g_cslot, SLOT_NONE);
    atomic_store(&g_words_taken, 0);
    for (int i = 0; i < TESSERA_MAX_DEVICES; i++)
        atomic_store(&g_proc_inflight[i], 0); /* the parent's bursts stay the parent's */
}

void compute_process_exit(void)
{
    if (!compute_enabled)
        return;
    for (int i = 0; i < TESSERA_MAX_DEVICES; i++) {
        uint64_t n = atomic_exchange(&g_proc_inflight[i], 0);
        if (n > 0)
            region_dec_floor(&g_region->compute[i].inflight, n);
    }
    /* A child made by the raw clone system call still holds its parent's
     * slot number: the slot is the parent's. */
    int slot = atomic_exchange(&g_cslot, SLOT_FAILED);
    if (slot >= 0 && (uint32_t)getpid() == g_cslot_pid)
        region_release(g_region, slot, g_cslot_pid); /* expires its words first */
}
