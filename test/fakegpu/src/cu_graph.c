/* cu_graph.c — CUDA graphs of kernel nodes, built explicitly or by stream capture.
 *
 * Only what matters for GPU time is modelled: a graph is the list of its kernel
 * nodes with their durations (a fakegpu_sleep node's argument is read when the
 * node is added, as the real driver copies kernel parameters). Dependencies are
 * accepted and ignored: the simulated device runs a process's kernels one at a
 * time anyway. cuGraphLaunch queues the whole graph on the stream as one piece
 * of work of the summed duration. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cu_internal.h"

#define FG_MAGIC_GRAPH 0x6a4fu
#define FG_MAGIC_GNODE 0x60deu
#define FG_MAGIC_GEXEC 0x6e8eu

struct CUgraphNode_st {
    uint32_t magic;
    uint64_t ns;
    struct CUgraphNode_st *next;
};

struct CUgraph_st {
    uint32_t magic;
    pthread_mutex_t mu;
    uint64_t total_ns;
    unsigned kernels;
    struct CUgraphNode_st *nodes;
};

struct CUgraphExec_st {
    uint32_t magic;
    uint64_t total_ns;
    unsigned kernels;
};

struct fg_capture {
    CUgraph graph;
    CUstreamCaptureMode mode;
    _Atomic int invalidated; /* an unsafe call was made while it ran */
    struct fg_capture *next;  /* g_captures */
};

/* Capture interaction (cuStreamBeginCapture / cuThreadExchangeStreamCaptureMode,
 * as NVIDIA documents them): while a capture begun in GLOBAL mode is active in
 * the process, a thread whose own mode is GLOBAL (the default) may not make
 * "potentially unsafe" calls (here: querying or synchronising events, streams
 * or the context); nor may a thread, unless its mode is RELAXED, while it has
 * a capture of its own begun in GLOBAL or THREAD_LOCAL mode. Such a call fails
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures
 * concerned (all active non-relaxed ones here), whose cuStreamEndCapture then
 * returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. This is what made PyTorch's
 * NCCL watchdog (cudaEventQuery from its own thread) break graph capture. */
static pthread_mutex_t g_captures_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fg_capture *g_captures;     /* active captures */
static _Atomic int g_global_captures;     /* active ones begun in GLOBAL mode */
static _Thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static _Thread_local int t_own_global, t_own_strict; /* this thread's active captures: GLOBAL; GLOBAL or THREAD_LOCAL */

FG_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_mode;
    t_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult fg_capture_unsafe_call(void)
{
    if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    int others = atomic_load(&g_global_captures) - t_own_global;
    if (t_own_strict == 0 && (t_mode != CU_STREAM_CAPTURE_MODE_GLOBAL || others <= 0))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_captures_mu);
    for (struct fg_capture *c = g_captures; c; c = c->next) {
        if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED)
            atomic_store(&c->invalidated, 1);
    }
    pthread_mutex_unlock(&g_captures_mu);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

int fg_capture_invalidated(const struct fg_capture *c) { return atomic_load(&c->invalidated); }

FG_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&g->mu, NULL);
    g->magic = FG_MAGIC_GRAPH;
    *phGraph = g;
    return CUDA_SUCCESS;
}

static int graph_ok(CUgraph g)
{
    return g && g->magic == FG_MAGIC_GRAPH;
}

/* Graph memory stays allocated (a stale handle must stay safe to reject). */
FG_API CUresult cuGraphDestroy(CUgraph hGraph)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!graph_ok(hGraph))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&hGraph->mu);
    for (struct CUgraphNode_st *n = hGraph->nodes; n; n = n->next)
        n->magic = FG_MAGIC_DEAD;
    hGraph->magic = FG_MAGIC_DEAD;
    pthread_mutex_unlock(&hGraph->mu);
    return CUDA_SUCCESS;
}

static CUresult add_node(CUgraph g, uint64_t ns, CUgraphNode *out)
{
    struct CUgraphNode_st *n = calloc(1, sizeof *n);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->magic = FG_MAGIC_GNODE;
    n->ns = ns;
    pthread_mutex_lock(&g->mu);
    n->next = g->nodes;
    g->nodes = n;
    g->total_ns += ns;
    g->kernels++;
    pthread_mutex_unlock(&g->mu);
    if (out)
        *out = n;
    return CUDA_SUCCESS;
}

static CUresult add_kernel_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUfunction f,
                                const unsigned dims[6], void **params)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ph || (ndeps > 0 && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if (!graph_ok(g))
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < ndeps; i++)
        if (!deps[i] || deps[i]->magic != FG_MAGIC_GNODE)
            return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != FG_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 6; i++)
        if (dims[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)dims[3] * dims[4] * dims[5] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    int64_t ns = fg_kernel_ns(f, params);
    if (ns < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return add_node(g, (uint64_t)ns, ph);
}

FG_API CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                     size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p)
        return fg_ready() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    unsigned dims[6] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ};
    return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, p->func, dims, p->kernelParams);
}

FG_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    if (!p)
        return fg_ready() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    if (!p->func && p->kern)
        return CUDA_ERROR_NOT_SUPPORTED; /* CUkernel (library) handles are not simulated */
    unsigned dims[6] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ};
    return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, p->func, dims, p->kernelParams);
}

FG_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraphExec || (flags & ~0xfull))
        return CUDA_ERROR_INVALID_VALUE;
    if (!graph_ok(hGraph))
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&hGraph->mu);
    x->total_ns = hGraph->total_ns;
    x->kernels = hGraph->kernels;
    pthread_mutex_unlock(&hGraph->mu);
    x->magic = FG_MAGIC_GEXEC;
    *phGraphExec = x;
    return CUDA_SUCCESS;
}

FG_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    if (!fg_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!hGraphExec || hGraphExec->magic != FG_MAGIC_GEXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    hGraphExec->magic = FG_MAGIC_DEAD;
    return CUDA_SUCCESS;
}

/* One launch of the whole graph; into a capturing stream it becomes a node. */
static CUresult graph_launch(CUgraphExec x, CUstream hStream)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!x || x->magic != FG_MAGIC_GEXEC)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fg_stream *s = fg_stream_resolve(hStream, ctx);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture)
        return add_node(s->capture->graph, x->total_ns, NULL);
    return x->total_ns ? fg_submit(s, x->total_ns) : CUDA_SUCCESS;
}

FG_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream);
}

FG_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream);
}

CUresult fg_launch_enqueue(struct fg_stream *s, CUfunction f, uint64_t ns)
{
    (void)f;
    if (s->capture)
        return add_node(s->capture->graph, ns, NULL);
    return fg_submit(s, ns);
}

/* The default streams cannot be captured (as with the real legacy stream). */
static CUresult capturable(CUstream h, struct fg_stream **out)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_stream *s = fg_stream_resolve(h, ctx);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s == &ctx->null_stream)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode)
{
    struct fg_stream *s;
    CUresult r = capturable(h, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return FG_ERROR_ILLEGAL_STATE;
    struct fg_capture *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = cuGraphCreate(&c->graph, 0)) != CUDA_SUCCESS) {
        free(c);
        return r;
    }
    c->mode = mode;
    pthread_mutex_lock(&g_captures_mu);
    c->next = g_captures;
    g_captures = c;
    pthread_mutex_unlock(&g_captures_mu);
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
        atomic_fetch_add(&g_global_captures, 1);
        t_own_global++;
    }
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        t_own_strict++;
    s->capture = c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode);
}

FG_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode);
}

static CUresult end_capture(CUstream h, CUgraph *phGraph)
{
    struct fg_stream *s;
    CUresult r = capturable(h, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_capture *c = s->capture;
    if (!c)
        return FG_ERROR_ILLEGAL_STATE;
    s->capture = NULL;
    pthread_mutex_lock(&g_captures_mu);
    for (struct fg_capture **p = &g_captures; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_captures_mu);
    /* Ended by the thread that began it (the real driver refuses another
     * with CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD; not modelled). */
    if (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
        atomic_fetch_sub(&g_global_captures, 1);
        if (t_own_global > 0)
            t_own_global--;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && t_own_strict > 0)
        t_own_strict--;
    if (atomic_load(&c->invalidated)) {
        cuGraphDestroy(c->graph);
        free(c);
        *phGraph = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = c->graph;
    free(c);
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph);
}

FG_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph);
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *status)
{
    struct CUctx_st *ctx;
    CUresult r = fg_enter(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_stream *s = fg_stream_resolve(h, ctx);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    *status = !s->capture                        ? CU_STREAM_CAPTURE_STATUS_NONE
              : atomic_load(&s->capture->invalidated) ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                      : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus);
}

FG_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus);
}
