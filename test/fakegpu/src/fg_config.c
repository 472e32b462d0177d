/* fg_config.c — device list parsing and the deterministic identities derived from it. */
#include "fg_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FG_DEFAULT_SPEC "NVIDIA H200:143771:132"
#define FG_MAX_MEM_MIB (1ull << 24) /* 16 TiB: anything larger is a typo */
#define FG_MAX_SMS 4096

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* a = FNV-1a-64("fakegpu/<seed>/<index>/a"), b = same with "/b";
 * UUID bytes = big-endian a || big-endian b. */
void fg_uuid_derive(const char *seed, int index, unsigned char out[16])
{
    char buf[320];
    for (int half = 0; half < 2; half++) {
        snprintf(buf, sizeof buf, "fakegpu/%s/%d/%c", seed ? seed : "", index, half ? 'b' : 'a');
        uint64_t h = fnv1a64(buf);
        for (int i = 0; i < 8; i++)
            out[half * 8 + i] = (unsigned char)(h >> (56 - 8 * i));
    }
}

static void format_uuid(const unsigned char u[16], char out[FG_UUID_LEN])
{
    snprintf(out, FG_UUID_LEN,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    if (*s == '\0' || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v == 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Parses "name:mem_mib:sm_count" (name may itself contain ':'; the numbers are the
 * last two fields) into dev. */
static int parse_spec(char *spec, struct fg_device_cfg *dev, const char *where, char *err, unsigned errlen)
{
    char *sm = strrchr(spec, ':');
    if (!sm) {
        snprintf(err, errlen, "%s: \"%s\" is not name:mem_mib:sm_count", where, spec);
        return -1;
    }
    *sm++ = '\0';
    char *mem = strrchr(spec, ':');
    if (!mem) {
        snprintf(err, errlen, "%s: \"%s:%s\" is not name:mem_mib:sm_count", where, spec, sm);
        return -1;
    }
    *mem++ = '\0';
    char *name = trim(spec);
    mem = trim(mem);
    sm = trim(sm);
    unsigned long long v;
    if (*name == '\0' || strlen(name) >= FG_NAME_LEN) {
        snprintf(err, errlen, "%s: field name: must be 1..%d characters", where, FG_NAME_LEN - 1);
        return -1;
    }
    if (parse_uint(mem, FG_MAX_MEM_MIB, &v) != 0) {
        snprintf(err, errlen, "%s: field mem_mib: \"%s\" is not an integer in 1..%llu", where, mem,
                 FG_MAX_MEM_MIB);
        return -1;
    }
    dev->mem_bytes = v << 20;
    if (parse_uint(sm, FG_MAX_SMS, &v) != 0) {
        snprintf(err, errlen, "%s: field sm_count: \"%s\" is not an integer in 1..%d", where, sm, FG_MAX_SMS);
        return -1;
    }
    dev->sm_count = (int)v;
    snprintf(dev->name, sizeof dev->name, "%s", name);
    return 0;
}

static void derive_identity(struct fg_config *cfg)
{
    const char *seed = getenv("FAKEGPU_UUID_SEED");
    for (int i = 0; i < cfg->count; i++) {
        struct fg_device_cfg *d = &cfg->dev[i];
        d->cc_major = 9;
        d->cc_minor = 0;
        fg_uuid_derive(seed, i, d->uuid);
        format_uuid(d->uuid, d->uuid_str);
        d->pci_domain = 0;
        d->pci_bus = 0x18 + 8u * (unsigned)i;
        d->pci_device = 0;
        snprintf(d->bus_id, sizeof d->bus_id, "%08x:%02x:%02x.0", d->pci_domain, d->pci_bus, d->pci_device);
    }
}

/* Splits text on sep (and newlines for files), skipping blank entries and '#' comments. */
int fg_config_parse_list(struct fg_config *cfg, const char *text, char sep, const char *origin, char *err,
                         unsigned errlen)
{
    char *copy = strdup(text);
    if (!copy) {
        snprintf(err, errlen, "%s: out of memory", origin);
        return -1;
    }
    memset(cfg, 0, sizeof *cfg);
    int entry = 0, rc = 0;
    /* strtok_r would merge empty entries and lose line numbers; walk by hand. */
    char *p = copy;
    while (p) {
        char *next = strchr(p, sep);
        if (next)
            *next++ = '\0';
        entry++;
        char *hash = strchr(p, '#');
        if (hash && sep == '\n')
            *hash = '\0';
        char *spec = trim(p);
        if (*spec != '\0') {
            char where[300];
            snprintf(where, sizeof where, "%s %s %d", origin, sep == '\n' ? "line" : "entry", entry);
            if (cfg->count == FG_MAX_DEVICES) {
                snprintf(err, errlen, "%s: more than %d devices", where, FG_MAX_DEVICES);
                rc = -1;
                break;
            }
            if (parse_spec(spec, &cfg->dev[cfg->count], where, err, errlen) != 0) {
                rc = -1;
                break;
            }
            cfg->count++;
        }
        p = next;
    }
    free(copy);
    if (rc == 0)
        derive_identity(cfg);
    return rc;
}

static int load_file(struct fg_config *cfg, const char *path, char *err, unsigned errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "FAKEGPU_CONFIG=%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t cap = 0, len = 0;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                snprintf(err, errlen, "FAKEGPU_CONFIG=%s: out of memory", path);
                return -1;
            }
            text = t;
        }
        memcpy(text + len, buf, n);
        len += n;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(text);
        snprintf(err, errlen, "FAKEGPU_CONFIG=%s: read error", path);
        return -1;
    }
    if (!text) {
        snprintf(err, errlen, "FAKEGPU_CONFIG=%s: file is empty (no devices)", path);
        return -1;
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        snprintf(err, errlen, "FAKEGPU_CONFIG=%s: contains a NUL byte", path);
        return -1;
    }
    char origin[300];
    snprintf(origin, sizeof origin, "FAKEGPU_CONFIG=%s", path);
    int rc = fg_config_parse_list(cfg, text, '\n', origin, err, errlen);
    free(text);
    if (rc == 0 && cfg->count == 0) {
        snprintf(err, errlen, "%s: no device lines", origin);
        return -1;
    }
    return rc;
}

int fg_config_load(struct fg_config *cfg, char *err, unsigned errlen)
{
    const char *list = getenv("FAKEGPU_DEVICES");
    const char *path = getenv("FAKEGPU_CONFIG");
    if (list && path && *path) {
        snprintf(err, errlen, "both FAKEGPU_DEVICES and FAKEGPU_CONFIG are set; set only one");
        return -1;
    }
    if (path && *path)
        return load_file(cfg, path, err, errlen);
    /* FAKEGPU_DEVICES="" is a node with no GPU at all. */
    return fg_config_parse_list(cfg, list ? list : FG_DEFAULT_SPEC, ';', "FAKEGPU_DEVICES", err, errlen);
}

uint64_t fg_config_fingerprint(const struct fg_config *cfg)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < cfg->count; i++) {
        const unsigned char *b = (const unsigned char *)&cfg->dev[i].mem_bytes;
        for (unsigned k = 0; k < sizeof cfg->dev[i].mem_bytes; k++) {
            h ^= b[k];
            h *= 0x100000001b3ull;
        }
        for (int k = 0; k < 16; k++) {
            h ^= cfg->dev[i].uuid[k];
            h *= 0x100000001b3ull;
        }
    }
    return h ^ (uint64_t)cfg->count;
}

int fg_config_context_mib(uint64_t *bytes, char *err, unsigned errlen)
{
    const char *v = getenv("FAKEGPU_CONTEXT_MIB");
    unsigned long long mib = 0;
    *bytes = 0;
    if (!v || strcmp(v, "0") == 0 || *v == '\0')
        return 0;
    if (parse_uint(v, FG_MAX_MEM_MIB, &mib) != 0) {
        snprintf(err, errlen, "FAKEGPU_CONTEXT_MIB: \"%s\" is not an integer in 0..%llu", v, FG_MAX_MEM_MIB);
        return -1;
    }
    *bytes = mib << 20;
    return 0;
}

#define FG_MAX_SLICE_US 1000000ull

int fg_config_slice_ns(uint64_t *ns, char *err, unsigned errlen)
{
    const char *v = getenv("FAKEGPU_SLICE_US");
    unsigned long long us = 1024;
    if (v && *v && (parse_uint(v, FG_MAX_SLICE_US, &us) != 0 || us == 0)) {
        snprintf(err, errlen, "FAKEGPU_SLICE_US: \"%s\" is not an integer in 1..%llu", v, FG_MAX_SLICE_US);
        return -1;
    }
    *ns = us * 1000ull;
    return 0;
}
