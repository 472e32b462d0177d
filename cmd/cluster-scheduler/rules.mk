# cluster-scheduler: placement engine and trace simulator (docs/scheduler.md).
# Its Go tests run in the top-level go-test (its fuzzers in `make fuzz`);
# this fragment adds the benchmark.

OPENB_DIR ?= $(abspath $(ROOT)/../shared/traces/openb)

BENCH_TARGETS += bench-sched
.PHONY: bench-sched

# Quality on every openb variant (published FGD numbers beside ours), then
# throughput, latency and memory on a synthetic 10,000-node cluster, the
# scheduling engine's full cycle there (sched.cycle_per_s.nodes10000), and
# the dynamic simulation comparing fifo, priority_noaging and full
# (sched.dynamic.*; it fails if a pod was preempted inside its minimum run time).
bench-sched: go-build
	cd $(ROOT) && OPENB_DIR=$(OPENB_DIR) $(BIN)/cluster-scheduler bench
