/* fg_table.c — hash table of live resources (see fg_table.h). */
#include "fg_table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fg_entry *slots;
static size_t cap;  /* power of two */
static size_t live;

static size_t home(uint64_t key)
{
    uint64_t h = (key >> 4) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) & (cap - 1);
}

static void place(struct fg_entry *tab, size_t n, const struct fg_entry *e)
{
    uint64_t h = (e->key >> 4) * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 20) & (n - 1);
    while (tab[i].key != 0)
        i = (i + 1) & (n - 1);
    tab[i] = *e;
}

static int grow(void)
{
    size_t ncap = cap ? cap * 2 : 1024;
    struct fg_entry *n = calloc(ncap, sizeof *n);
    if (!n)
        return -1;
    for (size_t i = 0; i < cap; i++)
        if (slots[i].key)
            place(n, ncap, &slots[i]);
    free(slots);
    slots = n;
    cap = ncap;
    return 0;
}

static long find(uint64_t key)
{
    if (cap == 0)
        return -1;
    for (size_t i = home(key);; i = (i + 1) & (cap - 1)) {
        if (slots[i].key == key)
            return (long)i;
        if (slots[i].key == 0)
            return -1;
    }
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void erase(size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & (cap - 1);
        if (slots[j].key == 0)
            break;
        size_t k = home(slots[j].key);
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            slots[i] = slots[j];
            i = j;
        }
    }
    memset(&slots[i], 0, sizeof slots[i]);
    live--;
}

void fg_table_insert(const struct fg_entry *e)
{
    pthread_mutex_lock(&table_mu);
    if ((live + 1) * 2 > cap && grow() != 0) {
        pthread_mutex_unlock(&table_mu);
        abort(); /* cannot record a resource: nothing sane left to do */
    }
    place(slots, cap, e);
    live++;
    pthread_mutex_unlock(&table_mu);
}

int fg_table_get(uint64_t key, struct fg_entry *out)
{
    pthread_mutex_lock(&table_mu);
    long i = find(key);
    if (i >= 0)
        *out = slots[i];
    pthread_mutex_unlock(&table_mu);
    return i >= 0 ? 0 : -1;
}

int fg_table_remove(uint64_t key, unsigned kinds, struct fg_entry *out)
{
    pthread_mutex_lock(&table_mu);
    long i = find(key);
    if (i >= 0 && !(kinds & FG_KIND_BIT(slots[i].kind)))
        i = -1;
    if (i >= 0) {
        *out = slots[i];
        erase((size_t)i);
    }
    pthread_mutex_unlock(&table_mu);
    return i >= 0 ? 0 : -1;
}

int fg_table_update(const struct fg_entry *e)
{
    pthread_mutex_lock(&table_mu);
    long i = find(e->key);
    if (i >= 0)
        slots[i] = *e;
    pthread_mutex_unlock(&table_mu);
    return i >= 0 ? 0 : -1;
}

int fg_table_drain_ctx(void *ctx, void (*fn)(const struct fg_entry *, void *), void *arg)
{
    struct fg_entry *batch = NULL;
    size_t n = 0, bcap = 0;
    pthread_mutex_lock(&table_mu);
    for (size_t i = 0; i < cap;) {
        if (slots[i].key == 0 || slots[i].ctx != ctx) {
            i++;
            continue;
        }
        if (n == bcap) {
            bcap = bcap ? bcap * 2 : 64;
            struct fg_entry *b = realloc(batch, bcap * sizeof *b);
            if (!b)
                break; /* leave the rest recorded rather than lose it */
            batch = b;
        }
        batch[n++] = slots[i];
        erase(i); /* an entry may shift into i: look at i again */
    }
    pthread_mutex_unlock(&table_mu);
    for (size_t k = 0; k < n; k++)
        fn(&batch[k], arg);
    free(batch);
    return (int)n;
}

void fg_table_reset(void)
{
    pthread_mutex_init(&table_mu, NULL);
    free(slots);
    slots = NULL;
    cap = 0;
    live = 0;
}
