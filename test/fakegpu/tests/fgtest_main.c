/* fgtest — scenarios run against the simulated libcuda.so.1 (linked with -lcuda,
 * found through LD_LIBRARY_PATH like the real driver). Driven by fakegpu_test.go:
 * `fgtest <scenario> [args]` prints FAIL lines and exits 1 on any failure. */
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"

int fg_failures;

void fgt_check(const char *what, CUresult got, CUresult want, const char *file, int line)
{
    if (got != want) {
        printf("FAIL %s:%d: %s = %d, want %d\n", file, line, what, (int)got, (int)want);
        fg_failures++;
    }
}

void fgt_setup(CUdevice dev)
{
    CUcontext c;
    CHECK(cuInit(0), CUDA_SUCCESS);
    CHECK(cuDevicePrimaryCtxRetain(&c, dev), CUDA_SUCCESS);
    CHECK(cuCtxSetCurrent(c), CUDA_SUCCESS);
}

unsigned long long fgt_used(void)
{
    size_t f = 0, t = 0;
    CHECK(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    return t - f;
}

double fgt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
} scenarios[] = {
    {"errors", scenario_errors},   {"ctx", scenario_ctx},         {"alloc", scenario_alloc},
    {"arrays", scenario_arrays},   {"vmm", scenario_vmm},         {"pool", scenario_pool},
    {"procaddr", scenario_procaddr}, {"dlopen", scenario_dlopen}, {"timing", scenario_timing},
    {"threads", scenario_threads}, {"fork", scenario_fork},       {"hold", scenario_hold},
    {"allocloop", scenario_allocloop}, {"busy", scenario_busy},   {"info", scenario_info},
    {"resolve", scenario_resolve}, {"fill", scenario_fill},       {"saturate", scenario_saturate},
    {"forksat", scenario_forksat}, {"queue", scenario_queue},     {"probe", scenario_probe},
    {"latency", scenario_latency}, {"order", scenario_order},     {"churn", scenario_churn},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; argc > 1 && i < sizeof scenarios / sizeof scenarios[0]; i++) {
        if (strcmp(argv[1], scenarios[i].name) != 0)
            continue;
        int rc = scenarios[i].fn(argc - 2, argv + 2);
        if (rc != 0 || fg_failures) {
            printf("scenario %s: %d failure(s)\n", argv[1], fg_failures);
            return 1;
        }
        printf("scenario %s: ok\n", argv[1]);
        return 0;
    }
    fprintf(stderr, "usage: fgtest <scenario> [args]\n");
    return 2;
}
