/*
 * fg_table.h — the process's table of live driver resources, keyed by device
 * address or handle value: allocations, arrays, VMM handles and reservations.
 * Open addressing with linear probing and backward-shift deletion, under one
 * process-local mutex (never shared between processes).
 */
#ifndef FAKEGPU_TABLE_H
#define FAKEGPU_TABLE_H

#include <stdint.h>

enum fg_kind {
    FG_KIND_NONE = 0,
    FG_KIND_MEM,        /* cuMemAlloc_v2 */
    FG_KIND_PITCH,      /* cuMemAllocPitch_v2 */
    FG_KIND_MANAGED,    /* cuMemAllocManaged */
    FG_KIND_POOL,       /* cuMemAllocAsync / FromPoolAsync: aux = chunk */
    FG_KIND_ARRAY,      /* cuArrayCreate_v2 / cuArray3DCreate_v2 */
    FG_KIND_MIPMAP,     /* cuMipmappedArrayCreate */
    FG_KIND_VMM_HANDLE, /* cuMemCreate: aux = struct fg_vmm_handle */
    FG_KIND_VA_RANGE,   /* cuMemAddressReserve */
};

struct fg_entry {
    uint64_t key;      /* device address or handle value; 0 = empty */
    uint64_t size;     /* bytes requested (or reserved range size) */
    uint64_t charged;  /* physical bytes charged to the node state */
    void *ctx;         /* owning context (freed with it), or NULL */
    void *aux;
    int32_t dev;
    int32_t kind;
};

void fg_table_insert(const struct fg_entry *e);
/* Copies the entry for key into *out; 0 if found, -1 if not. */
int fg_table_get(uint64_t key, struct fg_entry *out);
#define FG_KIND_BIT(k) (1u << (k))
/* Removes the entry for key into *out if its kind is in kinds (a set of
 * FG_KIND_BIT); 0 if removed, -1 if absent or of another kind. */
int fg_table_remove(uint64_t key, unsigned kinds, struct fg_entry *out);
/* Updates aux/charged of an existing entry; 0 if found. */
int fg_table_update(const struct fg_entry *e);
/* Removes every entry whose ctx matches, then calls fn on each (outside the lock).
 * Returns how many. */
int fg_table_drain_ctx(void *ctx, void (*fn)(const struct fg_entry *, void *), void *arg);
/* Forgets everything (fork child). */
void fg_table_reset(void);

#endif
