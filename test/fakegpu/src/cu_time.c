/* cu_time.c — this process's side of the shared device timeline (fg_sched.h):
 * queueing timed launches, waiting for them, and event timestamps.
 *
 * Per device the process has one queue (one simulated context, whatever number
 * of CUcontexts it made there); a position in it is the kernel time queued
 * before a point. Streams, contexts and events remember the position their work
 * ends at; "done" means the device's timeline has run the queue that far. */
#include <string.h>
#include <sys/prctl.h>

#include "cu_internal.h"

/* Longest sleep between looks at the timeline: a context whose process dies
 * frees its share at once, which can only make a projected completion earlier. */
#define FG_WAIT_MAX_NS 2000000ull
/* A look that finds the work not done although its projection has passed (a
 * launch arrived in between) looks again this much later. */
#define FG_WAIT_RETRY_NS 50000ull

/* Sleeps until ctx's queue on dev reaches pos if nothing else arrives, at most
 * FG_WAIT_MAX_NS (so a projection never covers more). The first wait of each
 * thread drops its timer slack to 1 ns (Linux adds 50 µs to every sleep by
 * default), so that a synchronisation returns close to the simulated instant;
 * the setting stays with the thread. */
static void sleep_toward(int dev, uint64_t pos)
{
    static __thread int slack_set;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        slack_set = 1;
    }
    uint64_t now = fg_now_ns();
    uint64_t t = fg_sched_projected(fg.st, dev, fg.slot_index, pos, now + FG_WAIT_MAX_NS);
    fg_wait_until(t <= now ? now + FG_WAIT_RETRY_NS : t);
}

static struct fg_sched_slot *my_ring(void)
{
    return &fg.st->sched[fg.slot_index];
}

void fg_time_reset(void)
{
    fg_sched_fork_child();
    pthread_mutex_init(&fg.tmu, NULL);
    memset(fg.queued_pos, 0, sizeof fg.queued_pos);
    fg.devs_used = 0;
    fg.pending = NULL;
    fg.slot_index = fg.slot ? (int)(fg.slot - fg.st->slot) : -1;
}

static void pending_unlink(struct CUevent_st *e)
{
    if (e->pend_prev)
        e->pend_prev->pend_next = e->pend_next;
    else if (fg.pending == e)
        fg.pending = e->pend_next;
    if (e->pend_next)
        e->pend_next->pend_prev = e->pend_prev;
    e->pend_prev = e->pend_next = NULL;
}

/* The event's launch is complete: its timestamp is when that launch finished
 * (or when it was recorded, if the work was already done). tmu held. */
static void resolve(struct CUevent_st *e)
{
    const struct fg_sched_entry *x = &my_ring()->ring[(e->seq - 1) % FG_RING];
    uint64_t done = atomic_load(&((struct fg_sched_entry *)x)->done_ns);
    if (done < x->arrive_ns) /* not written by any replay (cannot happen once committed) */
        done = fg_now_ns();
    e->ts_ns = done > e->record_ns ? done : e->record_ns;
    e->resolved = 1;
    pending_unlink(e);
}

/* Frees ring entries every used device's committed timeline has finished,
 * resolving the events that point at them first. tmu held. */
static void reclaim(void)
{
    static __thread struct fg_sched_snap s;
    struct fg_sched_slot *ss = my_ring();
    uint64_t lim = atomic_load(&ss->head), me = atomic_load(&fg.slot->owner);
    for (int d = 0; d < fg.cfg.count; d++) {
        if (!(fg.devs_used & (1u << d)))
            continue;
        uint64_t now = fg_now_ns();
        for (int tries = 0; tries < 4; tries++) {
            uint64_t seen = fg_sched_load(fg.st, d, &s);
            if (s.sim_ns >= now)
                break;
            fg_sched_advance(fg.st, &s, now, FG_NO_CTX, 0, 1);
            if (fg_sched_commit(fg.st, fg.slot_index, seen, &s) == 0)
                break;
        }
        fg_sched_load(fg.st, d, &s);
        uint64_t next = s.ctx[fg.slot_index].tag == me ? s.ctx[fg.slot_index].next : 0;
        if (next < lim)
            lim = next;
    }
    if (lim <= atomic_load(&ss->tail))
        return;
    for (struct CUevent_st *e = fg.pending, *nx; e; e = nx) {
        nx = e->pend_next;
        if (e->seq - 1 < lim)
            resolve(e);
    }
    atomic_store(&ss->tail, lim);
}

/* A full ring: like a real driver's full push buffer, the launch waits until
 * the oldest queued kernel has run. Called and returns with tmu held. */
static void wait_for_room(void)
{
    struct fg_sched_slot *ss = my_ring();
    while (atomic_load(&ss->head) - atomic_load(&ss->tail) >= FG_RING) {
        reclaim();
        uint64_t tail = atomic_load(&ss->tail);
        if (atomic_load(&ss->head) - tail < FG_RING)
            return;
        const struct fg_sched_entry *x = &ss->ring[tail % FG_RING];
        int dev = (int)x->dev;
        uint64_t pos = x->end_pos;
        pthread_mutex_unlock(&fg.tmu);
        sleep_toward(dev, pos);
        pthread_mutex_lock(&fg.tmu);
    }
}

CUresult fg_submit(struct fg_stream *s, uint64_t ns)
{
    int dev = s->ctx->dev;
    struct fg_sched_slot *ss = my_ring();
    pthread_mutex_lock(&fg.tmu);
    fg.devs_used |= 1u << dev;
    wait_for_room();
    uint64_t seq = atomic_load(&ss->head);
    struct fg_sched_entry *x = &ss->ring[seq % FG_RING];
    uint64_t pos = fg.queued_pos[dev] += ns;
    x->end_pos = pos;
    x->dev = (uint32_t)dev;
    atomic_store(&x->done_ns, 0);
    x->arrive_ns = fg_now_ns(); /* the doorbell: visible to replays from here on */
    atomic_store_explicit(&ss->head, seq + 1, memory_order_release);
    atomic_store(&s->tail.pos, pos);
    atomic_store(&s->tail.seq, seq + 1);
    atomic_store(&s->ctx->tail.pos, pos);
    atomic_store(&s->ctx->tail.seq, seq + 1);
    pthread_mutex_unlock(&fg.tmu);
    atomic_fetch_add_explicit(&fg.slot->busy_ns[dev], ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&fg.st->dev[dev].busy_total_ns, ns, memory_order_relaxed);
    return CUDA_SUCCESS;
}

static int pos_done(int dev, uint64_t pos)
{
    return pos == 0 || fg_sched_reached(fg.st, dev, fg.slot_index, fg.slot_index, pos, fg_now_ns());
}

int fg_mark_done(int dev, const struct fg_mark *m)
{
    return pos_done(dev, atomic_load(&m->pos));
}

/* Sleeps until the instant the timeline says pos completes if nothing else
 * arrives (at most FG_WAIT_MAX_NS); looks again (something may have arrived, or
 * died), until it has. Each look replays from the committed snapshot, so being
 * descheduled delays the wake-up, never the simulated completion. */
static void pos_wait(int dev, uint64_t pos)
{
    while (!pos_done(dev, pos))
        sleep_toward(dev, pos);
}

void fg_mark_wait(int dev, const struct fg_mark *m)
{
    pos_wait(dev, atomic_load(&m->pos));
}

const struct fg_mark *fg_stream_mark(struct fg_stream *s)
{
    return s == &s->ctx->null_stream ? &s->ctx->tail : &s->tail;
}

void fg_event_record(struct CUevent_st *e, struct fg_stream *s)
{
    const struct fg_mark *m = fg_stream_mark(s);
    pthread_mutex_lock(&fg.tmu);
    if (e->recorded && !e->resolved)
        pending_unlink(e);
    e->dev = s->ctx->dev;
    e->pos = atomic_load(&m->pos);
    e->seq = atomic_load(&m->seq);
    e->record_ns = fg_now_ns();
    e->recorded = 1;
    e->resolved = e->seq == 0 || e->seq - 1 < atomic_load(&my_ring()->tail);
    if (e->resolved) {
        /* Nothing queued before it, or that work finished and was reclaimed. */
        e->ts_ns = e->record_ns;
    } else {
        e->pend_prev = NULL;
        e->pend_next = fg.pending;
        if (fg.pending)
            fg.pending->pend_prev = e;
        fg.pending = e;
    }
    pthread_mutex_unlock(&fg.tmu);
}

int fg_event_done(struct CUevent_st *e)
{
    if (!e->recorded || e->resolved)
        return 1;
    pthread_mutex_lock(&fg.tmu);
    int done = e->resolved;
    if (!done && pos_done(e->dev, e->pos)) {
        resolve(e);
        done = 1;
    }
    pthread_mutex_unlock(&fg.tmu);
    return done;
}

void fg_event_wait(struct CUevent_st *e)
{
    if (e->recorded && !e->resolved)
        pos_wait(e->dev, e->pos);
    fg_event_done(e);
}

void fg_event_forget(struct CUevent_st *e)
{
    pthread_mutex_lock(&fg.tmu);
    if (e->recorded && !e->resolved)
        pending_unlink(e);
    e->recorded = 0;
    pthread_mutex_unlock(&fg.tmu);
}
