/* abi_files.h — write a fresh usage region and a limits file as the node side does,
 * for the C unit tests and the benchmark (the Go side uses internal/region). */
#ifndef HOOK_TEST_ABI_FILES_H
#define HOOK_TEST_ABI_FILES_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera_abi.h"

static void abi_write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, data, n) != (ssize_t)n) {
        perror(path);
        exit(2);
    }
    close(fd);
}

static void abi_write_region(const char *path)
{
    tessera_region *r = calloc(1, sizeof *r);
    r->magic = TESSERA_REGION_MAGIC;
    r->abi_version = TESSERA_ABI_VERSION;
    r->size = sizeof *r;
    r->max_devices = TESSERA_MAX_DEVICES;
    r->max_procs = TESSERA_MAX_PROCS;
    abi_write_file(path, r, sizeof *r);
    free(r);
}

/* n devices: uuids[i] capped at caps[i] bytes, with core_limit_pct cores[i]. */
static void abi_write_limits(const char *path, int n, const char *const uuids[], const uint64_t caps[],
                             const uint32_t cores[])
{
    tessera_limits *l = calloc(1, sizeof *l);
    l->magic = TESSERA_LIMITS_MAGIC;
    l->abi_version = TESSERA_ABI_VERSION;
    l->size = sizeof *l;
    l->device_count = (uint32_t)n;
    for (int i = 0; i < n; i++) {
        snprintf(l->devices[i].uuid, sizeof l->devices[i].uuid, "%s", uuids[i]);
        l->devices[i].mem_limit_bytes = caps[i];
        l->devices[i].core_limit_pct = cores[i];
    }
    abi_write_file(path, l, sizeof *l);
    free(l);
}

#endif
