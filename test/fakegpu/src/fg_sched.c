/* fg_sched.c — the shared device timeline: replay, commit and projection
 * (the model is described in fg_sched.h and docs/fakegpu.md). */
#include "fg_sched.h"

#include <stddef.h>
#include <string.h>

#include "fg_state.h"

static struct fg_sched_snap *snap_buf(struct fg_state *st, uint32_t b)
{
    return &st->sched[(b - 1) / FG_SNAP_BUFS].snap[(b - 1) % FG_SNAP_BUFS];
}

/* Empty records for the contexts (slots) that appeared since s was written. */
static void cover_slots(struct fg_state *st, struct fg_sched_snap *s)
{
    uint64_t n = atomic_load(&st->hdr.slot_hwm);
    if (n > FG_SCHED_SLOTS)
        n = FG_SCHED_SLOTS;
    if (s->nctx < n)
        memset(&s->ctx[s->nctx], 0, (n - s->nctx) * sizeof s->ctx[0]);
    if (s->nctx < n)
        s->nctx = n;
}

uint64_t fg_sched_load(struct fg_state *st, int dev, struct fg_sched_snap *out)
{
    _Atomic uint64_t *word = &st->dev[dev].sched;
    for (;;) {
        uint64_t w = atomic_load_explicit(word, memory_order_acquire);
        uint32_t b = FG_SCHED_BUF(w);
        if (b == 0) {
            memset(out, 0, offsetof(struct fg_sched_snap, ctx));
            out->dev = dev;
            out->cur = FG_NO_CTX;
            cover_slots(st, out);
            return w;
        }
        /* Only the contexts that exist: a copy is most of a query's cost. */
        const struct fg_sched_snap *src = snap_buf(st, b);
        memcpy(out, src, offsetof(struct fg_sched_snap, ctx));
        if (out->nctx > FG_SCHED_SLOTS)
            out->nctx = FG_SCHED_SLOTS; /* torn copy: the check below rejects it */
        memcpy(out->ctx, src->ctx, out->nctx * sizeof out->ctx[0]);
        atomic_thread_fence(memory_order_acquire);
        /* The buffer is rewritten only after the word has moved on: an unchanged
         * word (its generation never repeats) means the copy is whole. */
        if (atomic_load_explicit(word, memory_order_relaxed) == w && out->gen == FG_SCHED_GEN(w)) {
            cover_slots(st, out);
            return w;
        }
    }
}

/* Whether a slot's owner lives, asked at most every FG_LIVE_NS per slot: a query
 * is a few syscalls, and replays run on every synchronisation and query. A death
 * is therefore noticed within FG_LIVE_NS (plus the caller's own delay). Racy
 * updates only make a check happen again. */
#define FG_LIVE_NS 1000000ull
static struct {
    _Atomic uint64_t owner;
    _Atomic uint64_t stamp; /* check time | alive in bit 0 */
} live_cache[FG_SCHED_SLOTS];

static int owner_alive_cached(const struct fg_state *st, int c, uint64_t owner)
{
    uint64_t now = fg_now_ns();
    uint64_t stamp = atomic_load_explicit(&live_cache[c].stamp, memory_order_relaxed);
    if (atomic_load_explicit(&live_cache[c].owner, memory_order_relaxed) == owner && now - stamp < FG_LIVE_NS)
        return (int)(stamp & 1);
    int alive = fg_owner_alive(st, (uint32_t)c, owner);
    atomic_store_explicit(&live_cache[c].owner, owner, memory_order_relaxed);
    atomic_store_explicit(&live_cache[c].stamp, (now & ~1ull) | (uint64_t)alive, memory_order_relaxed);
    return alive;
}

/* One replay: the snapshot being advanced and what it may see. */
struct replay {
    struct fg_state *st;
    struct fg_sched_snap *s;
    uint64_t start;  /* launches that arrived earlier count as arriving now */
    uint64_t slice;
    uint32_t n;      /* contexts considered: slots [0, n) */
    int record;
    uint64_t head[FG_SCHED_SLOTS];
};

static void atomic_max64(_Atomic uint64_t *w, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(w, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak(w, &cur, v))
        ;
}

/* The context's first unfinished entry on this device, or NULL. */
static struct fg_sched_entry *next_entry(struct replay *r, int c)
{
    struct fg_sched_ctx *x = &r->s->ctx[c];
    struct fg_sched_slot *ss = &r->st->sched[c];
    while (x->next < r->head[c]) {
        struct fg_sched_entry *e = &ss->ring[x->next % FG_RING];
        if (e->dev == (uint32_t)r->s->dev && e->end_pos > x->done_pos)
            return e;
        x->next++;
    }
    return NULL;
}

static uint64_t arrival(const struct replay *r, const struct fg_sched_entry *e)
{
    return e->arrive_ns > r->start ? e->arrive_ns : r->start;
}

/* Drops every queued launch of context c (its process is gone). */
static void drop(struct replay *r, int c)
{
    struct fg_sched_entry *e;
    while ((e = next_entry(r, c)) != NULL)
        r->s->ctx[c].done_pos = e->end_pos;
    if (r->s->cur == c)
        r->s->cur = FG_NO_CTX;
}

/* Brings each context record in line with its slot's current owner and reads
 * how many launches each ring has published. */
static void prepare(struct replay *r)
{
    struct fg_state *st = r->st;
    for (uint32_t c = 0; c < r->n; c++) {
        struct fg_sched_ctx *x = &r->s->ctx[c];
        uint64_t owner = atomic_load(&st->slot[c].owner);
        if (owner & FG_OWNER_REAPING)
            owner = 0;
        if (owner != x->tag) {
            /* A new process in the slot (or none): its record starts afresh. */
            memset(x, 0, sizeof *x);
            x->tag = owner;
            if (r->s->cur == (int32_t)c)
                r->s->cur = FG_NO_CTX;
        }
        r->head[c] = owner ? atomic_load_explicit(&st->sched[c].head, memory_order_acquire) : 0;
        if (owner && next_entry(r, (int)c) && !owner_alive_cached(st, (int)c, owner))
            drop(r, (int)c);
    }
}

/* Whether c has work that has arrived by t; *at gets the arrival of its next
 * launch (UINT64_MAX if none is queued). */
static int pending(struct replay *r, int c, uint64_t t, uint64_t *at)
{
    struct fg_sched_entry *e = next_entry(r, c);
    *at = e ? arrival(r, e) : UINT64_MAX;
    return e && *at <= t;
}

/* Round robin: the first context after `after` (wrapping, itself last) with
 * work at t; FG_NO_CTX and *soonest = the earliest later arrival if none. */
static int pick(struct replay *r, int after, uint64_t t, uint64_t *soonest)
{
    *soonest = UINT64_MAX;
    uint32_t first = after < 0 ? 0 : (uint32_t)after + 1;
    for (uint32_t i = 0; i < r->n; i++) {
        int c = (int)((first + i) % r->n);
        uint64_t at;
        if (pending(r, c, t, &at))
            return c;
        if (at < *soonest)
            *soonest = at;
    }
    return FG_NO_CTX;
}

uint64_t fg_sched_advance(struct fg_state *st, struct fg_sched_snap *s, uint64_t until, int stop_ctx,
                          uint64_t stop_pos, int record)
{
    static __thread struct replay r; /* 2 KiB of heads: off the stack */
    r.st = st;
    r.s = s;
    r.start = s->sim_ns;
    r.slice = st->hdr.slice_ns ? st->hdr.slice_ns : FG_SLICE_NS_DEFAULT;
    cover_slots(st, s);
    r.n = (uint32_t)s->nctx;
    r.record = record;
    prepare(&r);
    if (stop_ctx >= 0 && s->ctx[stop_ctx].done_pos >= stop_pos)
        return s->sim_ns ? s->sim_ns : 1;
    uint64_t t = s->sim_ns;
    while (t < until) {
        int c = s->cur;
        uint64_t at;
        int running = c >= 0 && pending(&r, c, t, &at);
        if (!running || t >= s->slice_end) {
            uint64_t soonest;
            int nc = pick(&r, c, t, &soonest);
            if (nc == FG_NO_CTX) {
                s->cur = FG_NO_CTX;
                if (soonest >= until) {
                    t = until;
                    break;
                }
                t = soonest;
                continue;
            }
            s->cur = nc;
            s->slice_end = t + r.slice; /* a new slice, or the same context again alone */
            c = nc;
        }
        struct fg_sched_ctx *x = &s->ctx[c];
        struct fg_sched_entry *e = next_entry(&r, c);
        uint64_t run = e->end_pos - x->done_pos;
        if (run > s->slice_end - t)
            run = s->slice_end - t;
        if (run > until - t)
            run = until - t;
        int stops = c == stop_ctx && x->done_pos + run >= stop_pos;
        if (stops)
            run = stop_pos - x->done_pos;
        x->done_pos += run;
        x->busy_ns += run;
        s->busy_ns += run;
        t += run;
        if (x->done_pos == e->end_pos) {
            if (record)
                atomic_max64(&e->done_ns, t);
            x->next++;
        }
        if (stops) {
            s->sim_ns = t;
            return t;
        }
    }
    s->sim_ns = t;
    return 0;
}

/* One commit at a time per process: two threads could otherwise pick the same
 * free buffer. A flag, not a mutex, so a fork child (fg_sched_fork_child) never
 * inherits it held. */
static _Atomic int committing;

void fg_sched_fork_child(void)
{
    atomic_store(&committing, 0);
    for (int c = 0; c < FG_SCHED_SLOTS; c++)
        atomic_store(&live_cache[c].owner, 0);
}

static int commit_locked(struct fg_state *st, int slot, uint64_t seen, struct fg_sched_snap *s);

int fg_sched_commit(struct fg_state *st, int slot, uint64_t seen, struct fg_sched_snap *s)
{
    int idle = 0;
    if (!atomic_compare_exchange_strong(&committing, &idle, 1))
        return -1;
    int r = commit_locked(st, slot, seen, s);
    atomic_store(&committing, 0);
    return r;
}

static int commit_locked(struct fg_state *st, int slot, uint64_t seen, struct fg_sched_snap *s)
{
    /* A buffer of ours that no device's word names: nobody can make it current
     * but us (the caller serialises our commits), so it is ours to rewrite. */
    uint32_t base = 1 + FG_SNAP_BUFS * (uint32_t)slot, busy = 0;
    for (uint32_t d = 0; d < st->hdr.device_count && d < FG_MAX_DEVICES; d++) {
        uint32_t b = FG_SCHED_BUF(atomic_load(&st->dev[d].sched));
        if (b >= base && b < base + FG_SNAP_BUFS)
            busy |= 1u << (b - base);
    }
    int k = 0;
    while (k < FG_SNAP_BUFS && (busy & (1u << k)))
        k++;
    if (k == FG_SNAP_BUFS)
        return -1;
    uint64_t gen = FG_SCHED_GEN(seen) + 1;
    s->gen = gen;
    memcpy(&st->sched[slot].snap[k], s, offsetof(struct fg_sched_snap, ctx) + s->nctx * sizeof s->ctx[0]);
    uint64_t w = gen << 16 | (base + (uint32_t)k);
    return atomic_compare_exchange_strong(&st->dev[s->dev].sched, &seen, w) ? 0 : -1;
}

void fg_sched_now(struct fg_state *st, int dev, int slot, uint64_t now, struct fg_sched_snap *s)
{
    uint64_t seen = fg_sched_load(st, dev, s);
    if (s->sim_ns >= now)
        return;
    uint64_t from = s->sim_ns;
    fg_sched_advance(st, s, now, FG_NO_CTX, 0, 1);
    if (slot >= 0 && now - from >= FG_COMMIT_NS)
        fg_sched_commit(st, slot, seen, s);
}

int fg_sched_reached(struct fg_state *st, int dev, int slot, int ctx, uint64_t pos, uint64_t now)
{
    static __thread struct fg_sched_snap s;
    for (int tries = 0; tries < 4; tries++) {
        uint64_t seen = fg_sched_load(st, dev, &s);
        if (s.sim_ns >= now)
            return s.ctx[ctx].done_pos >= pos;
        uint64_t from = s.sim_ns;
        fg_sched_advance(st, &s, now, FG_NO_CTX, 0, 1);
        int reached = s.ctx[ctx].done_pos >= pos;
        if (slot < 0 || (!reached && now - from < FG_COMMIT_NS) || fg_sched_commit(st, slot, seen, &s) == 0)
            return reached;
        /* A completion is committed before it is reported (or someone else's
         * newer snapshot is): the state file then shows it to every reader. */
    }
    return s.ctx[ctx].done_pos >= pos;
}

uint64_t fg_sched_projected(struct fg_state *st, int dev, int ctx, uint64_t pos, uint64_t horizon)
{
    static __thread struct fg_sched_snap s;
    fg_sched_load(st, dev, &s);
    uint64_t t = fg_sched_advance(st, &s, horizon, ctx, pos, 0);
    return t ? t : horizon;
}
