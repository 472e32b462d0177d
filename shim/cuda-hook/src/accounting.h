/* accounting.h — what this process has charged, per object, so that every free
 * returns exactly the bytes its allocation took; and the byte sizes of objects whose
 * size the driver does not report (arrays). */
#ifndef HOOK_ACCOUNTING_H
#define HOOK_ACCOUNTING_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_driver.h"

/* Separate key spaces: a device pointer and an array handle may have equal values. */
enum acct_space { ACCT_PTR = 1, ACCT_ARRAY, ACCT_MIPMAP, ACCT_VMM, ACCT_CTX };

struct acct_rec {
    uint64_t key;      /* device pointer or handle value */
    uint64_t bytes;    /* charged for it (pool memory: 0, the pool's reservation is charged) */
    void *pool;        /* CUmemoryPool it came from, or NULL */
    int32_t idx;       /* limits-file device index */
    uint32_t space;    /* enum acct_space */
};

/* Remember a charged object. -1 when memory for the table cannot be had. */
int acct_put(const struct acct_rec *rec);
/* Forget an object; true and *out filled when it was known. */
bool acct_take(uint32_t space, uint64_t key, struct acct_rec *out);
/* Objects remembered (tests, logging). */
uint64_t acct_count(void);

/* fork(): hold the table across the fork; the child forgets the parent's objects
 * (their charges stay with the parent's slot). */
void acct_atfork_prepare(void);
void acct_atfork_parent(void);
void acct_atfork_child(void);

/* Bytes an array takes, as the driver lays it out: width x max(h,1) x max(d,1) x
 * channels x element size, rounded up to 512; a mipmapped array is the sum of its
 * levels (each extent halved per level, at least 1), rounded up to 512 once. 0 for
 * a descriptor the driver would reject (unknown format, 0 width). */
uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d);
uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" as NVML prints it; out >= 41 bytes. */
void uuid_format(const CUuuid *u, char *out);

#endif
