/* unit_test.c — tests of the simulated GPU's internals: the device-list parser and
 * the resource hash table. The driver API is tested end to end from Go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_config.h"
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

int main(void)
{
    test_parse_ok();
    test_parse_bad();
    test_uuid_deterministic();
    test_table();
    test_drain();
    if (failures) {
        fprintf(stderr, "fakegpu unit tests: %d failure(s)\n", failures);
        return 1;
    }
    printf("fakegpu unit tests: ok\n");
    return 0;
}
