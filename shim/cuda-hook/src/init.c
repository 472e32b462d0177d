/* init.c — lazy initialisation, fork and exit handling. Loading the library runs
 * nothing; the first intercepted call parses the environment, opens the real
 * driver and maps the limits and region files, exactly once (hook_once). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accounting.h"
#include "compute.h"
#include "container.h"
#include "glibc_baseline.h"
#include "hook.h"
#include "interpose.h"
#include "limiter.h"
#include "log.h"
#include "once.h"
#include "pools.h"
#include "real.h"

_Atomic int hook_ready;
bool hook_failed_closed;
struct hook_config hook_cfg;
struct cuda_real REAL;
struct nvml_real REAL_NVML;

static hook_once_t g_once;
static hook_once_t g_nvml_once;
static _Thread_local int t_in_init;

void views_atfork_child(void);

bool hook_in_init(void) { return t_in_init != 0; }

static const char *env(const char *name) { return getenv(name); }

static void fail_closed(const char *why)
{
    hook_failed_closed = true;
    hook_log(HOOK_LOG_ERROR, "%s; GPU allocations in this process fail with CUDA_ERROR_NOT_INITIALIZED", why);
}

/* Inside a plugin container these variables come from the pod as much as from
 * the plugin (the pod's env wins in kubelet): say so when they differ from what
 * the mounts decided, so a tenant's attempt shows in its own log. */
static void warn_ignored_env(void)
{
    char reserve[24];
    snprintf(reserve, sizeof reserve, "%llu", (unsigned long long)(hook_cfg.ctx_reserve_bytes >> 20));
    const char *const vars[][2] = {{"TESSERA_REGION", HOOK_REGION_PATH},
                                   {"TESSERA_LIMITS", HOOK_LIMITS_PATH},
                                   {"TESSERA_CORE_LIMITS", HOOK_CORE_LIMITS_PATH},
                                   {"TESSERA_CORE_REGION", HOOK_CORE_REGION_PATH},
                                   {"TESSERA_CTX_RESERVE_MIB", reserve}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i][0]);
        if (v != NULL && strcmp(v, vars[i][1]) != 0)
            hook_log(HOOK_LOG_WARN, "%s=%.200s ignored: in a container of the device plugin only its mounts count",
                     vars[i][0], v);
    }
}

/* The plugin's mounts when this process has them, the environment otherwise. */
static int load_config(char *err, size_t errlen)
{
    int mounted = container_config(&hook_cfg, err, errlen);
    if (mounted == 0)
        return config_parse(&hook_cfg, env, err, errlen);
    if (mounted < 0 || config_parse_log_env(&hook_cfg, env, err, errlen) != 0)
        return -1;
    hook_log_threshold = hook_cfg.log_level;
    warn_ignored_env();
    return 0;
}

static void atfork_prepare(void)
{
    pools_atfork_prepare();
    acct_atfork_prepare();
}

static void atfork_parent(void)
{
    acct_atfork_parent();
    pools_atfork_parent();
}

static void atfork_child(void)
{
    acct_atfork_child();
    pools_atfork_child();
    views_atfork_child();
    limiter_atfork_child();
    compute_atfork_child();
}

/* Compute shares need both core files and the driver's timing events. */
static void open_compute(void)
{
    const tessera_limits *core_limits;
    tessera_region *core_region;
    limiter_core_files(&core_limits, &core_region);
    if (core_limits == NULL)
        return;
    if (core_region == NULL) {
        hook_log(HOOK_LOG_WARN, "compute shares are not enforced: core limits without a core region (an "
                                "Allocate response from a device plugin before compute time slices)");
        return;
    }
    if (REAL.cuEventCreate == NULL || REAL.cuEventRecord == NULL || REAL.cuEventQuery == NULL ||
        REAL.cuEventElapsedTime == NULL || REAL.cuEventDestroy_v2 == NULL || REAL.cuCtxGetCurrent == NULL ||
        REAL.cuCtxGetDevice == NULL) {
        hook_log(HOOK_LOG_WARN, "compute shares are not enforced: the driver lacks timing events");
        return;
    }
    if (compute_open(core_limits, core_region))
        hook_log(HOOK_LOG_INFO, "compute shares in force (%s)", hook_cfg.core_limits_path);
}

static void init_once(void)
{
    char err[512];
    t_in_init = 1;
    if (!dl_available()) {
        /* glibc < 2.34 without libdl in the process: no driver can be loaded here
         * either, so nothing is lost by refusing (glibc_baseline.h). */
        fail_closed("dlopen is unavailable (glibc older than 2.34 and libdl.so.2 not loaded)");
        interpose_resolve_cuda(NULL);
        t_in_init = 0;
        atomic_store_explicit(&hook_ready, 1, memory_order_release);
        return;
    }
    interpose_resolve_dlsym();
    if (load_config(err, sizeof err) != 0) {
        fail_closed(err);
    } else {
        hook_log_threshold = hook_cfg.log_level;
        if (limiter_open(&hook_cfg, err, sizeof err) != 0)
            fail_closed(err);
    }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (cuda == NULL)
        hook_log(HOOK_LOG_WARN, "dlopen libcuda.so.1: %s", dlerror());
    interpose_resolve_cuda(cuda); /* without a driver every wrapper fails cleanly */
    if (!hook_failed_closed)
        open_compute();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (!hook_failed_closed)
        hook_log(HOOK_LOG_INFO, "initialised: limits %s, region %s, context reserve %llu MiB",
                 hook_cfg.has_limits ? hook_cfg.limits_path : "(none: pass-through)",
                 hook_cfg.has_region ? hook_cfg.region_path : "(none)",
                 (unsigned long long)(hook_cfg.ctx_reserve_bytes >> 20));
    t_in_init = 0;
    atomic_store_explicit(&hook_ready, 1, memory_order_release);
}

void hook_init_slow(void)
{
    if (t_in_init)
        return; /* re-entered from inside initialisation (dlopen constructors) */
    hook_once(&g_once, init_once);
}

static void nvml_once(void)
{
    if (!dl_available())
        return;
    t_in_init = 1;
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (nvml == NULL)
        hook_log(HOOK_LOG_WARN, "dlopen libnvidia-ml.so.1: %s", dlerror());
    else
        interpose_resolve_nvml(nvml);
    t_in_init = 0;
}

void hook_nvml_init(void)
{
    if (!t_in_init)
        hook_once(&g_nvml_once, nvml_once);
}

/* At exit the driver frees this process's memory: hand the slot back so that the
 * usage disappears at once instead of at the next reap. */
__attribute__((destructor)) static void hook_fini(void)
{
    if (atomic_load(&hook_ready)) {
        compute_process_exit();
        limiter_release();
    }
}
