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
	@# What a pod without inter-pod terms pays the Kubernetes scheduler's
	@# loop for the inter-pod rules (internal/kubesched/interpod).
	cd $(ROOT) && $(GO) test -run '^$$' -bench '^BenchmarkPlainPod$$' -benchmem -count 1 ./internal/kubesched/interpod \
		| awk '/^BenchmarkPlainPod\/states=/ { split($$1, n, "="); sub(/-[0-9]+$$/, "", n[2]); \
			printf "BENCH sched.interpod.plain_pod_ns.states_%s %s ns\n", n[2], $$3; \
			printf "BENCH sched.interpod.plain_pod_allocs.states_%s %s allocs\n", n[2], $$7; ok++ } \
			END { if (ok != 2) { print "bench-sched: BenchmarkPlainPod printed no result"; exit 1 } }'
