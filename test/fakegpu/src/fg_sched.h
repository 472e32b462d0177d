/*
 * fg_sched.h — simulated GPU time shared between processes (docs/fakegpu.md,
 * "Kernels and time").
 *
 * Per device, every process with queued kernels is one context (a channel group
 * on real hardware). Contexts with pending work are time-sliced round-robin in
 * slot order, `slice_ns` each (header; FAKEGPU_SLICE_US, default 1024 µs); a
 * kernel longer than its context's slice is preempted at the slice end and
 * continues in the context's next slice; a context that runs out of work yields
 * at once. A context runs its kernels one at a time in launch order.
 *
 * Nothing sleeps per kernel: the device's timeline is a pure function of the
 * launches (each stamped with its CLOCK_MONOTONIC arrival time) and can be
 * computed for any instant by any process, whenever it is scheduled:
 *
 *  - A process appends each timed launch to its own ring in the state file
 *    (fg_sched_ring; it is the only writer: arrival, cumulative end position).
 *  - A committed snapshot per device (fg_sched_snap) records where the timeline
 *    stood at `sim_ns`: which context runs, until when its slice lasts, and per
 *    context how much of its queue is done and how long it ran.
 *  - To learn the state at `now`, a reader copies the snapshot and replays the
 *    rings from `sim_ns` to `now` (fg_sched_advance); to wait for a position, it
 *    replays beyond `now` to the instant the position would complete if nothing
 *    else arrived, sleeps until then and looks again.
 *  - Any process with a slot commits a replay it made: it writes the new
 *    snapshot into one of its own two buffers and publishes it with one CAS on
 *    the device's `sched` word (generation | buffer). No lock: a process killed
 *    or stopped mid-commit leaves the previous snapshot current; readers
 *    validate their copy against the word (seqlock style).
 *
 * A dead process's queued work is dropped from the replay on (its slot's owner
 * is gone); a stopped process's queued work keeps running, it just stops
 * launching more.
 */
#ifndef FAKEGPU_SCHED_H
#define FAKEGPU_SCHED_H

#include <stdatomic.h>
#include <stdint.h>

#define FG_SCHED_SLOTS 256     /* = FG_MAX_SLOTS */
#define FG_RING 512            /* timed launches a process may have queued */
#define FG_SLICE_NS_DEFAULT 1024000ull
#define FG_NO_CTX (-1)

/* One timed launch. Written by the owning process before it publishes `head`;
 * done_ns is raised (atomic max) by whoever replays its completion: a value
 * below arrive_ns is stale (an older entry's) and means "not known". */
struct fg_sched_entry {
    uint64_t arrive_ns;
    uint64_t end_pos;   /* the context's cumulative queued ns after this kernel */
    uint32_t dev;
    uint32_t pad;
    _Atomic uint64_t done_ns;
};

struct fg_sched_ctx {
    uint64_t tag;       /* owner word of the slot this record belongs to (0: none) */
    uint64_t done_pos;  /* queue position completed (dropped work included) */
    uint64_t busy_ns;   /* time the context's kernels ran on the device */
    uint64_t next;      /* ring sequence number of its next unfinished entry */
};

struct fg_sched_snap {
    uint64_t gen;       /* generation this buffer was written for */
    uint64_t sim_ns;    /* the instant the snapshot describes */
    int32_t dev;
    int32_t cur;        /* context holding the device, FG_NO_CTX if idle */
    uint64_t slice_end; /* when cur's slice ends */
    uint64_t busy_ns;   /* device busy time (sum over contexts, ever) */
    uint64_t nctx;      /* ctx[0, nctx) are meaningful (slot_hwm when written) */
    uint64_t reserved[2];
    struct fg_sched_ctx ctx[FG_SCHED_SLOTS];
};

/* Per slot: the launch ring and FG_SNAP_BUFS snapshot buffers only that process
 * writes. A buffer is rewritten only while no device's `sched` word names it, so a
 * process can keep committing while it uses up to FG_SNAP_BUFS - 1 devices. */
#define FG_SNAP_BUFS 4
struct fg_sched_slot {
    _Atomic uint64_t head; /* entries ever published */
    _Atomic uint64_t tail; /* entries reclaimed (head - tail <= FG_RING) */
    uint64_t reserved[6];
    struct fg_sched_entry ring[FG_RING];
    struct fg_sched_snap snap[FG_SNAP_BUFS];
};

/* The device's `sched` word: generation << 16 | buffer (0: none yet, the empty
 * timeline; 1 + FG_SNAP_BUFS·slot + k: slot's buffer k). */
#define FG_SCHED_BUF(w) ((uint32_t)((w) & 0xffffu))
#define FG_SCHED_GEN(w) ((w) >> 16)

struct fg_state;

/* A consistent copy of dev's committed snapshot; returns the sched word read. */
uint64_t fg_sched_load(struct fg_state *st, int dev, struct fg_sched_snap *out);

/* Replays s forward to `until` (exclusive of launches not yet visible). If
 * stop_ctx >= 0, stops as soon as that context's done_pos reaches stop_pos and
 * returns the instant it did (0 if not reached by `until`). record: write
 * completion times into ring entries (only for instants already past). */
uint64_t fg_sched_advance(struct fg_state *st, struct fg_sched_snap *s, uint64_t until, int stop_ctx,
                          uint64_t stop_pos, int record);

/* Publishes s (advanced from the snapshot whose word was `seen`) from slot
 * `slot`'s buffers. 0 on success, -1 if another commit came first. */
int fg_sched_commit(struct fg_state *st, int slot, uint64_t seen, struct fg_sched_snap *s);

/* In a fork child: forget the parent's in-flight commit and liveness answers. */
void fg_sched_fork_child(void);

/* The state of dev at `now`: load + advance (+ commit if slot >= 0 and the
 * committed snapshot is older than FG_COMMIT_NS). */
#define FG_COMMIT_NS 2000000ull
void fg_sched_now(struct fg_state *st, int dev, int slot, uint64_t now, struct fg_sched_snap *s);

/* Whether context ctx on dev has completed queue position pos at `now`
 * (advancing as above; a completion is committed before it is reported). */
int fg_sched_reached(struct fg_state *st, int dev, int slot, int ctx, uint64_t pos, uint64_t now);

/* Instant at which ctx's done_pos would reach pos if nothing else arrived, or
 * `horizon` if not before it (the cost of a projection is bounded by the
 * simulated time it covers). */
uint64_t fg_sched_projected(struct fg_state *st, int dev, int ctx, uint64_t pos, uint64_t horizon);

#endif
