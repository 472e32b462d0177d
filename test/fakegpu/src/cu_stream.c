/* cu_stream.c — streams, events and synchronisation on the simulated timeline.
 *
 * Time is CLOCK_MONOTONIC, which every process on the node shares. Each stream
 * remembers where its latest timed launch ends in the process's queue on the
 * device, the context the latest of its streams; waiting means waiting until the
 * shared device timeline has run the queue that far (cu_time.c, fg_sched.h). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "cu_internal.h"

#define CU_EVENT_DISABLE_TIMING 0x2u

static struct fg_stream *free_streams;
static struct CUevent_st *free_events;

void fg_wait_until(uint64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull)};
    while (fg_now_ns() < t)
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0 && errno != EINTR)
            break;
}

struct fg_stream *fg_stream_resolve(CUstream h, struct CUctx_st *ctx)
{
    if (h == NULL || h == FG_STREAM_LEGACY || h == FG_STREAM_PER_THREAD)
        return &ctx->null_stream;
    struct fg_stream *s = (struct fg_stream *)h;
    return s->magic == FG_MAGIC_STREAM && atomic_load(&s->ctx->alive) ? s : NULL;
}

FG_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phStream || Flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg.mu);
    struct fg_stream *s = free_streams;
    if (s)
        free_streams = s->next_free;
    pthread_mutex_unlock(&fg.mu);
    if (!s && !(s = malloc(sizeof *s)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->flags = Flags;
    s->ctx = ctx;
    atomic_store(&s->tail.pos, 0);
    atomic_store(&s->tail.seq, 0);
    s->capture = NULL;
    s->next_free = NULL;
    s->magic = FG_MAGIC_STREAM;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct fg_stream *s = (struct fg_stream *)hStream;
    if (!s || hStream == FG_STREAM_LEGACY || hStream == FG_STREAM_PER_THREAD || s->magic != FG_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Queued work still completes on the device timeline; the handle is gone now. */
    s->magic = FG_MAGIC_DEAD;
    pthread_mutex_lock(&fg.mu);
    s->next_free = free_streams;
    free_streams = s;
    pthread_mutex_unlock(&fg.mu);
    return CUDA_SUCCESS;
}

static CUresult stream_of(CUstream h, struct fg_stream **out)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    *out = fg_stream_resolve(h, ctx);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FG_API CUresult cuStreamSynchronize(CUstream hStream)
{
    struct fg_stream *s;
    CUresult r = stream_of(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if ((r = fg_capture_unsafe_call()) != CUDA_SUCCESS)
        return r;
    fg_mark_wait(s->ctx->dev, fg_stream_mark(s));
    fg_pools_sync(s->ctx->dev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamQuery(CUstream hStream)
{
    struct fg_stream *s;
    CUresult r = stream_of(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if ((r = fg_capture_unsafe_call()) != CUDA_SUCCESS)
        return r;
    return fg_mark_done(s->ctx->dev, fg_stream_mark(s)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FG_API CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = fg_capture_unsafe_call()) != CUDA_SUCCESS)
        return r;
    fg_mark_wait(ctx->dev, &ctx->tail);
    fg_pools_sync(ctx->dev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phEvent || Flags > 0x7)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fg.mu);
    struct CUevent_st *e = free_events;
    if (e)
        free_events = e->next_free;
    pthread_mutex_unlock(&fg.mu);
    if (!e && !(e = malloc(sizeof *e)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->flags = Flags;
    e->ctx = ctx;
    e->epoch = atomic_load(&ctx->epoch);
    e->recorded = 0;
    e->resolved = 0;
    e->ts_ns = 0;
    e->pend_prev = e->pend_next = NULL;
    e->next_free = NULL;
    e->magic = FG_MAGIC_EVENT;
    *phEvent = e;
    return CUDA_SUCCESS;
}

/* As the real driver: destroying or resetting a context destroys its events,
 * even when the context's handle stays the same (a reset primary context). */
static int event_ok(CUevent e)
{
    return e && e->magic == FG_MAGIC_EVENT && e->epoch == atomic_load(&e->ctx->epoch);
}

FG_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    fg_event_forget(hEvent);
    hEvent->magic = FG_MAGIC_DEAD;
    pthread_mutex_lock(&fg.mu);
    hEvent->next_free = free_events;
    free_events = hEvent;
    pthread_mutex_unlock(&fg.mu);
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    struct fg_stream *s;
    CUresult r = stream_of(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture)
        return CUDA_SUCCESS; /* an event node of the graph: not modelled */
    fg_event_record(hEvent, s);
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventSynchronize(CUevent hEvent)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = fg_capture_unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    fg_event_wait(hEvent);
    fg_pools_sync(hEvent->ctx->dev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventQuery(CUevent hEvent)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = fg_capture_unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    return fg_event_done(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FG_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    if (!event_ok(hStart) || !event_ok(hEnd) || !hStart->recorded || !hEnd->recorded ||
        ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fg_event_done(hStart) || !fg_event_done(hEnd))
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)((double)((int64_t)(hEnd->ts_ns - hStart->ts_ns)) / 1e6);
    return CUDA_SUCCESS;
}

/* Every stream of a device is serialised anyway, so the per-thread default stream
 * behaves as the legacy one (docs/fakegpu.md). */
FG_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return cuStreamSynchronize(hStream);
}

FG_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    return cuStreamQuery(hStream);
}

FG_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return cuEventRecord(hEvent, hStream);
}
