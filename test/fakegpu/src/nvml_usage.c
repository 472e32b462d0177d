/* nvml_usage.c — memory, processes and utilisation, read from the node state. */
#include <string.h>
#include <time.h>

#include "nvml_internal.h"

/* The device's timeline replayed to `now` (fg_sched.h): exact, whenever asked. */
static struct fg_sched_snap *timeline(int dev, uint64_t now)
{
    static __thread struct fg_sched_snap s;
    fg_sched_now(nv.st, dev, -1, now, &s);
    return &s;
}

uint64_t nvml_busy_done(int dev, uint64_t now)
{
    return timeline(dev, now)->busy_ns;
}

static void mem_view(int dev, unsigned long long *total, unsigned long long *used, unsigned long long *free_b)
{
    fg_state_reap(nv.st);
    uint64_t cap = nv.cfg.dev[dev].mem_bytes, u = fg_state_used(nv.st, dev);
    *total = cap;
    *used = u;
    *free_b = u >= cap ? 0 : cap - u;
}

FG_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    mem_view(d->index, &memory->total, &memory->used, &memory->free);
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->reserved = 0;
    mem_view(d->index, &memory->total, &memory->used, &memory->free);
    return NVML_SUCCESS;
}

/* Live processes with a context or memory on dev: calls fn(pid, used, arg). */
static unsigned for_each_process(int dev, void (*fn)(unsigned, uint64_t, unsigned, void *), void *arg)
{
    fg_state_reap(nv.st);
    unsigned n = 0;
    uint32_t hwm = atomic_load(&nv.st->hdr.slot_hwm);
    for (uint32_t i = 0; i < hwm && i < FG_MAX_SLOTS; i++) {
        struct fg_state_slot *s = &nv.st->slot[i];
        uint64_t owner = atomic_load(&s->owner);
        uint32_t pid = fg_owner_pid(owner);
        if (pid == 0)
            continue;
        uint64_t used = atomic_load(&s->used[dev]);
        if (used == 0 && atomic_load(&s->contexts[dev]) == 0)
            continue;
        if (fn)
            fn(pid, used, n, arg);
        n++;
    }
    return n;
}

struct proc_out {
    int version;
    unsigned cap;
    void *infos;
};

static void put_process(unsigned pid, uint64_t used, unsigned i, void *arg)
{
    struct proc_out *o = arg;
    if (i >= o->cap)
        return;
    if (o->version == 1) {
        nvmlProcessInfo_v1_t *p = &((nvmlProcessInfo_v1_t *)o->infos)[i];
        p->pid = pid;
        p->usedGpuMemory = used;
    } else {
        nvmlProcessInfo_v2_t *p = &((nvmlProcessInfo_v2_t *)o->infos)[i];
        p->pid = pid;
        p->usedGpuMemory = used;
        p->gpuInstanceId = 0xffffffffu;
        p->computeInstanceId = 0xffffffffu;
    }
}

static nvmlReturn_t running(nvmlDevice_t device, unsigned int *infoCount, void *infos, int version)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount || (*infoCount > 0 && !infos))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned need = for_each_process(d->index, NULL, NULL);
    if (need > *infoCount) {
        *infoCount = need;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    struct proc_out o = {.version = version, .cap = *infoCount, .infos = infos};
    /* A process may appear between the two passes: never write past the caller's array. */
    unsigned got = for_each_process(d->index, put_process, &o);
    *infoCount = got < o.cap ? got : o.cap;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                         nvmlProcessInfo_v1_t *infos)
{
    return running(device, infoCount, infos, 1);
}

FG_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                            nvmlProcessInfo_v2_t *infos)
{
    return running(device, infoCount, infos, 2);
}

FG_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                            nvmlProcessInfo_t *infos)
{
    return running(device, infoCount, infos, 3);
}

/* Percentage of wall time the device was busy since this process's previous
 * sample (the first sample covers the time since nvmlInit). */
FG_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now = fg_now_ns(), busy = nvml_busy_done(d->index, now);
    uint64_t dt = now - d->util_prev_ns, db = busy - d->util_prev_busy;
    unsigned pct = dt ? (unsigned)((db * 100 + dt / 2) / dt) : 0;
    if (pct > 100)
        pct = 100;
    d->util_prev_ns = now;
    d->util_prev_busy = busy;
    utilization->gpu = pct;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

static uint64_t realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000u;
}

/* One sample per live process with a context on the device: smUtil is the share
 * of wall time its kernels ran on the device since this process last sampled it
 * (or since it first used the device). */
FG_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *processSamplesCount,
                                                    unsigned long long lastSeenTimeStamp)
{
    (void)lastSeenTimeStamp;
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned need = for_each_process(d->index, NULL, NULL);
    if (!utilization || *processSamplesCount < need) {
        *processSamplesCount = need;
        return need ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_NOT_FOUND;
    }
    uint64_t now = fg_now_ns(), stamp = realtime_us();
    const struct fg_sched_snap *tl = timeline(d->index, now);
    unsigned n = 0;
    uint32_t hwm = atomic_load(&nv.st->hdr.slot_hwm);
    for (uint32_t i = 0; i < hwm && i < FG_MAX_SLOTS && n < *processSamplesCount; i++) {
        struct fg_state_slot *s = &nv.st->slot[i];
        uint64_t owner = atomic_load(&s->owner);
        uint32_t pid = fg_owner_pid(owner);
        if (pid == 0 || (atomic_load(&s->contexts[d->index]) == 0 && atomic_load(&s->used[d->index]) == 0))
            continue;
        uint64_t busy = tl->ctx[i].tag == owner ? tl->ctx[i].busy_ns : 0;
        uint64_t since = atomic_load(&s->claimed_ns), base = 0;
        if (d->proc_prev[i].owner == owner) {
            since = d->proc_prev[i].ns;
            base = d->proc_prev[i].busy;
        }
        uint64_t dt = now > since ? now - since : 0, db = busy - base;
        unsigned pct = dt ? (unsigned)((db * 100 + dt / 2) / dt) : 0;
        d->proc_prev[i].owner = owner;
        d->proc_prev[i].ns = now;
        d->proc_prev[i].busy = busy;
        nvmlProcessUtilizationSample_t *u = &utilization[n++];
        memset(u, 0, sizeof *u);
        u->pid = pid;
        u->timeStamp = stamp;
        u->smUtil = pct > 100 ? 100 : pct;
    }
    *processSamplesCount = n;
    return n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* The simulated GPU runs no graphics and no MPS clients. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                          nvmlProcessInfo_v1_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

FG_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_v2_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
    FG_ALIAS(nvmlDeviceGetGraphicsRunningProcesses_v2);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v1_t *infos)
    FG_ALIAS(nvmlDeviceGetGraphicsRunningProcesses);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_v2_t *infos)
    FG_ALIAS(nvmlDeviceGetGraphicsRunningProcesses_v2);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos)
    FG_ALIAS(nvmlDeviceGetGraphicsRunningProcesses_v2);
