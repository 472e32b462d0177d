/* fg_sched.c — the shared device timeline: replay, commit and projection
 * (the model is described in fg_sched.h and docs/fakegpu.md). */
#include "fg_sched.h"

#include <string.h>

#include "fg_state.h"

static struct fg_sched_snap *snap_buf(struct fg_state *st, uint32_t b)
{
    return &st->sched[(b - 1) / FG_SNAP_BUFS].snap[(b - 1) % FG_SNAP_BUFS];
}

uint64_t fg_sched_load(struct fg_state *st, int dev, struct fg_sched_snap *out)
{
    _Atomic uint64_t *word = &st->dev[dev].sched;
    for (;;) {
        uint64_t w = atomic_load_explicit(word, memory_order_acquire);
        uint32_t b = FG_SCHED_BUF(w);
        if (b == 0) {
            memset(out, 0, sizeof *out);
            out->dev = dev;
            out->cur = FG_NO_CTX;
            return w;
        }
        memcpy(out, snap_buf(st, b), sizeof *out);
        atomic_thread_fence(memory_order_acquire);
        /* The buffer is rewritten only after the word has moved on: an unchanged
         * word (its generation never repeats) means the copy is whole. */
        if (atomic_load_explicit(word, memory_order_relaxed) == w && out->gen == FG_SCHED_GEN(w))
            return w;
    }
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
        if (owner && next_entry(r, (int)c) && !fg_owner_alive(owner))
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
    r.n = atomic_load(&st->hdr.slot_hwm);
    if (r.n > FG_SCHED_SLOTS)
        r.n = FG_SCHED_SLOTS;
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

int fg_sched_commit(struct fg_state *st, int slot, uint64_t seen, struct fg_sched_snap *s)
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
    memcpy(&st->sched[slot].snap[k], s, sizeof *s);
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

uint64_t fg_sched_done(struct fg_state *st, int dev, int slot, int ctx, uint64_t now)
{
    static __thread struct fg_sched_snap s;
    fg_sched_now(st, dev, slot, now, &s);
    return s.ctx[ctx].done_pos;
}

uint64_t fg_sched_projected(struct fg_state *st, int dev, int ctx, uint64_t pos)
{
    static __thread struct fg_sched_snap s;
    fg_sched_load(st, dev, &s);
    uint64_t t = fg_sched_advance(st, &s, UINT64_MAX, ctx, pos, 0);
    return t ? t : UINT64_MAX;
}
