# shim/cuda-hook — the LD_PRELOAD library that caps GPU memory per container.
# Targets: hook (build), test-hook-unit (C unit tests), lint-hook, bench-hook,
# demo-hook (the hook alone on the simulated GPU; `make demo` runs the whole scenario).
# -Bsymbolic: the hook's own references (its symbol table of wrappers) bind to itself.
# -O2 is required: dlsym relies on a tail call (see src/interpose.c).
# glibc baseline GLIBC_2.17 (include/glibc_baseline.h, TestHookNeedsOnlyBaselineGlibc):
# -ldl -lpthread add nothing on glibc >= 2.34 (the symbols are weak and in libc);
# on an older build host they provide dlopen@GLIBC_2.2.5 and friends.
# The Go tests that drive the hook through the simulated GPU live in
# shim/cuda-hook/hooktest and run with `go test` (make go-test).

HOOK_DIR     := shim/cuda-hook
HOOK_SRCS    := $(sort $(wildcard $(HOOK_DIR)/src/*.c))
HOOK_HDRS    := $(wildcard $(HOOK_DIR)/src/*.h $(HOOK_DIR)/include/*.h)
HOOK_CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -fPIC -fvisibility=hidden -I$(HOOK_DIR)/include -Wall -Wextra
HOOK_LIB     := $(LIB)/libtessera-hook.so
HOOK_BUILD   := $(ROOT)/build/hook

.PHONY: hook test-hook-unit lint-hook bench-hook demo-hook
BUILD_TARGETS += hook
TEST_TARGETS  += test-hook-unit
LINT_TARGETS  += lint-hook
BENCH_TARGETS += bench-hook

hook: $(HOOK_LIB)

$(HOOK_LIB): $(HOOK_SRCS) $(HOOK_HDRS) $(HOOK_DIR)/rules.mk
	@mkdir -p $(LIB)
	$(CC) $(HOOK_CFLAGS) -shared -Wl,-soname,libtessera-hook.so -Wl,-z,defs -Wl,-Bsymbolic -o $@ $(HOOK_SRCS) -ldl -lpthread

# Everything compiled with warnings as errors, including the test and bench programs.
lint-hook:
	@mkdir -p $(HOOK_BUILD)/lint
	$(CC) $(HOOK_CFLAGS) -Werror -shared -o $(HOOK_BUILD)/lint/libtessera-hook.so $(HOOK_SRCS) -ldl -lpthread
	$(CC) $(HOOK_CFLAGS) -Werror -I$(HOOK_DIR)/src -o $(HOOK_BUILD)/lint/unit $(HOOK_DIR)/test/unit_test.c \
		$(filter-out %/interpose.c %/memapi.c %/views.c %/init.c %/charge.c %/devices.c %/pools.c %/launch.c %/compute.c,$(HOOK_SRCS)) -ldl -lpthread
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I$(HOOK_DIR)/include -fsyntax-only $(HOOK_DIR)/test/cudash.c
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I$(HOOK_DIR)/include -I$(HOOK_DIR)/test -fsyntax-only \
		$(HOOK_DIR)/bench/bench_hook.c
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I$(HOOK_DIR)/include -I$(HOOK_DIR)/test -fsyntax-only \
		$(HOOK_DIR)/test/abi_write.c
	$(GO) vet -tags diag ./$(HOOK_DIR)/computetest  # the timeline diagnostic is built only with its tag

# C unit tests of the pieces that need no driver (config, region protocol, table, sizes).
test-hook-unit:
	@mkdir -p $(HOOK_BUILD)
	$(CC) $(HOOK_CFLAGS) -I$(HOOK_DIR)/src -o $(HOOK_BUILD)/unit_test $(HOOK_DIR)/test/unit_test.c \
		$(filter-out %/interpose.c %/memapi.c %/views.c %/init.c %/charge.c %/devices.c %/pools.c %/launch.c %/compute.c,$(HOOK_SRCS)) -ldl -lpthread
	$(HOOK_BUILD)/unit_test

$(HOOK_BUILD)/cudash: $(HOOK_DIR)/test/cudash.c $(HOOK_HDRS) fakegpu
	@mkdir -p $(HOOK_BUILD)
	@$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -I$(HOOK_DIR)/include -o $@ $< \
		$(LIB)/fakegpu/libcuda.so.1 $(LIB)/fakegpu/libnvidia-ml.so.1 -ldl -lpthread

$(HOOK_BUILD)/bench_hook: $(HOOK_DIR)/bench/bench_hook.c $(HOOK_HDRS) $(HOOK_DIR)/test/abi_files.h
	@mkdir -p $(HOOK_BUILD)
	@$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -I$(HOOK_DIR)/include -I$(HOOK_DIR)/test -o $@ $< -ldl -pthread

$(HOOK_BUILD)/libempty.so: $(HOOK_DIR)/bench/empty.c
	@mkdir -p $(HOOK_BUILD)
	@$(CC) -O2 -fPIC -shared -o $@ $<

bench-hook: hook fakegpu $(HOOK_BUILD)/bench_hook $(HOOK_BUILD)/libempty.so
	@LD_LIBRARY_PATH=$(LIB)/fakegpu $(HOOK_BUILD)/bench_hook $(HOOK_LIB) $(HOOK_BUILD)/libempty.so
	@LD_LIBRARY_PATH=$(LIB)/fakegpu $(HOOK_BUILD)/bench_hook $(HOOK_LIB) $(HOOK_BUILD)/libempty.so shared
	@# BENCH lines only; on a failure also the failing tests' output (the whole log stays in build/).
	@log=$(HOOK_BUILD)/bench-computetest.log; \
	if TESSERA_LIB_DIR=$(LIB) TESSERA_BENCH=1 $(GO) test -count=1 -v -timeout 30m ./$(HOOK_DIR)/computetest/ >$$log 2>&1; then \
		grep '^BENCH' $$log; \
	else \
		grep '^BENCH' $$log || true; grep -E -A12 -- '^(--- FAIL|panic:)' $$log | tail -80; \
		echo "bench-hook: computetest failed (whole log: $$log)"; exit 1; \
	fi

demo-hook: hook fakegpu $(HOOK_BUILD)/cudash
	@$(GO) run ./$(HOOK_DIR)/demo -lib $(LIB) -cudash $(HOOK_BUILD)/cudash
