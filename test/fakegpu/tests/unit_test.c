/* unit_test.c — tests of the simulated GPU's internals: the device-list parser,
 * the resource hash table and the shared device timeline (exact schedules from
 * synthetic launch rings). The driver API is tested end to end from Go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fg_config.h"
#include "fg_sched.h"
#include "fg_state.h"
#include "fg_table.h"

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void test_parse_ok(void)
{
    struct fg_config c;
    char err[256] = "";
    EXPECT(fg_config_parse_list(&c, " NVIDIA H200:143771:132 ; Tesla T4:15360:40;", ';', "t", err, sizeof err) == 0);
    EXPECT(c.count == 2);
    EXPECT(strcmp(c.dev[0].name, "NVIDIA H200") == 0);
    EXPECT(c.dev[0].mem_bytes == 143771ull << 20);
    EXPECT(c.dev[1].sm_count == 40);
    EXPECT(strcmp(c.dev[1].bus_id, "00000000:20:00.0") == 0);
    EXPECT(strncmp(c.dev[0].uuid_str, "GPU-", 4) == 0 && strlen(c.dev[0].uuid_str) == 40);
    EXPECT(strcmp(c.dev[0].uuid_str, c.dev[1].uuid_str) != 0);
    /* A name may contain ':'; the numbers are the last two fields. */
    EXPECT(fg_config_parse_list(&c, "A:B:1:2", ';', "t", err, sizeof err) == 0 && strcmp(c.dev[0].name, "A:B") == 0);
    EXPECT(fg_config_parse_list(&c, "# comment\n\nX:1:1 # trailing\n", '\n', "f", err, sizeof err) == 0 &&
           c.count == 1);
    EXPECT(fg_config_parse_list(&c, "", ';', "t", err, sizeof err) == 0 && c.count == 0);
}

static void test_parse_bad(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"H200", "entry 1: \"H200\" is not name:mem_mib:sm_count"},
        {"H200:1:1;H200:x:1", "entry 2: field mem_mib: \"x\""},
        {"H200:0:1", "field mem_mib: \"0\""},
        {"H200:-5:1", "field mem_mib"},
        {"H200:10:", "field sm_count: \"\""},
        {"H200:10:99999", "field sm_count"},
        {":10:10", "field name"},
        {"H200:99999999999999999999999:1", "field mem_mib"},
        {"H200:1 0:1", "field mem_mib"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fg_config c;
        char err[256] = "";
        int rc = fg_config_parse_list(&c, cases[i].text, ';', "FAKEGPU_DEVICES", err, sizeof err);
        EXPECT(rc == -1);
        if (!strstr(err, cases[i].want)) {
            fprintf(stderr, "case %zu: error %s lacks %s\n", i, err, cases[i].want);
            failures++;
        }
    }
    struct fg_config c;
    char err[256] = "";
    EXPECT(fg_config_parse_list(&c, "ok:1:1\nbad line\n", '\n', "FAKEGPU_CONFIG=f", err, sizeof err) == -1);
    EXPECT(strstr(err, "FAKEGPU_CONFIG=f line 2") != NULL);
}

static void test_uuid_deterministic(void)
{
    unsigned char a[16], b[16], c[16];
    fg_uuid_derive(NULL, 0, a);
    fg_uuid_derive("", 0, b);
    fg_uuid_derive("seed", 0, c);
    EXPECT(memcmp(a, b, 16) == 0);
    EXPECT(memcmp(a, c, 16) != 0);
}

static void test_table(void)
{
    enum { N = 100000 };
    for (uint64_t i = 1; i <= N; i++) {
        struct fg_entry e = {.key = i << 9, .size = i, .kind = FG_KIND_MEM};
        fg_table_insert(&e);
    }
    struct fg_entry out;
    for (uint64_t i = 1; i <= N; i += 2)
        EXPECT(fg_table_remove(i << 9, FG_KIND_BIT(FG_KIND_MEM), &out) == 0 && out.size == i);
    int bad = 0;
    for (uint64_t i = 1; i <= N; i++) {
        int found = fg_table_get(i << 9, &out) == 0;
        bad += found != (i % 2 == 0) || (found && out.size != i);
    }
    EXPECT(bad == 0);
    EXPECT(fg_table_remove(2 << 9, FG_KIND_BIT(FG_KIND_ARRAY), &out) == -1);
}

static int drained;
static void count_cb(const struct fg_entry *e, void *arg)
{
    (void)e;
    (void)arg;
    drained++;
}

static void test_drain(void)
{
    fg_table_reset();
    int a, b;
    for (uint64_t i = 1; i <= 5000; i++) {
        struct fg_entry e = {.key = i << 12, .ctx = (i % 3) ? (void *)&a : (void *)&b, .kind = FG_KIND_MEM};
        fg_table_insert(&e);
    }
    EXPECT(fg_table_drain_ctx(&a, count_cb, NULL) == 3334 && drained == 3334);
    struct fg_entry out;
    int left = 0;
    for (uint64_t i = 1; i <= 5000; i++)
        left += fg_table_get(i << 12, &out) == 0;
    EXPECT(left == 1666);
}

/* A state with `live` slots owned by this (live) process, one by a process that
 * holds no slot lock (dead), slice 1000 ns. The slot locks live on a scratch
 * file, as they would on the state file. */
static struct fg_state *sched_state(int live)
{
    struct fg_state *st = calloc(1, sizeof *st);
    st->hdr.device_count = 1;
    st->hdr.slice_ns = 1000;
    for (int i = 0; i < live; i++)
        EXPECT(fg_state_claim(st) == &st->slot[i]);
    atomic_store(&st->slot[live].owner, 0x7ffffff0ull); /* no such pid */
    atomic_store(&st->hdr.slot_hwm, (uint32_t)live + 1);
    return st;
}

static uint64_t queued[FG_MAX_SLOTS];

static void push(struct fg_state *st, int c, uint64_t arrive, uint64_t dur)
{
    struct fg_sched_slot *ss = &st->sched[c];
    uint64_t seq = atomic_load(&ss->head);
    struct fg_sched_entry *e = &ss->ring[seq % FG_RING];
    e->arrive_ns = arrive;
    e->end_pos = queued[c] += dur;
    e->dev = 0;
    atomic_store(&e->done_ns, 0);
    atomic_store(&ss->head, seq + 1);
}

#define T0 1000000ull

static void test_sched_alone_and_order(void)
{
    memset(queued, 0, sizeof queued);
    struct fg_state *st = sched_state(1);
    static struct fg_sched_snap s;
    push(st, 0, T0, 2500);
    push(st, 0, T0, 500);
    push(st, 0, T0 + 100, 1000);
    fg_sched_load(st, 0, &s);
    EXPECT(fg_sched_advance(st, &s, T0 + 10000, FG_NO_CTX, 0, 1) == 0);
    EXPECT(s.ctx[0].done_pos == 4000 && s.ctx[0].busy_ns == 4000 && s.busy_ns == 4000);
    /* Alone, the context renews its slice: kernels back to back, each ends in order. */
    EXPECT(atomic_load(&st->sched[0].ring[0].done_ns) == T0 + 2500);
    EXPECT(atomic_load(&st->sched[0].ring[1].done_ns) == T0 + 3000);
    EXPECT(atomic_load(&st->sched[0].ring[2].done_ns) == T0 + 4000);
    /* Idle gap, then more work: it starts at its arrival. */
    push(st, 0, T0 + 20000, 300);
    EXPECT(fg_sched_advance(st, &s, UINT64_MAX, 0, 4300, 0) == T0 + 20300);
    free(st);
}

static void test_sched_slices(void)
{
    memset(queued, 0, sizeof queued);
    struct fg_state *st = sched_state(2);
    static struct fg_sched_snap s, whole;
    push(st, 0, T0, 3000);       /* longer than a slice */
    push(st, 1, T0 + 100, 500);  /* arrives during ctx 0's slice */
    fg_sched_load(st, 0, &s);
    /* ctx 0 [T0, +1000), ctx 1 [+1000, +1500) and yields, ctx 0 [+1500, +3500). */
    EXPECT(fg_sched_advance(st, &s, UINT64_MAX, 1, 500, 0) == T0 + 1500);
    fg_sched_load(st, 0, &s);
    EXPECT(fg_sched_advance(st, &s, UINT64_MAX, 0, 3000, 0) == T0 + 3500);
    /* Stepwise replays give the same timeline as one. */
    fg_sched_load(st, 0, &s);
    fg_sched_advance(st, &s, T0 + 1200, FG_NO_CTX, 0, 1);
    EXPECT(s.ctx[0].done_pos == 1000 && s.ctx[1].done_pos == 200 && s.cur == 1);
    fg_sched_advance(st, &s, T0 + 3000, FG_NO_CTX, 0, 1);
    fg_sched_load(st, 0, &whole);
    fg_sched_advance(st, &whole, T0 + 3000, FG_NO_CTX, 0, 1);
    EXPECT(s.ctx[0].done_pos == 2500 && whole.ctx[0].done_pos == 2500 && s.ctx[1].busy_ns == 500);
    EXPECT(atomic_load(&st->sched[1].ring[0].done_ns) == T0 + 1500);
    /* Commit: the snapshot is what later loads see; the next commit uses another buffer. */
    uint64_t w0 = atomic_load(&st->dev[0].sched);
    EXPECT(fg_sched_commit(st, 0, w0, &s) == 0);
    uint64_t w1 = atomic_load(&st->dev[0].sched);
    EXPECT(FG_SCHED_GEN(w1) == 1 && FG_SCHED_BUF(w1) != 0);
    EXPECT(fg_sched_commit(st, 0, w0, &s) == -1); /* stale: someone committed since */
    fg_sched_load(st, 0, &whole);
    EXPECT(whole.sim_ns == T0 + 3000 && whole.ctx[0].done_pos == 2500 && whole.busy_ns == 3000);
    fg_sched_advance(st, &whole, T0 + 3200, FG_NO_CTX, 0, 1);
    EXPECT(fg_sched_commit(st, 0, w1, &whole) == 0);
    EXPECT(FG_SCHED_BUF(atomic_load(&st->dev[0].sched)) != FG_SCHED_BUF(w1));
    /* A launch published after the snapshot's instant, stamped before it, counts
     * from the snapshot on (it reached the device then). */
    push(st, 1, T0 + 100, 400);
    fg_sched_load(st, 0, &s);
    EXPECT(fg_sched_advance(st, &s, UINT64_MAX, 1, 900, 0) == T0 + 3500 + 400);
    free(st);
}

static void test_sched_round_robin_and_dead(void)
{
    memset(queued, 0, sizeof queued);
    struct fg_state *st = sched_state(3); /* slot 3: a dead owner */
    static struct fg_sched_snap s;
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 10; k++)
            push(st, c, T0, 700); /* kernels shorter than the slice: the slice spans them */
    fg_sched_load(st, 0, &s);
    fg_sched_advance(st, &s, T0 + 3000, FG_NO_CTX, 0, 1);
    for (int c = 0; c < 3; c++)
        EXPECT(s.ctx[c].busy_ns == 1000);
    EXPECT(s.ctx[3].busy_ns == 0 && s.ctx[3].done_pos == 7000); /* dropped, never ran */
    fg_sched_advance(st, &s, T0 + 30000, FG_NO_CTX, 0, 1);
    EXPECT(s.busy_ns == 21000 && s.ctx[2].done_pos == 7000 && s.cur == FG_NO_CTX);
    /* The last of three equal contexts ends last. */
    EXPECT(atomic_load(&st->sched[2].ring[9].done_ns) == T0 + 21000);
    /* A new owner in a slot starts a fresh record. */
    atomic_store(&st->slot[3].owner, 0); /* reaped */
    EXPECT(fg_state_claim(st) == &st->slot[3]); /* the new owner holds the slot's lock */
    queued[3] = 0;
    push(st, 3, T0 + 40000, 100);
    fg_sched_advance(st, &s, T0 + 50000, FG_NO_CTX, 0, 1);
    EXPECT(s.ctx[3].busy_ns == 100 && s.ctx[3].done_pos == 100);
    free(st);
}

int main(void)
{
    test_parse_ok();
    test_parse_bad();
    test_uuid_deterministic();
    test_table();
    test_drain();
    char scratch[] = "/tmp/fakegpu-unit-XXXXXX";
    int fd = mkstemp(scratch);
    EXPECT(fd >= 0 && fg_state_lock_file(scratch) == 0);
    test_sched_alone_and_order();
    test_sched_slices();
    test_sched_round_robin_and_dead();
    unlink(scratch);
    if (failures) {
        fprintf(stderr, "fakegpu unit tests: %d failure(s)\n", failures);
        return 1;
    }
    printf("fakegpu unit tests: ok\n");
    return 0;
}
