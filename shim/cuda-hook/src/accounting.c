/* accounting.c — the per-object table. Open addressing with linear probing and
 * backward-shift deletion under one process-local mutex. The mutex is held only
 * for the table operation itself, never across a driver call, and fork() holds it
 * (pthread_atfork) so a child never inherits it locked. */
#include "accounting.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct acct_rec *g_tab; /* space == 0 marks an empty bucket */
static uint64_t g_cap;         /* power of two */
static uint64_t g_len;

static inline uint64_t hash(uint32_t space, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)space << 56)) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static void insert_raw(struct acct_rec *tab, uint64_t cap, const struct acct_rec *rec)
{
    for (uint64_t i = hash(rec->space, rec->key) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (tab[i].space == 0 || (tab[i].space == rec->space && tab[i].key == rec->key)) {
            tab[i] = *rec;
            return;
        }
    }
}

static int grow(void)
{
    uint64_t ncap = g_cap ? g_cap * 2 : 1024;
    struct acct_rec *nt = calloc(ncap, sizeof *nt);
    if (nt == NULL)
        return -1;
    for (uint64_t i = 0; i < g_cap; i++) {
        if (g_tab[i].space != 0)
            insert_raw(nt, ncap, &g_tab[i]);
    }
    free(g_tab);
    g_tab = nt;
    g_cap = ncap;
    return 0;
}

int acct_put(const struct acct_rec *rec)
{
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    if ((g_len + 1) * 2 > g_cap && grow() != 0) {
        rc = -1;
    } else {
        insert_raw(g_tab, g_cap, rec);
        g_len++;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Index of the record, or g_cap when absent. Caller holds g_mu. */
static uint64_t find_locked(uint32_t space, uint64_t key)
{
    if (g_cap == 0)
        return 0;
    uint64_t mask = g_cap - 1;
    for (uint64_t i = hash(space, key) & mask; g_tab[i].space != 0; i = (i + 1) & mask) {
        if (g_tab[i].space == space && g_tab[i].key == key)
            return i;
    }
    return g_cap;
}

/* Remove bucket i, moving later members of its probe run into the hole
 * (backward-shift deletion: no tombstones). Caller holds g_mu. */
static void remove_locked(uint64_t i)
{
    uint64_t mask = g_cap - 1;
    g_len--;
    for (uint64_t hole = i, j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (g_tab[j].space == 0) {
            g_tab[hole].space = 0;
            return;
        }
        uint64_t home = hash(g_tab[j].space, g_tab[j].key) & mask;
        /* j may move to hole if its home is not in (hole, j] cyclically. */
        bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            g_tab[hole] = g_tab[j];
            hole = j;
        }
    }
}

static bool take_locked(uint32_t space, uint64_t key, struct acct_rec *out)
{
    uint64_t i = find_locked(space, key);
    if (i >= g_cap)
        return false;
    *out = g_tab[i];
    remove_locked(i);
    return true;
}

bool acct_take(uint32_t space, uint64_t key, struct acct_rec *out)
{
    pthread_mutex_lock(&g_mu);
    bool found = take_locked(space, key, out);
    pthread_mutex_unlock(&g_mu);
    return found;
}

/* Collect the keys first (removal shifts buckets), then take them. */
static int take_matching(bool (*match)(const struct acct_rec *, const void *), const void *arg,
                         struct acct_rec *out, int max)
{
    int n = 0;
    pthread_mutex_lock(&g_mu);
    for (uint64_t i = 0; i < g_cap && n < max; i++) {
        if (g_tab[i].space != 0 && match(&g_tab[i], arg))
            out[n++] = g_tab[i];
    }
    for (int k = 0; k < n; k++)
        take_locked(out[k].space, out[k].key, &out[k]);
    pthread_mutex_unlock(&g_mu);
    return n;
}

struct range {
    uint32_t space;
    uint64_t lo, hi;
};

static bool in_range(const struct acct_rec *r, const void *arg)
{
    const struct range *q = arg;
    return r->space == q->space && r->key >= q->lo && r->key < q->hi;
}

int acct_take_range(uint32_t space, uint64_t lo, uint64_t hi, struct acct_rec *out, int max)
{
    struct range q = {space, lo, hi};
    return take_matching(in_range, &q, out, max);
}

static bool owned_by(const struct acct_rec *r, const void *arg)
{
    return r->owner == *(const uint64_t *)arg &&
           (r->space == ACCT_PTR || r->space == ACCT_ARRAY || r->space == ACCT_MIPMAP);
}

int acct_take_owned(uint64_t owner, struct acct_rec *out, int max)
{
    return take_matching(owned_by, &owner, out, max);
}

int acct_vmm_update(uint64_t handle, int maps_delta, int release, struct acct_rec *out)
{
    int rc = -1;
    pthread_mutex_lock(&g_mu);
    uint64_t i = find_locked(ACCT_VMM, handle);
    if (i < g_cap) {
        struct acct_rec *r = &g_tab[i];
        rc = release > 0 && r->released ? 2 : 0;
        r->maps += maps_delta;
        if (release)
            r->released = release > 0;
        if (r->released && r->maps <= 0) {
            *out = *r;
            remove_locked(i);
            rc = 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

uint64_t acct_count(void)
{
    pthread_mutex_lock(&g_mu);
    uint64_t n = g_len;
    pthread_mutex_unlock(&g_mu);
    return n;
}

void acct_atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
void acct_atfork_parent(void) { pthread_mutex_unlock(&g_mu); }

void acct_atfork_child(void)
{
    if (g_tab != NULL)
        memset(g_tab, 0, g_cap * sizeof *g_tab);
    g_len = 0;
    pthread_mutex_unlock(&g_mu);
}

static unsigned element_size(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    }
    return 0;
}

/* The normalized formats (CUDA 11.5): UNORM_INT8X1 0xc0 .. SNORM_INT16X4 0xcb, in
 * groups of three (X1, X2, X4 channels), 8-bit for the _INT8Xn and 16-bit for the
 * _INT16Xn groups; the channel count is part of the format. */
#define FORMAT_NORM_FIRST 0xc0u
#define FORMAT_NORM_LAST 0xcbu
/* No format takes more than four 32-bit channels per texel. */
#define MAX_TEXEL_BYTES 16u

/* Bytes per texel: exact for the formats above, and never less than the driver
 * uses for any other (block-compressed, YUV, formats newer than this hook). */
static uint64_t texel_bytes(CUarray_format f, unsigned channels)
{
    if ((unsigned)f >= FORMAT_NORM_FIRST && (unsigned)f <= FORMAT_NORM_LAST) {
        unsigned k = (unsigned)f - FORMAT_NORM_FIRST;
        return (k % 6 < 3 ? 1u : 2u) << (k % 3);
    }
    unsigned es = element_size(f);
    return es ? (uint64_t)es * channels : MAX_TEXEL_BYTES;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t round512(uint64_t n) { return n > UINT64_MAX - 511 ? UINT64_MAX : (n + 511) & ~(uint64_t)511; }

static uint64_t level_bytes(uint64_t w, uint64_t h, uint64_t d, uint64_t texel)
{
    return mul_sat(mul_sat(mul_sat(w, h ? h : 1), d ? d : 1), texel);
}

uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    uint64_t texel = texel_bytes(d->Format, d->NumChannels);
    if (texel == 0 || d->Width == 0)
        return 0;
    return round512(level_bytes(d->Width, d->Height, d->Depth, texel));
}

/* Level l halves every non-zero extent (down to 1); zero extents stay zero. The sum
 * is rounded once, as the driver allocates the levels in one piece. */
uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    uint64_t texel = texel_bytes(d->Format, d->NumChannels);
    if (texel == 0 || d->Width == 0 || levels == 0)
        return 0;
    uint64_t total = 0, w = d->Width, h = d->Height, dd = d->Depth;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t b = level_bytes(w, h, dd, texel);
        total = total > UINT64_MAX - b ? UINT64_MAX : total + b;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        dd = dd > 1 ? dd / 2 : dd;
    }
    return round512(total);
}

void uuid_format(const CUuuid *u, char *out)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}
