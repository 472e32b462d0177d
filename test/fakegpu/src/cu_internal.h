/*
 * cu_internal.h — shared state of the simulated libcuda.so.1. Not installed; the
 * public surface is shim/cuda-hook/include/cuda_driver.h.
 */
#ifndef FAKEGPU_CU_INTERNAL_H
#define FAKEGPU_CU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cuda_driver.h"
#include "fg_config.h"
#include "fg_state.h"
#include "fg_table.h"

#define FG_API __attribute__((visibility("default")))

/* Per-thread-default-stream entry points the real driver also exports; not in
 * cuda_driver.h because the hook has no reason to intercept them. */
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);

#define FG_STREAM_LEGACY ((CUstream)0x1)
#define FG_STREAM_PER_THREAD ((CUstream)0x2)

#define FG_MAGIC_CTX 0xc07e47u
#define FG_MAGIC_STREAM 0x57e4a3u
#define FG_MAGIC_EVENT 0xe7e47u
#define FG_MAGIC_MODULE 0x30d01eu
#define FG_MAGIC_FUNC 0xf0c7u
#define FG_MAGIC_POOL 0x9001u
#define FG_MAGIC_DEAD 0xdeadu

/* Where queued work ends in this process's queue on a device (fg_sched.h):
 * pos = cumulative kernel ns, seq = 1 + ring sequence of that launch (0: none). */
struct fg_mark {
    _Atomic uint64_t pos;
    _Atomic uint64_t seq;
};

struct fg_capture; /* cu_graph.c */

struct fg_stream {
    uint32_t magic;
    unsigned flags;
    struct CUctx_st *ctx;
    struct fg_mark tail; /* its latest timed launch */
    struct fg_capture *capture; /* non-NULL while it is being captured into a graph */
    struct fg_stream *next_free;
};

struct CUctx_st {
    uint32_t magic;
    int dev;
    int primary;
    _Atomic int alive;
    _Atomic uint32_t epoch; /* bumped when it is destroyed or reset: its events die with it */
    struct fg_mark tail; /* latest timed launch on any of its streams: cuCtxSynchronize */
    struct fg_stream null_stream;
};

struct CUstream_st {
    struct fg_stream s; /* CUstream handles point at struct fg_stream */
};

struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    struct CUctx_st *ctx; /* where it was created: its device's pools release on sync */
    uint32_t epoch;       /* ctx->epoch at creation: a destroyed or reset context's events are invalid */
    int recorded;
    int dev;          /* device of the stream it was recorded on */
    uint64_t pos;     /* queue position it waits for */
    uint64_t seq;     /* 1 + ring sequence of the launch ending at pos; 0: none */
    uint64_t record_ns;
    int resolved;     /* ts_ns known */
    uint64_t ts_ns;   /* when the work before the record point finished */
    struct CUevent_st *pend_prev, *pend_next; /* unresolved events (fg.pending) */
    struct CUevent_st *next_free;
};

struct CUfunc_st {
    uint32_t magic;
    int sleep; /* "fakegpu_sleep": runs for *(uint64_t *)params[0] ns */
    struct CUmod_st *mod;
    struct CUfunc_st *next;
    char name[128];
};

struct CUmod_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    struct CUfunc_st *funcs;
    struct CUmod_st *next_free;
};

struct fg_driver {
    _Atomic int init; /* 0 not yet, 1 ready, 2 failed (sticky) */
    CUresult init_err;
    unsigned gen;     /* bumped in a fork child: older thread stacks are void */
    struct fg_config cfg;
    /* CUDA_VISIBLE_DEVICES, read once at cuInit: the devices this process
     * enumerates, in its order. A CUdevice is the simulated device's index
     * (a handle, as the driver API allows), so state, limits and contexts
     * stay keyed by index; only enumeration and validity narrow. */
    int visible_count;
    int visible[FG_MAX_DEVICES];
    unsigned char is_visible[FG_MAX_DEVICES];
    struct fg_state *st;
    struct fg_state_slot *slot;
    uint64_t ctx_bytes; /* FAKEGPU_CONTEXT_MIB: device memory each live context takes */
    pthread_mutex_t mu; /* contexts, primary contexts, modules, free lists */
    struct CUctx_st primary[FG_MAX_DEVICES];
    int primary_refs[FG_MAX_DEVICES];
    /* Simulated time (cu_time.c): this process's queue on each device. */
    int slot_index;
    pthread_mutex_t tmu;                 /* ring, positions, pending events */
    uint64_t queued_pos[FG_MAX_DEVICES]; /* kernel ns ever queued (the positions) */
    uint32_t devs_used;                  /* devices it queued timed work on */
    struct CUevent_st *pending;          /* recorded events not yet resolved */
};

extern struct fg_driver fg;

/* Per-thread current-context stack. */
#define FG_CTX_STACK 64
struct fg_tls {
    unsigned gen;
    int depth;
    struct CUctx_st *stack[FG_CTX_STACK];
};
extern __thread struct fg_tls fg_tls;

static inline int fg_ready(void)
{
    return atomic_load_explicit(&fg.init, memory_order_acquire) == 1;
}

static inline struct CUctx_st *fg_current(void)
{
    struct fg_tls *t = &fg_tls;
    if (t->gen != fg.gen || t->depth == 0)
        return NULL;
    struct CUctx_st *c = t->stack[t->depth - 1];
    return atomic_load_explicit(&c->alive, memory_order_relaxed) ? c : NULL;
}

/* The CUDA version of the simulated driver (cuDriverGetVersion); cuGetProcAddress
 * refuses a newer one. */
#define FG_DRIVER_CUDA_VERSION 12080

/* Not in the hook's cuda_driver.h; the value of NVIDIA's cuda.h. */
#define FG_ERROR_CONTEXT_IS_DESTROYED ((CUresult)709)
#define FG_ERROR_ILLEGAL_STATE ((CUresult)401)

/* init + current context, the preamble of most calls. No context at all is
 * INVALID_CONTEXT; a current one that was destroyed (or an inactive primary) is
 * CONTEXT_IS_DESTROYED, as the real driver reports it. */
static inline CUresult fg_enter(struct CUctx_st **ctx)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    *ctx = fg_current();
    if (*ctx)
        return CUDA_SUCCESS;
    struct fg_tls *t = &fg_tls;
    return t->gen == fg.gen && t->depth > 0 ? FG_ERROR_CONTEXT_IS_DESTROYED : CUDA_ERROR_INVALID_CONTEXT;
}

static inline int fg_valid_dev(CUdevice d)
{
    return d >= 0 && d < fg.cfg.count && fg.is_visible[d];
}

/* Applies CUDA_VISIBLE_DEVICES (cu_visible.c); call once per cuInit. */
void fg_visible_load(void);

/* Whether ctx is a context this process created (safe to dereference). */
int fg_ctx_known(struct CUctx_st *ctx);

/* Resolves a stream handle (NULL, legacy and per-thread mean the context's own). */
struct fg_stream *fg_stream_resolve(CUstream h, struct CUctx_st *ctx);

/* Physical memory: charge with one reap-and-retry on failure. */
CUresult fg_charge(int dev, uint64_t bytes);
void fg_uncharge(int dev, uint64_t bytes);

/* Fresh device virtual address range, never reused in this process. */
uint64_t fg_va_alloc(uint64_t size, uint64_t align);

/* Releases everything a context owned (its allocations); used by destroy/reset. */
void fg_ctx_release_resources(struct CUctx_st *ctx);

/* Sleeps until CLOCK_MONOTONIC reaches t. */
void fg_wait_until(uint64_t t);

/* Simulated GPU time (cu_time.c, model in fg_sched.h). */
void fg_time_reset(void);                             /* fork child / init */
CUresult fg_submit(struct fg_stream *s, uint64_t ns); /* queue ns of kernel time on s */
int fg_mark_done(int dev, const struct fg_mark *m);   /* completed by now? */
void fg_mark_wait(int dev, const struct fg_mark *m);  /* waits until completed */
void fg_event_record(struct CUevent_st *e, struct fg_stream *s);
int fg_event_done(struct CUevent_st *e); /* resolves ts_ns when complete */
void fg_event_wait(struct CUevent_st *e);
void fg_event_forget(struct CUevent_st *e);
/* The mark a stream's synchronisation waits for (the legacy default stream: its context's). */
const struct fg_mark *fg_stream_mark(struct fg_stream *s);

/* Kernel duration of a launch of f with params: 0 for any kernel but fakegpu_sleep;
 * -1 if fakegpu_sleep lacks its argument. */
int64_t fg_kernel_ns(CUfunction f, void **kernelParams);
/* Validates a launch (context, function, dimensions, stream); resolves the stream. */
CUresult fg_launch_check(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         CUstream hStream, struct fg_stream **out);
/* Queues a launch on s, or records it into s's capture graph. */
CUresult fg_launch_enqueue(struct fg_stream *s, CUfunction f, uint64_t ns);

/* VMM (cu_vmm.c): forget the parent's reservations in a fork child. */
void fg_vmm_reset(void);

/* Pools (cu_pool.c). */
void fg_pools_init(void);
void fg_pools_reset(void);
void fg_pools_sync(int dev);
void fg_pool_release_entry(const struct fg_entry *e); /* a FG_KIND_POOL entry */

#endif
