/* config.c — parse the TESSERA_* environment and the device plugin's hook.conf.
 * Every malformed value is an error: the caller fails closed rather than guessing
 * what the node side meant. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "log.h"

static int parse_path(const char *name, const char *v, char *out, bool *present, char *err, size_t errlen)
{
    *present = false;
    if (v == NULL)
        return 0;
    size_t n = strlen(v);
    if (n == 0) {
        snprintf(err, errlen, "%s is set but empty", name);
        return -1;
    }
    if (n >= PATH_MAX) {
        snprintf(err, errlen, "%s is %zu bytes long, longer than PATH_MAX", name, n);
        return -1;
    }
    memcpy(out, v, n + 1);
    *present = true;
    return 0;
}

static int parse_mib(const char *name, const char *v, uint64_t *bytes, char *err, size_t errlen)
{
    *bytes = 0;
    if (v == NULL)
        return 0;
    uint64_t mib = 0;
    if (*v == '\0') {
        snprintf(err, errlen, "%s is set but empty; want a whole number of MiB", name);
        return -1;
    }
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') {
            snprintf(err, errlen, "%s=\"%.40s\": not a whole number of MiB", name, v);
            return -1;
        }
        mib = mib * 10 + (uint64_t)(*p - '0');
        if (mib > HOOK_MAX_CTX_RESERVE_MIB) {
            snprintf(err, errlen, "%s=\"%.40s\": more than %u MiB", name, v, HOOK_MAX_CTX_RESERVE_MIB);
            return -1;
        }
    }
    *bytes = mib << 20;
    return 0;
}

static int parse_level(const char *name, const char *v, int *level, char *err, size_t errlen)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    *level = HOOK_LOG_WARN;
    if (v == NULL)
        return 0;
    for (int i = 0; i < 4; i++) {
        if (strcmp(v, names[i]) == 0) {
            *level = i;
            return 0;
        }
    }
    snprintf(err, errlen, "%s=\"%.40s\": want error, warn, info or debug", name, v);
    return -1;
}

int config_parse(struct hook_config *cfg, const char *(*getenv_fn)(const char *), char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->log_level = HOOK_LOG_WARN;
    err[0] = '\0';
    /* The log level first, so that it applies to the messages about the others. */
    if (parse_level("TESSERA_LOG", getenv_fn("TESSERA_LOG"), &cfg->log_level, err, errlen) ||
        parse_path("TESSERA_REGION", getenv_fn("TESSERA_REGION"), cfg->region_path, &cfg->has_region, err,
                   errlen) ||
        parse_path("TESSERA_LIMITS", getenv_fn("TESSERA_LIMITS"), cfg->limits_path, &cfg->has_limits, err,
                   errlen) ||
        parse_path("TESSERA_CORE_LIMITS", getenv_fn("TESSERA_CORE_LIMITS"), cfg->core_limits_path,
                   &cfg->has_core_limits, err, errlen) ||
        parse_path("TESSERA_CORE_REGION", getenv_fn("TESSERA_CORE_REGION"), cfg->core_region_path,
                   &cfg->has_core_region, err, errlen) ||
        parse_mib("TESSERA_CTX_RESERVE_MIB", getenv_fn("TESSERA_CTX_RESERVE_MIB"), &cfg->ctx_reserve_bytes, err,
                  errlen))
        return -1;
    if (cfg->has_limits && !cfg->has_region) {
        snprintf(err, errlen, "TESSERA_LIMITS is set but TESSERA_REGION is not: there is nowhere to account usage");
        return -1;
    }
    return 0;
}

/* One "key=value" line of hook.conf; the key names the error. */
static int parse_conf_line(struct hook_config *cfg, const char *line, size_t len, int lineno, char *err, size_t errlen)
{
    char buf[128], name[64];
    if (len >= sizeof buf) {
        snprintf(err, errlen, "hook.conf line %d: longer than %zu bytes", lineno, sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%.*s", (int)len, line); /* not memcpy: GLIBC_2.14 (glibc_baseline.h) */
    char *eq = strchr(buf, '=');
    if (eq == NULL) {
        snprintf(err, errlen, "hook.conf line %d: \"%.40s\" is not key=value", lineno, buf);
        return -1;
    }
    *eq = '\0';
    snprintf(name, sizeof name, "hook.conf line %d %.20s", lineno, buf);
    if (strcmp(buf, "log") == 0)
        return parse_level(name, eq + 1, &cfg->log_level, err, errlen);
    if (strcmp(buf, "ctx-reserve-mib") == 0)
        return parse_mib(name, eq + 1, &cfg->ctx_reserve_bytes, err, errlen);
    snprintf(err, errlen, "hook.conf line %d: unknown key \"%.40s\" (want log or ctx-reserve-mib)", lineno, buf);
    return -1;
}

int config_parse_hookconf(struct hook_config *cfg, const char *text, size_t len, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->log_level = HOOK_LOG_WARN;
    err[0] = '\0';
    if (memchr(text, '\0', len) != NULL) {
        snprintf(err, errlen, "hook.conf: contains a NUL byte");
        return -1;
    }
    int lineno = 0;
    for (const char *s = text, *end = text + len; s < end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        lineno++;
        if (n > 0 && s[0] != '#' && parse_conf_line(cfg, s, n, lineno, err, errlen) != 0)
            return -1;
        s += n + 1;
    }
    return 0;
}

int config_parse_log_env(struct hook_config *cfg, const char *(*getenv_fn)(const char *), char *err, size_t errlen)
{
    const char *v = getenv_fn("TESSERA_LOG");
    return v == NULL ? 0 : parse_level("TESSERA_LOG", v, &cfg->log_level, err, errlen);
}
