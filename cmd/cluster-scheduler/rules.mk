# cluster-scheduler: placement engine and trace simulator (docs/scheduler.md).
# Its Go tests run in the top-level go-test; this fragment adds the benchmark
# and a short fuzzing pass over the trace reader.

OPENB_DIR ?= $(abspath $(ROOT)/../shared/traces/openb)

BENCH_TARGETS += bench-sched
.PHONY: bench-sched fuzz-sched

# Quality on every openb variant (published FGD numbers beside ours), then
# throughput, latency and memory on a synthetic 10,000-node cluster.
bench-sched: go-build
	cd $(ROOT) && OPENB_DIR=$(OPENB_DIR) $(BIN)/cluster-scheduler bench

# Not part of `make test` (it runs for a fixed time); the seed corpus is.
fuzz-sched:
	$(GO) test ./internal/placement/trace -run '^$$' -fuzz FuzzReadPods -fuzztime 30s
	$(GO) test ./internal/placement/trace -run '^$$' -fuzz FuzzReadNodes -fuzztime 30s
