/* accounting.h — what this process has charged, per object, so that every free
 * returns exactly the bytes its allocation took; and the byte sizes of objects whose
 * size the driver does not report (arrays). */
#ifndef HOOK_ACCOUNTING_H
#define HOOK_ACCOUNTING_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_driver.h"

/* Separate key spaces: a device pointer and an array handle may have equal values. */
enum acct_space { ACCT_PTR = 1, ACCT_ARRAY, ACCT_MIPMAP, ACCT_VMM, ACCT_CTX, ACCT_MAP };

struct acct_rec {
    uint64_t key;      /* device pointer, handle, or (ACCT_MAP) mapped address */
    uint64_t bytes;    /* charged for it (pool memory: 0, the pool's reservation is charged) */
    void *pool;        /* CUmemoryPool it came from, or NULL */
    uint64_t owner;    /* the context it was made in (freed with it); ACCT_MAP: the VMM handle */
    int32_t idx;       /* limits-file device index */
    uint32_t space;    /* enum acct_space */
    int32_t maps;      /* ACCT_VMM: live mappings of the handle */
    uint32_t released; /* ACCT_VMM: cuMemRelease was called; the memory goes at the last unmap */
};

/* Remember a charged object. -1 when memory for the table cannot be had. */
int acct_put(const struct acct_rec *rec);
/* Forget an object; true and *out filled when it was known. */
bool acct_take(uint32_t space, uint64_t key, struct acct_rec *out);
/* Forget up to max records of space whose key is in [lo, hi) into out; how many. */
int acct_take_range(uint32_t space, uint64_t lo, uint64_t hi, struct acct_rec *out, int max);
/* Forget up to max pointer, array and mipmap records made in context owner. */
int acct_take_owned(uint64_t owner, struct acct_rec *out, int max);

/* A VMM handle's physical memory lives until it is released and its last mapping is
 * gone. Apply maps_delta and release (+1 released, -1 the release failed) to the
 * handle's record: -1 when the handle is not remembered, 1 when it is now released
 * and unmapped (forgotten; *out filled: give its bytes back), 2 when release is +1
 * and it was released already (a double release, which the driver refuses), 0
 * otherwise. */
int acct_vmm_update(uint64_t handle, int maps_delta, int release, struct acct_rec *out);

/* Objects remembered (tests, logging). */
uint64_t acct_count(void);

/* fork(): hold the table across the fork; the child forgets the parent's objects
 * (their charges stay with the parent's slot). */
void acct_atfork_prepare(void);
void acct_atfork_parent(void);
void acct_atfork_child(void);

/* Bytes an array takes, as the driver lays it out: width x max(h,1) x max(d,1) x
 * bytes per texel, rounded up to 512; a mipmapped array is the sum of its levels
 * (each extent halved per level, at least 1), rounded up to 512 once. A texel is
 * channels x element size for the classic formats, what the name says for the
 * normalized ones, and 16 bytes (the most any format takes) for every other
 * format, so that none is ever charged less than it takes. 0 for a descriptor
 * the driver would reject (0 width or channels). */
uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d);
uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" as NVML prints it; out >= 41 bytes. */
void uuid_format(const CUuuid *u, char *out);

#endif
