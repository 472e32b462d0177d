/* container.h — configuration from the device plugin's mounts. In a Kubernetes
 * container the pod's own env wins over the plugin's, so the environment cannot be
 * trusted there: the hook takes its files from fixed paths the plugin mounts
 * (internal/deviceplugin/allocation), after checking in /proc/self/mountinfo that
 * they are the plugin's. See docs/hook.md, "Where the configuration comes from". */
#ifndef HOOK_CONTAINER_H
#define HOOK_CONTAINER_H

#include <stddef.h>

#include "config.h"

#define HOOK_PRELOAD_PATH "/etc/ld.so.preload"
#define HOOK_CONF_PATH "/run/tessera/hook.conf"
#define HOOK_REGION_PATH "/run/tessera/region"
#define HOOK_LIMITS_PATH "/run/tessera/limits"
#define HOOK_CORE_LIMITS_PATH "/run/tessera/core-limits"
#define HOOK_CORE_REGION_PATH "/run/tessera/core-region"

/* Returns 0 when this process sees none of the plugin's mounts (outside Kubernetes,
 * tests: the caller reads the environment); 1 when it does and they check out (cfg
 * filled from hook.conf and the mounted files); -1 with a message in err when they
 * are missing, hidden, writable or not the plugin's (the caller fails closed). */
int container_config(struct hook_config *cfg, char *err, size_t errlen);

#endif
