/* compute.c — bursts, events and the grant; see compute.h and docs/hook.md
 * "Compute time slices". Per-thread state only (no lock): each thread brackets
 * its own launches with its own events. Container-wide words live in the core
 * region and are changed by atomic add or CAS (pacing.c). */
#include "compute.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "accounting.h"
#include "launch_types.h"
#include "log.h"
#include "pacing.h"
#include "real.h"

#define MAX_ORDINALS 64
#define COMPUTE_DEPTH 2               /* bursts of one thread in flight at most */
#define SOLO_DEPTH 8                  /* ... while no other tenant is active on the GPU */
#define RING (SOLO_DEPTH + 1)         /* + the open one */
#define BURST_GPU_NS 500000ull        /* aim: ~0.5 ms of GPU work per burst */
#define BURST_WALL_NS 1000000ull      /* close a burst after 1 ms of wall time */
#define MAX_BURST_LAUNCHES 4096u

bool compute_enabled;

static const tessera_limits *g_limits;
static tessera_region *g_region;
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
};

struct thread_state {
    uint64_t epoch;      /* g_epoch this state is current with */
    CUcontext ctx;       /* the events belong to this context */
    int idx;             /* core-limits entry of its device, -1 unmanaged */
    bool events;         /* ring events created */
    bool open;           /* ring[head] is open on stream */
    CUstream stream;
    uint64_t opened_ns;
    uint32_t head, count; /* count: closed bursts in flight, ring[(head - count) ..] */
    uint32_t target;      /* launches per burst */
    uint64_t per_launch_ns;  /* GPU time per launch: average */
    uint64_t peak_launch_ns; /* ... and a decaying peak: bursts are sized by it, so that
                              * mixed kernel sizes cannot queue many long ones at once */
    struct burst ring[RING];
};

static _Thread_local struct thread_state t;

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
    if (compute_enabled)
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

static struct burst *slot(uint32_t i) { return &t.ring[i % RING]; }

/* Waits for an event. A blocked tenant must not look idle to the arbiter, so
 * its demand is stamped first with when the wait should end (the work in flight
 * at the measured pace). */
static void wait_event(CUevent e, tessera_device_compute *c)
{
    if (REAL.cuEventQuery(e) != CUDA_ERROR_NOT_READY)
        return;
    uint64_t ahead = t.peak_launch_ns * (slot(t.head + RING - t.count)->launches + 1u);
    atomic_store_explicit(&c->demand_ns, now_ns() + (ahead < 1000000000ull ? ahead : 1000000000ull),
                          memory_order_relaxed);
    REAL.cuEventSynchronize(e);
}

/* Accounts the oldest closed burst: its GPU time into the region and the bucket. */
static void account_oldest(bool wait)
{
    struct burst *b = slot(t.head + RING - t.count);
    if (wait)
        wait_event(b->end, &g_region->compute[t.idx]);
    else if (REAL.cuEventQuery(b->end) != CUDA_SUCCESS)
        return;
    float ms = 0;
    uint64_t busy = 0;
    if (REAL.cuEventElapsedTime(&ms, b->start, b->end) == CUDA_SUCCESS && ms > 0)
        busy = (uint64_t)((double)ms * 1e6);
    t.count--;
    tessera_device_compute *c = &g_region->compute[t.idx];
    atomic_fetch_add_explicit(&c->busy_ns, busy, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->launches, b->launches, memory_order_relaxed);
    pacing_charge(c, busy);
    /* Size the next bursts to about BURST_GPU_NS of work at the peak pace. */
    uint64_t per = b->launches ? busy / b->launches : busy;
    t.per_launch_ns = t.per_launch_ns == 0 ? per : (t.per_launch_ns * 3 + per) / 4;
    t.peak_launch_ns = per > t.peak_launch_ns ? per : t.peak_launch_ns - t.peak_launch_ns / 16;
    uint64_t n = t.peak_launch_ns ? BURST_GPU_NS / t.peak_launch_ns : MAX_BURST_LAUNCHES;
    t.target = n < 1 ? 1 : n > MAX_BURST_LAUNCHES ? MAX_BURST_LAUNCHES : (uint32_t)n;
}

/* A stream being captured into a graph runs nothing now (the graph's launch is
 * what counts), and an event recorded or queried there would change or
 * invalidate the capture. */
static bool capturing(CUstream s)
{
    int status = 0;
    return REAL.cuStreamIsCapturing != NULL && REAL.cuStreamIsCapturing(s, &status) == CUDA_SUCCESS && status != 0;
}

static void close_burst(void)
{
    if (!t.open)
        return;
    if (capturing(t.stream)) {
        /* Capture began on its stream since it opened: its end cannot be
         * recorded there; the burst is dropped unaccounted. */
        t.open = false;
        return;
    }
    REAL.cuEventRecord(slot(t.head)->end, t.stream);
    t.open = false;
    t.head++;
    t.count++;
}

/* Everything this thread has in flight, accounted (context switch, fork). */
static void drain(void)
{
    close_burst();
    while (t.count > 0)
        account_oldest(true);
}

static void destroy_events(void)
{
    if (!t.events)
        return;
    for (int i = 0; i < RING; i++) {
        REAL.cuEventDestroy_v2(t.ring[i].start);
        REAL.cuEventDestroy_v2(t.ring[i].end);
    }
    t.events = false;
}

/* Forgets this thread's events without destroying them: their context ended
 * and took them along; their handles may already name someone else's events. */
static void forget_events(void)
{
    t.events = false;
    t.ctx = NULL;
    t.idx = -1;
    t.open = false;
    t.count = 0;
}

/* Brings this thread's state up to epoch ep: after a fork everything is the
 * parent's; after a context's end, events in that context are gone (a reset
 * primary context even keeps its handle, so cuCtxGetCurrent alone cannot tell). */
static void catch_up(uint64_t ep)
{
    if (t.epoch < atomic_load(&g_fork_epoch)) {
        memset(&t, 0, sizeof t);
        t.epoch = ep;
        return;
    }
    for (uint64_t e = t.epoch + 1; e <= ep; e++) {
        uint64_t written = atomic_load_explicit(&g_gone[e % GONE_RING].epoch, memory_order_acquire);
        if (written < e)
            return; /* still being written: look again at the next launch */
        uintptr_t ctx = atomic_load_explicit(&g_gone[e % GONE_RING].ctx, memory_order_relaxed);
        /* Overwritten (more than GONE_RING ends since) or unknown: assume ours. */
        if (t.ctx != NULL && (written > e || ctx == 0 || ctx == (uintptr_t)t.ctx))
            forget_events();
        t.epoch = e;
    }
}

static bool state_current(void)
{
    return t.epoch == atomic_load_explicit(&g_epoch, memory_order_relaxed);
}

void compute_context_gone(CUcontext ctx)
{
    if (!compute_enabled)
        return;
    uint64_t e = atomic_fetch_add(&g_epoch, 1) + 1;
    atomic_store_explicit(&g_gone[e % GONE_RING].ctx, (uintptr_t)ctx, memory_order_relaxed);
    atomic_store_explicit(&g_gone[e % GONE_RING].epoch, e, memory_order_release);
}

/* This thread's state for the current context; false: launch unmanaged. */
static bool bind_context(void)
{
    uint64_t ep = atomic_load_explicit(&g_epoch, memory_order_relaxed);
    if (__builtin_expect(t.epoch != ep, 0)) {
        catch_up(ep);
        if (t.epoch != ep)
            return false; /* an end being published: this launch passes unmanaged */
    }
    CUcontext ctx = NULL;
    if (REAL.cuCtxGetCurrent == NULL || REAL.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL)
        return false;
    if (__builtin_expect(ctx == t.ctx, 1))
        return t.idx >= 0;
    if (t.ctx != NULL && t.idx >= 0)
        drain(); /* the old context's events; its work still counts */
    destroy_events();
    t.ctx = ctx;
    t.open = false;
    t.count = 0;
    CUdevice dev;
    t.idx = REAL.cuCtxGetDevice(&dev) == CUDA_SUCCESS ? ordinal_index(dev) : -1;
    if (t.idx < 0)
        return false;
    for (int i = 0; i < RING; i++) {
        if (REAL.cuEventCreate(&t.ring[i].start, 0) != CUDA_SUCCESS ||
            REAL.cuEventCreate(&t.ring[i].end, 0) != CUDA_SUCCESS) {
            hook_log(HOOK_LOG_WARN, "compute: cannot create timing events; launches on this thread are not paced");
            t.idx = -1;
            return false;
        }
    }
    t.events = true;
    t.target = 1;
    if (g_exit_key_ok)
        pthread_setspecific(g_exit_key, &t);
    return true;
}

/* A thread that exits (a thread per request) would leave its open burst and
 * those in flight unaccounted — all of its work, when it launched only a few
 * kernels — and its 2 x RING events allocated for the life of the context. Its
 * work is waited for (at most the bursts in flight) and billed, and its events
 * destroyed. */
static void thread_exit(void *unused)
{
    (void)unused;
    uint64_t ep = atomic_load(&g_epoch);
    if (t.epoch != ep)
        catch_up(ep);
    if (t.epoch != ep || !t.events || t.ctx == NULL)
        return;
    CUcontext cur = NULL;
    if (REAL.cuCtxSetCurrent != NULL && REAL.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != t.ctx)
        REAL.cuCtxSetCurrent(t.ctx); /* a NULL stream names the current context's */
    if (t.idx >= 0) {
        /* Polled, not synchronised: a hung kernel must not hang the thread's
         * exit; after 1 s what is left goes unbilled (destroying a pending
         * event is allowed). */
        close_burst();
        for (uint64_t give_up = now_ns() + 1000000000ull; t.count > 0 && now_ns() < give_up;) {
            if (REAL.cuEventQuery(slot(t.head + RING - t.count)->end) == CUDA_ERROR_NOT_READY)
                nanosleep(&(struct timespec){0, 100000}, NULL);
            else
                account_oldest(true); /* done, or failed (then billed 0): no wait */
        }
    }
    destroy_events();
}

/* Waits while the container's grant leaves no tokens. */
static void pace(tessera_device_compute *c, uint64_t now)
{
    const tessera_device_limit *l = &g_limits->devices[t.idx];
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
}

void compute_admit_slow(CUstream s, bool per_thread)
{
    if (per_thread && s == NULL)
        s = HOOK_STREAM_PER_THREAD;
    if (!bind_context())
        return;
    /* The common case: one more launch into the open burst. The clock is read
     * every 8th launch only (a burst's wall-time bound need not be exact). */
    struct burst *open = slot(t.head);
    if (t.open && s == t.stream && open->launches < t.target &&
        ((open->launches & 7u) != 0 || now_ns() - t.opened_ns < BURST_WALL_NS)) {
        open->launches++;
        return;
    }
    if (capturing(s))
        return;
    uint64_t now = now_ns();
    close_burst();
    /* Account whatever finished; then bound the work in flight: the burst
     * launched COMPUTE_DEPTH bursts ago must be done before another opens. */
    while (t.count > 0) {
        size_t before = t.count;
        account_oldest(false);
        if (t.count == before)
            break;
    }
    const tessera_device_limit *l = &g_limits->devices[t.idx];
    /* In flight: 2 bursts beside others (one when a burst is 4 ms or more:
     * long kernels, whose tail would run into the next holder's turn),
     * deeper while alone. */
    uint32_t depth = atomic_load_explicit(&l->compute_grant, memory_order_relaxed) & TESSERA_GRANT_SOLO ? SOLO_DEPTH
                     : (uint64_t)t.peak_launch_ns * t.target >= 8 * BURST_GPU_NS                      ? 1
                                                                                                      : COMPUTE_DEPTH;
    while (t.count >= depth)
        account_oldest(true);
    tessera_device_compute *c = &g_region->compute[t.idx];
    pace(c, now);
    struct burst *b = slot(t.head);
    b->launches = 1;
    REAL.cuEventRecord(b->start, s);
    t.stream = s;
    t.open = true;
    t.opened_ns = now_ns();
}

void compute_before_sync_slow(void)
{
    if (t.ctx != NULL && t.idx >= 0 && state_current())
        close_burst();
}

void compute_after_sync_slow(void)
{
    if (t.ctx == NULL || t.idx < 0 || !state_current())
        return;
    while (t.count > 0) {
        size_t before = t.count;
        account_oldest(false);
        if (t.count == before)
            break;
    }
}

void compute_atfork_child(void) { atomic_store(&g_fork_epoch, atomic_fetch_add(&g_epoch, 1) + 1); }
