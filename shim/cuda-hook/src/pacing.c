/* pacing.c — see pacing.h. Lock-free: every word is shared by all processes of the
 * container (fork/exec children too) and changed by CAS or atomic add only, so a
 * process killed at any instruction leaves the bucket usable. */
#include "pacing.h"

#include <stdatomic.h>
#include <time.h>

uint32_t pacing_rate(uint64_t grant, uint64_t heartbeat_ns, uint64_t policy, uint32_t share_pct, uint64_t now)
{
    bool fresh = (grant & TESSERA_GRANT_ARBITRATED) != 0 &&
                 (now < heartbeat_ns || now - heartbeat_ns < TESSERA_HEARTBEAT_STALE_NS);
    if (fresh) {
        /* A turn past its deadline stops, whatever its rate: the arbiter is
         * late to hand it on. No clock read of its own: `now` is the burst's. */
        uint64_t until_us = (grant >> TESSERA_GRANT_UNTIL_SHIFT) & TESSERA_GRANT_UNTIL_US_MAX;
        if (until_us != 0 && now >= heartbeat_ns && now - heartbeat_ns >= until_us * 1000u)
            return 0;
        uint64_t r = grant & TESSERA_GRANT_RATE_MASK;
        if (r == TESSERA_GRANT_UNPACED)
            return PACING_UNPACED;
        return (uint32_t)(r > TESSERA_GRANT_PPM_MAX ? TESSERA_GRANT_PPM_MAX : r);
    }
    if (policy == TESSERA_POLICY_HARD && share_pct > 0 && share_pct < 100)
        return share_pct * 10000u;
    return PACING_UNPACED;
}

static int64_t clamp_tokens(int64_t t)
{
    if (t > PACING_BUCKET_NS)
        return PACING_BUCKET_NS;
    if (t < -PACING_DEBT_NS)
        return -PACING_DEBT_NS;
    return t;
}

static void add_tokens(tessera_device_compute *c, int64_t delta)
{
    uint64_t cur = atomic_load_explicit(&c->tokens_ns, memory_order_relaxed);
    for (;;) {
        uint64_t next = (uint64_t)clamp_tokens((int64_t)cur + delta);
        if (next == cur || atomic_compare_exchange_weak(&c->tokens_ns, &cur, next))
            return;
    }
}

void pacing_refill(tessera_device_compute *c, uint32_t rate, uint64_t now)
{
    uint64_t last = atomic_load_explicit(&c->refill_ns, memory_order_relaxed);
    if (now <= last || !atomic_compare_exchange_strong(&c->refill_ns, &last, now))
        return; /* another process refilled this interval */
    if (last == 0)
        return; /* first refill: the bucket starts empty */
    uint64_t dt = now - last;
    if (dt > 1000000000ull)
        dt = 1000000000ull; /* the bucket is full long before: no overflow */
    add_tokens(c, (int64_t)(dt * rate / 1000000u));
}

void pacing_charge(tessera_device_compute *c, uint64_t busy_ns)
{
    if (busy_ns > (uint64_t)PACING_DEBT_NS)
        busy_ns = (uint64_t)PACING_DEBT_NS;
    add_tokens(c, -(int64_t)busy_ns);
}

int64_t pacing_tokens(tessera_device_compute *c) { return (int64_t)atomic_load(&c->tokens_ns); }

uint64_t pacing_wait_ns(int64_t tokens, uint32_t rate)
{
    const uint64_t min = 50000, max = 2000000; /* re-read the grant at least every 2 ms */
    if (rate == 0)
        return PACING_POLL_NS; /* stopped: the arbiter may hand the turn back any moment */
    if (tokens >= 0)
        return 0;
    uint64_t w = (uint64_t)(-tokens) * 1000000u / rate;
    return w < min ? min : w > max ? max : w;
}

uint64_t pacing_inflight_bound_ns(uint64_t expect_ns)
{
    uint64_t b = expect_ns > PACING_INFLIGHT_MAX_NS / 8 ? PACING_INFLIGHT_MAX_NS : 8 * expect_ns;
    return b < PACING_INFLIGHT_MIN_NS ? PACING_INFLIGHT_MIN_NS : b;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool pacing_wait_bounded(int (*done)(void *), void *arg, uint64_t bound_ns, _Atomic uint64_t *demand)
{
    uint64_t start = mono_ns(), stamped = start, nap = 20000;
    for (;;) {
        if (done(arg))
            return true;
        uint64_t now = mono_ns();
        /* Stamped before the bound is judged: one nap the OS stretched past
         * the whole bound (a loaded node) was still a wait. */
        if (demand != NULL && now - stamped >= 1000000) {
            atomic_store_explicit(demand, now, memory_order_relaxed);
            stamped = now;
        }
        if (now - start >= bound_ns)
            return false;
        nanosleep(&(struct timespec){0, (long)nap}, NULL);
        if (nap < 200000)
            nap += nap / 2;
    }
}
