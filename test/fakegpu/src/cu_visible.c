/* cu_visible.c — CUDA_VISIBLE_DEVICES, as the real driver reads it.
 *
 * Unset: every device, in index order. Otherwise a comma-separated list of
 * device indices or UUIDs ("GPU-…", a unique prefix is enough); the process
 * enumerates those devices in that order. As with NVIDIA's driver, the list
 * ends at the first entry that names no device (or one already listed): the
 * entries before it stay visible, the rest are ignored; an empty list, or
 * one whose first entry is invalid, leaves no device (cuInit then returns
 * CUDA_ERROR_NO_DEVICE). A container whose device plugin hands it GPUs by
 * CDI gets them listed here; the real driver would also hide the others by
 * their absent /dev/nvidiaN, which a simulated driver cannot see. */
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

/* find returns the device entry e (len n) names, or -1. */
static int find(const char *e, size_t n)
{
    while (n > 0 && (*e == ' ' || *e == '\t')) {
        e++;
        n--;
    }
    while (n > 0 && (e[n - 1] == ' ' || e[n - 1] == '\t'))
        n--;
    if (n == 0)
        return -1;
    if (e[0] >= '0' && e[0] <= '9') {
        int v = 0;
        for (size_t i = 0; i < n; i++) {
            if (e[i] < '0' || e[i] > '9' || v > FG_MAX_DEVICES)
                return -1;
            v = v * 10 + (e[i] - '0');
        }
        return v < fg.cfg.count ? v : -1;
    }
    if (n < 5 || strncmp(e, "GPU-", 4) != 0)
        return -1; /* MIG-… and anything else: no whole GPU */
    int found = -1;
    for (int d = 0; d < fg.cfg.count; d++) {
        if (strncmp(fg.cfg.dev[d].uuid_str, e, n) == 0) {
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = d;
        }
    }
    return found;
}

void fg_visible_load(void)
{
    memset(fg.is_visible, 0, sizeof fg.is_visible);
    fg.visible_count = 0;
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    if (list == NULL) {
        for (int d = 0; d < fg.cfg.count; d++) {
            fg.visible[fg.visible_count++] = d;
            fg.is_visible[d] = 1;
        }
        return;
    }
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int d = find(p, n);
        if (d < 0 || fg.is_visible[d])
            return;
        fg.visible[fg.visible_count++] = d;
        fg.is_visible[d] = 1;
        if (!end)
            return;
        p = end + 1;
    }
}
