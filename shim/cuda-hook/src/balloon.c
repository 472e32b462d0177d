/* balloon.c — an owner whose cap was lowered waits for its memory to come back.
 *
 * The wait publishes itself in the region's balloon[idx] (tessera_abi.h), so the node
 * agent sees which container needs how much, and polls the cap with a short backoff.
 * It holds no lock (charge_admit is called with none held) and keeps nothing in
 * shared memory that a SIGKILL mid-wait could leave blocking anyone: a dead waiter
 * leaves `waiters` one too high and a stale request, which the node agent clears once
 * no waiter has stamped `poll_ns` for seconds (live ones stamp it every poll). A live
 * waiter cleared by mistake counts itself again at its next poll, and leaving never
 * takes `waiters` below zero. */
#include "balloon.h"

#include <stdatomic.h>
#include <time.h>

#include "limiter.h"
#include "log.h"

#define BALLOON_MAX_WAIT_MS 60000u
#define BALLOON_POLL_MIN_US 200u
#define BALLOON_POLL_MAX_US 5000u

uint64_t balloon_wait_ms(uint64_t word)
{
    if (word == 0)
        return TESSERA_BALLOON_DEFAULT_WAIT_MS;
    return word > BALLOON_MAX_WAIT_MS ? BALLOON_MAX_WAIT_MS : word;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void raise_to(_Atomic uint64_t *w, uint64_t v)
{
    uint64_t cur = atomic_load(w);
    while (cur < v && !atomic_compare_exchange_weak(w, &cur, v))
        ;
}

/* One waiter leaves: 1 when it was the last (or the count was cleared under it). */
static int leave(_Atomic uint64_t *waiters)
{
    uint64_t cur = atomic_load(waiters);
    while (cur > 0 && !atomic_compare_exchange_weak(waiters, &cur, cur - 1))
        ;
    return cur <= 1;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000u), .tv_nsec = (long)(us % 1000000u) * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t word(const tessera_limits *l, int idx, int w)
{
    return __atomic_load_n(&l->devices[idx].balloon_words[w], __ATOMIC_ACQUIRE);
}

/* Raises the lane of `bits` bits at `shift` in *w by one, modulo its width: a
 * compare-and-swap of the whole word, so a full lane wraps to 0 instead of carrying
 * into its neighbour. */
static void lane_add(_Atomic uint64_t *w, unsigned shift, unsigned bits)
{
    uint64_t mask = (bits >= 64 ? ~0ull : ((1ull << bits) - 1u)) << shift;
    uint64_t cur = atomic_load(w), next;
    do {
        next = (cur & ~mask) | ((cur + (1ull << shift)) & mask);
    } while (!atomic_compare_exchange_weak(w, &cur, next));
}

static const uint64_t wait_bounds_us[TESSERA_BALLOON_WAIT_LANES - 1] = {
    TESSERA_BALLOON_WAIT_BOUND_US_0, TESSERA_BALLOON_WAIT_BOUND_US_1, TESSERA_BALLOON_WAIT_BOUND_US_2,
    TESSERA_BALLOON_WAIT_BOUND_US_3, TESSERA_BALLOON_WAIT_BOUND_US_4, TESSERA_BALLOON_WAIT_BOUND_US_5,
    TESSERA_BALLOON_WAIT_BOUND_US_6,
};

void balloon_count_wait(tessera_device_balloon *b, uint64_t waited_ns, int admitted)
{
    unsigned lane = 0;
    while (lane < TESSERA_BALLOON_WAIT_LANES - 1 && waited_ns > wait_bounds_us[lane] * 1000u)
        lane++;
    unsigned per_word = 64 / TESSERA_BALLOON_WAIT_LANE_BITS;
    lane_add(&b->wait_hist[lane / per_word], (lane % per_word) * TESSERA_BALLOON_WAIT_LANE_BITS,
             TESSERA_BALLOON_WAIT_LANE_BITS);
    lane_add(&b->waits_ended, admitted ? 0 : 32, 32);
}

/* Poll until admitted, the balloon is gone, or the deadline passes. */
static int poll_cap(const tessera_limits *l, tessera_device_balloon *b, int idx, uint64_t n, uint64_t start,
                    uint64_t deadline)
{
    uint64_t pause = BALLOON_POLL_MIN_US;
    for (;;) {
        uint64_t since = 0, none = 0;
        atomic_store(&b->poll_ns, now_ns());
        atomic_compare_exchange_strong(&b->waiters, &none, 1); /* cleared under us: show up again */
        raise_to(&b->want_bytes, limiter_usage(idx) + n);
        atomic_compare_exchange_strong(&b->wait_since_ns, &since, start);
        int rc = limiter_try(idx, n);
        if (rc != LIMITER_OVER_CAP)
            return rc;
        uint64_t now = now_ns();
        if (now >= deadline || word(l, idx, TESSERA_BALLOON_CEILING) == 0)
            return LIMITER_OVER_CAP; /* out of time, or deflated and still over: at the real cap */
        uint64_t left_us = (deadline - now) / 1000u + 1;
        sleep_us(pause < left_us ? pause : left_us);
        pause = pause * 2 > BALLOON_POLL_MAX_US ? BALLOON_POLL_MAX_US : pause * 2;
    }
}

int balloon_wait(const char *api, int idx, uint64_t n)
{
    const tessera_limits *l = limiter_limits();
    tessera_region *r = limiter_region();
    if (l == NULL || r == NULL || idx < 0)
        return LIMITER_OVER_CAP;
    uint64_t ceiling = word(l, idx, TESSERA_BALLOON_CEILING);
    uint64_t usage = limiter_usage(idx);
    if (ceiling == 0 || n > ceiling || usage > ceiling - n)
        return LIMITER_OVER_CAP; /* not ballooned, or beyond what the container was given */
    uint64_t wait_ms = balloon_wait_ms(word(l, idx, TESSERA_BALLOON_WAIT_MS));
    tessera_device_balloon *b = &r->balloon[idx];
    uint64_t start = now_ns();
    atomic_fetch_add(&b->waiters, 1);
    hook_log(HOOK_LOG_INFO, "%s: %llu bytes over the lowered cap %llu on device %d (ceiling %llu); waiting up to "
                            "%llu ms for the node to reclaim", api, (unsigned long long)n,
             (unsigned long long)limiter_cap(idx), idx, (unsigned long long)ceiling, (unsigned long long)wait_ms);
    int rc = poll_cap(l, b, idx, n, start, start + wait_ms * 1000000ull);
    uint64_t waited = now_ns() - start;
    atomic_fetch_add(&b->wait_ns_total, waited);
    balloon_count_wait(b, waited, rc == LIMITER_OK);
    if (leave(&b->waiters)) {
        /* The last waiter clears the request; a racing new waiter re-asserts it. */
        uint64_t want = atomic_load(&b->want_bytes), since = atomic_load(&b->wait_since_ns);
        atomic_compare_exchange_strong(&b->want_bytes, &want, 0);
        atomic_compare_exchange_strong(&b->wait_since_ns, &since, 0);
    }
    hook_log(HOOK_LOG_INFO, "%s: waited %llu us on device %d: %s", api, (unsigned long long)(waited / 1000u), idx,
             rc == LIMITER_OK ? "admitted" : "the node did not reclaim in time");
    return rc;
}
