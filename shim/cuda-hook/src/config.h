/* config.h — the TESSERA_* environment or the plugin's hook.conf, parsed once at
 * initialisation (never on a hot path). See docs/hook.md for the contract. */
#ifndef HOOK_CONFIG_H
#define HOOK_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HOOK_MAX_CTX_RESERVE_MIB (1u << 20) /* 1 TiB: anything larger is a typo */

struct hook_config {
    bool has_region, has_limits, has_core_limits, has_core_region;
    char region_path[PATH_MAX];      /* TESSERA_REGION */
    char limits_path[PATH_MAX];      /* TESSERA_LIMITS */
    char core_limits_path[PATH_MAX]; /* TESSERA_CORE_LIMITS */
    char core_region_path[PATH_MAX]; /* TESSERA_CORE_REGION */
    uint64_t ctx_reserve_bytes;      /* TESSERA_CTX_RESERVE_MIB, in bytes */
    int log_level;                   /* TESSERA_LOG */
};

/* Reads the variables through getenv_fn (getenv in the library, a table in tests).
 * Returns 0, or -1 with a message naming the variable and the problem in err. A
 * failed parse leaves cfg fully defined (defaults) but must be treated as fatal. */
int config_parse(struct hook_config *cfg, const char *(*getenv_fn)(const char *), char *err, size_t errlen);

/* Parses the device plugin's hook.conf (len bytes of text): lines "log=<level>" and
 * "ctx-reserve-mib=<MiB>", blank lines and "#" comments; any other line is an error
 * naming its number. Resets cfg to defaults first; paths are not set. */
int config_parse_hookconf(struct hook_config *cfg, const char *text, size_t len, char *err, size_t errlen);

/* Applies TESSERA_LOG alone: what a pod may still set inside a plugin container. */
int config_parse_log_env(struct hook_config *cfg, const char *(*getenv_fn)(const char *), char *err, size_t errlen);

#endif
