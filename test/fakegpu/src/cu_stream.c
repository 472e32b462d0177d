/* cu_stream.c — streams, events and synchronisation on the simulated timeline.
 *
 * Time is CLOCK_MONOTONIC, which every process on the node shares. Each stream
 * records when its queued work finishes (tail_ns); the context records the max
 * over its streams; the device's timeline in the node state serialises kernels
 * of all streams and processes (cu_launch.c). */
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

/* The legacy default stream waits for every stream of its context. */
static uint64_t stream_done_at(struct fg_stream *s)
{
    if (s == &s->ctx->null_stream)
        return atomic_load(&s->ctx->tail_ns);
    return atomic_load(&s->tail_ns);
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
    atomic_store(&s->tail_ns, 0);
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
    fg_wait_until(stream_done_at(s));
    fg_pools_sync(s->ctx->dev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamQuery(CUstream hStream)
{
    struct fg_stream *s;
    CUresult r = stream_of(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    return fg_now_ns() >= stream_done_at(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FG_API CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    fg_wait_until(atomic_load(&ctx->tail_ns));
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
    e->recorded = 0;
    e->ts_ns = 0;
    e->next_free = NULL;
    e->magic = FG_MAGIC_EVENT;
    *phEvent = e;
    return CUDA_SUCCESS;
}

static int event_ok(CUevent e)
{
    return e && e->magic == FG_MAGIC_EVENT;
}

FG_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
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
    uint64_t now = fg_now_ns(), done = stream_done_at(s);
    hEvent->ts_ns = done > now ? done : now;
    hEvent->recorded = 1;
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventSynchronize(CUevent hEvent)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    if (hEvent->recorded)
        fg_wait_until(hEvent->ts_ns);
    fg_pools_sync(hEvent->ctx->dev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventQuery(CUevent hEvent)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!event_ok(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    return !hEvent->recorded || fg_now_ns() >= hEvent->ts_ns ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
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
    uint64_t now = fg_now_ns();
    if (now < hStart->ts_ns || now < hEnd->ts_ns)
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
