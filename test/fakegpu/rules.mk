# test/fakegpu — the simulated GPU: libcuda.so.1 + libnvidia-ml.so.1 (docs/fakegpu.md).
# Programs load it through the real paths: LD_LIBRARY_PATH=$(LIB)/fakegpu.

FAKEGPU_DIR      := test/fakegpu
FAKEGPU_OUT      := $(LIB)/fakegpu
FAKEGPU_BUILD    := $(ROOT)/build/fakegpu
FAKEGPU_NVML_MOD := github.com/NVIDIA/go-nvml@v0.13.4-1
# Resolved only when a fakegpu target runs (needs `go`, not at every make invocation).
FAKEGPU_NVML_INC  = $(shell $(GO) env GOMODCACHE)/github.com/!n!v!i!d!i!a/go-nvml@v0.13.4-1/pkg/nvml
FAKEGPU_CFLAGS    = -std=c11 -O2 -fPIC -Wall -Wextra -Werror -pthread -D_GNU_SOURCE -fvisibility=hidden \
                    -Ishim/cuda-hook/include -I$(FAKEGPU_NVML_INC) -I$(FAKEGPU_DIR)/src

FAKEGPU_COMMON   := $(addprefix $(FAKEGPU_DIR)/src/,fg_config.c fg_state.c fg_sched.c)
FAKEGPU_CU_SRCS  := $(FAKEGPU_COMMON) $(FAKEGPU_DIR)/src/fg_table.c $(wildcard $(FAKEGPU_DIR)/src/cu_*.c)
FAKEGPU_NV_SRCS  := $(FAKEGPU_COMMON) $(wildcard $(FAKEGPU_DIR)/src/nvml_*.c)
FAKEGPU_HDRS     := $(wildcard $(FAKEGPU_DIR)/src/*.h) shim/cuda-hook/include/cuda_driver.h shim/cuda-hook/include/glibc_baseline.h
FAKEGPU_NVML_STAMP := $(FAKEGPU_BUILD)/go-nvml.stamp

.PHONY: fakegpu fakegpu-ctest fakegpu-lint fakegpu-bench
BUILD_TARGETS += fakegpu
TEST_TARGETS  += fakegpu-ctest
LINT_TARGETS  += fakegpu-lint
BENCH_TARGETS += fakegpu-bench

fakegpu: $(FAKEGPU_OUT)/libcuda.so.1 $(FAKEGPU_OUT)/libnvidia-ml.so.1

# nvml.h comes from the go-nvml module; a clean machine downloads it first.
$(FAKEGPU_NVML_STAMP):
	@mkdir -p $(@D)
	$(GO) mod download $(FAKEGPU_NVML_MOD)
	@touch $@

$(FAKEGPU_OUT)/libcuda.so.1: $(FAKEGPU_CU_SRCS) $(FAKEGPU_HDRS) $(FAKEGPU_NVML_STAMP)
	@mkdir -p $(@D)
	$(CC) $(FAKEGPU_CFLAGS) -shared -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o $@ $(FAKEGPU_CU_SRCS)
	ln -sf libcuda.so.1 $(@D)/libcuda.so

$(FAKEGPU_OUT)/libnvidia-ml.so.1: $(FAKEGPU_NV_SRCS) $(FAKEGPU_HDRS) $(FAKEGPU_NVML_STAMP)
	@mkdir -p $(@D)
	$(CC) $(FAKEGPU_CFLAGS) -shared -Wl,-Bsymbolic -Wl,-soname,libnvidia-ml.so.1 -o $@ $(FAKEGPU_NV_SRCS)
	ln -sf libnvidia-ml.so.1 $(@D)/libnvidia-ml.so

# Unit tests of the internals (parser, hash table, state slots), linked statically
# against the sources; the API is tested end to end by the Go tests in this directory.
$(FAKEGPU_BUILD)/unit_test: $(FAKEGPU_DIR)/tests/unit_test.c $(FAKEGPU_COMMON) $(FAKEGPU_DIR)/src/fg_table.c $(FAKEGPU_HDRS) $(FAKEGPU_NVML_STAMP)
	@mkdir -p $(@D)
	$(CC) $(FAKEGPU_CFLAGS) -o $@ $(FAKEGPU_DIR)/tests/unit_test.c $(FAKEGPU_COMMON) $(FAKEGPU_DIR)/src/fg_table.c

fakegpu-ctest: $(FAKEGPU_BUILD)/unit_test
	$(FAKEGPU_BUILD)/unit_test

fakegpu-lint: $(FAKEGPU_NVML_STAMP)
	$(CC) $(FAKEGPU_CFLAGS) -fsyntax-only $(FAKEGPU_CU_SRCS) $(FAKEGPU_NV_SRCS) $(wildcard $(FAKEGPU_DIR)/tests/*.c)

$(FAKEGPU_BUILD)/bench: $(FAKEGPU_DIR)/tests/bench.c fakegpu
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -Ishim/cuda-hook/include -o $@ $< -L$(FAKEGPU_OUT) -lcuda -pthread

fakegpu-bench: $(FAKEGPU_BUILD)/bench
	FAKEGPU_STATE=$(FAKEGPU_BUILD)/bench-state LD_LIBRARY_PATH=$(FAKEGPU_OUT) $(FAKEGPU_BUILD)/bench
