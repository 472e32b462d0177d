/* fgtest.h — assertion helpers shared by the scenario files of fgtest. */
#ifndef FGTEST_H
#define FGTEST_H

#include <stdio.h>
#include <time.h>

#include "cuda_driver.h"

extern int fg_failures;

#define CHECK(call, want) fgt_check(#call, (call), (want), __FILE__, __LINE__)
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                \
            fg_failures++;                                                                         \
        }                                                                                          \
    } while (0)
#define EXPECT_EQ(a, b)                                                                            \
    do {                                                                                           \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);             \
        if (a_ != b_) {                                                                            \
            printf("FAIL %s:%d: %s = %llu, want %s = %llu\n", __FILE__, __LINE__, #a, a_, #b, b_); \
            fg_failures++;                                                                         \
        }                                                                                          \
    } while (0)

void fgt_check(const char *what, CUresult got, CUresult want, const char *file, int line);

/* cuInit + primary context of dev made current. */
void fgt_setup(CUdevice dev);
/* Physical bytes in use on the current device (cuMemGetInfo_v2 total - free). */
unsigned long long fgt_used(void);
double fgt_now_ms(void);

#define MiB (1ull << 20)
/* Not declared by the hook's cuda_driver.h; value from NVIDIA's cuda.h. */
#define FGT_CONTEXT_IS_DESTROYED ((CUresult)709)

/* Scenarios: return 0, failures are counted in fg_failures. */
int scenario_errors(int argc, char **argv);
int scenario_ctx(int argc, char **argv);
int scenario_alloc(int argc, char **argv);
int scenario_arrays(int argc, char **argv);
int scenario_vmm(int argc, char **argv);
int scenario_pool(int argc, char **argv);
int scenario_procaddr(int argc, char **argv);
int scenario_dlopen(int argc, char **argv);
int scenario_timing(int argc, char **argv);
int scenario_threads(int argc, char **argv);
int scenario_fork(int argc, char **argv);
int scenario_hold(int argc, char **argv);
int scenario_allocloop(int argc, char **argv);
int scenario_busy(int argc, char **argv);
int scenario_info(int argc, char **argv);
int scenario_resolve(int argc, char **argv);
int scenario_fill(int argc, char **argv);
int scenario_saturate(int argc, char **argv);
int scenario_forksat(int argc, char **argv);
int scenario_queue(int argc, char **argv);
int scenario_probe(int argc, char **argv);
int scenario_latency(int argc, char **argv);
int scenario_order(int argc, char **argv);
int scenario_churn(int argc, char **argv);

#endif
