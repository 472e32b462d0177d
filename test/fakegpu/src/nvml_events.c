/* nvml_events.c — event sets. The only events are Xid errors that tests inject
 * through the node state file (xid_last, then xid_seq incremented; the Go helper
 * fakegpu.InjectXid does it): a waiting set reports one event per injection, with
 * the latest injected code. */
#include <stdlib.h>
#include <time.h>

#include "nvml_internal.h"

#define FG_SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError)
#define FG_EVENTSET_MAGIC 0xe5e7u

struct nvmlEventSet_st {
    unsigned magic;
    unsigned long long types[FG_MAX_DEVICES]; /* registered per device */
    uint64_t seen[FG_MAX_DEVICES];            /* xid_seq already reported */
};

static struct nvmlEventSet_st *set_of(nvmlEventSet_t set)
{
    struct nvmlEventSet_st *s = set.handle;
    return s && s->magic == FG_EVENTSET_MAGIC ? s : NULL;
}

FG_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_MEMORY;
    s->magic = FG_EVENTSET_MAGIC;
    set->handle = s;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    struct nvmlEventSet_st *s = set_of(set);
    if (!s)
        return NVML_ERROR_INVALID_ARGUMENT;
    s->magic = 0;
    free(s);
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = FG_SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

FG_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    struct fg_nvml_dev *d;
    nvmlReturn_t r = nvml_dev(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    struct nvmlEventSet_st *s = set_of(set);
    if (!s)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)FG_SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    s->types[d->index] |= eventTypes;
    s->seen[d->index] = atomic_load(&nv.st->dev[d->index].xid_seq);
    return NVML_SUCCESS;
}

/* One pending Xid on a registered device, or -1. */
static int pending(struct nvmlEventSet_st *s, nvmlEventData_t *data)
{
    for (int i = 0; i < nv.cfg.count; i++) {
        if (!(s->types[i] & nvmlEventTypeXidCriticalError))
            continue;
        uint64_t seq = atomic_load(&nv.st->dev[i].xid_seq);
        if (seq == s->seen[i])
            continue;
        s->seen[i]++;
        data->device.handle = (struct nvmlDevice_st *)&nv.dev[i];
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = atomic_load(&nv.st->dev[i].xid_last);
        data->gpuInstanceId = 0xffffffffu;
        data->computeInstanceId = 0xffffffffu;
        return i;
    }
    return -1;
}

FG_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!nvml_ready())
        return NVML_ERROR_UNINITIALIZED;
    struct nvmlEventSet_st *s = set_of(set);
    if (!s || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = fg_now_ns() + (uint64_t)timeoutms * 1000000ull;
    for (;;) {
        if (pending(s, data) >= 0)
            return NVML_SUCCESS;
        if (fg_now_ns() >= deadline)
            return NVML_ERROR_TIMEOUT;
        struct timespec poll = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&poll, NULL);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
    FG_ALIAS(nvmlEventSetWait_v2);
