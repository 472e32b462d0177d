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

# The benchmark sits behind the bench tag, which the top-level `go vet ./...` does not see.
LINT_TARGETS += lint-monitor
.PHONY: lint-monitor
lint-monitor:
	$(GO) vet -tags bench ./internal/monitor/agent
