# cluster-scheduler: placement engine and trace simulator (docs/scheduler.md).
# Its Go tests run in the top-level go-test (its fuzzers in `make fuzz`);
# this fragment adds the benchmark.

OPENB_DIR ?= $(abspath $(ROOT)/../shared/traces/openb)

BENCH_TARGETS += bench-sched
.PHONY: bench-sched

# Quality on every openb variant (published FGD numbers beside ours), then
# throughput, latency and memory on a synthetic 10,000-node cluster.
bench-sched: go-build
	cd $(ROOT) && OPENB_DIR=$(OPENB_DIR) $(BIN)/cluster-scheduler bench
