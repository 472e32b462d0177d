# cmd/vgpu-monitor — the node agent (docs/metrics.md, docs/security.md).
# Its Go tests (internal/monitor/..., with the hook and the simulated GPU) run
# in the top-level go-test, its fuzzers in `make fuzz`; this fragment adds the
# benchmark: scrape latency with 100 containers × 8 GPUs, reap latency, and
# the RSS of the real binary serving that node.

BENCH_TARGETS += bench-monitor
.PHONY: bench-monitor

bench-monitor: go-build hook fakegpu
	@TESSERA_LIB_DIR=$(LIB) TESSERA_MONITOR_BIN=$(BIN)/vgpu-monitor $(GO) test -count=1 -tags bench -run '^TestBench' -v ./internal/monitor/agent \
		| grep -E '^(BENCH |--- FAIL|FAIL)' || { echo "bench-monitor failed"; exit 1; }

# The compute arbiter's control loop alone: its longest gap between steps per
# 100 ms window, on a raised thread of the monitor's process against a process
# of its own (internal/arbiterproc), while the monitor's process allocates.
BENCH_TARGETS += bench-arbiter
.PHONY: bench-arbiter

bench-arbiter:
	@$(GO) test -count=1 -tags bench -run '^TestBench' -v ./internal/arbiterproc \
		| grep -E '^(BENCH |--- FAIL|FAIL)' || { echo "bench-arbiter failed"; exit 1; }

# The benchmarks sit behind the bench tag, which the top-level `go vet ./...` does not see.
LINT_TARGETS += lint-monitor
.PHONY: lint-monitor
lint-monitor:
	$(GO) vet -tags bench ./internal/monitor/agent ./internal/arbiterproc

# The real containerd (v2.4.2, built from the module proxy by
# hack/e2e-binaries.sh) with Debian's runc: the monitor names container
# processes by containerd's task PIDs and CRI labels. Needs root; under CI it
# must run (the test fails rather than skips).
TEST_TARGETS += test-monitor-containerd
.PHONY: test-monitor-containerd tools-runc

test-monitor-containerd: tools-runc
	hack/e2e-binaries.sh containerd
	$(GO) test -count=1 -tags e2e -run '^TestRealContainerd' ./internal/monitor/containerd

# Debian's runc, which containerd's runc shim runs (installed when missing and root).
tools: tools-runc
tools-runc:
	@command -v runc >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq runc >/dev/null || { apt-get update -qq && apt-get install -y -qq runc; }; \
		else echo "runc missing: apt-get install runc as root (tests that need it need root too)"; fi; }

LINT_TARGETS += lint-monitor-e2e
.PHONY: lint-monitor-e2e
lint-monitor-e2e:
	$(GO) vet -tags e2e ./internal/monitor/containerd
