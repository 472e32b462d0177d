# test/e2e — the end-to-end suite on a real control plane (separate module).
#
# e2e-binaries builds the pinned etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok into $(TESSERA_CACHE)/bin once per machine
# (hack/e2e-binaries.sh prints what it builds and how long it took; warm it
# only checks). test-e2e runs the suite, bench-e2e the scheduler benchmark.
#
# TESSERA_SKIP_E2E=1 skips both locally; under CI=true a skip is refused, so
# CI always runs them.

TEST_TARGETS  += test-e2e
BENCH_TARGETS += bench-e2e
LINT_TARGETS  += lint-e2e
DEMO_TARGETS  += demo-scenario

E2E_BINARIES := etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubelet containerd helm
# The real node (realnode) also runs Debian's runc and CNI plugins.
E2E_NODE_PACKAGES := runc containernetworking-plugins
# E2E_SKIPPED succeeds (saying so) when the suite is to be skipped, fails
# when it is to run, and exits the recipe under CI=true with TESSERA_SKIP_E2E=1.
E2E_SKIPPED = { if [ "$${TESSERA_SKIP_E2E:-}" = 1 ]; then \
	if [ "$${CI:-}" = true ]; then echo "$@: TESSERA_SKIP_E2E=1 is refused under CI=true: CI must run the end-to-end suite" >&2; exit 1; fi; \
	echo "$@: skipped (TESSERA_SKIP_E2E=1)"; true; else false; fi; }

.PHONY: e2e-binaries e2e-node-deps test-e2e bench-e2e lint-e2e demo-scenario

# The demo's front end is test/e2e/cmd/tessera-demo (package test/e2e/demo):
# the real-node scenario as root, the reduced form otherwise, then the
# openb simulator. hack/demo.sh builds its parts with progress and runs it.
demo-scenario:
	@$(ROOT)/hack/demo.sh

e2e-binaries:
	$(ROOT)/hack/e2e-binaries.sh $(E2E_BINARIES)

# e2e-node-deps installs the real node's Debian packages when one is missing
# (as root; without root the real node does not run, see test/e2e/realnode).
e2e-node-deps:
	@if [ "$$(id -u)" = 0 ] && ! { [ -x /usr/sbin/runc ] && [ -x /usr/lib/cni/bridge ]; }; then \
		echo "e2e-node-deps: installing $(E2E_NODE_PACKAGES)"; \
		apt-get install -y --no-install-recommends $(E2E_NODE_PACKAGES) >/dev/null || \
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends $(E2E_NODE_PACKAGES) >/dev/null; }; fi

# -mod=mod: the module replaces the main module, whose requirements move
# with every merge; let the go command settle go.sum instead of failing.
# The suites run the binaries go-build just made (the demo's test and the
# scheduler tests), instead of building their own.
test-e2e:
	@$(E2E_SKIPPED) || { $(MAKE) --no-print-directory e2e-binaries e2e-node-deps hook fakegpu go-build && \
		cd $(ROOT)/test/e2e && TESSERA_LIB_DIR=$(LIB) TESSERA_MONITOR_BIN=$(BIN)/vgpu-monitor \
		TESSERA_CLUSTER_SCHEDULER=$(BIN)/cluster-scheduler $(GO) test -mod=mod -count=1 -timeout 30m ./...; }

# E2E_BENCH_NODES, E2E_BENCH_PODS (default 1000, 5000) shrink it for a quick run.
bench-e2e:
	@$(E2E_SKIPPED) || { $(MAKE) --no-print-directory e2e-binaries && mkdir -p $(BIN) && \
		$(GO) build -o $(BIN)/cluster-scheduler ./cmd/cluster-scheduler && \
		cd $(ROOT)/test/e2e && TESSERA_CLUSTER_SCHEDULER=$(BIN)/cluster-scheduler \
		$(GO) test -mod=mod -count=1 -tags bench -run '^TestBench' -v -timeout 60m ./bench \
		| grep --line-buffered -E '^(BENCH |--- FAIL|FAIL)|bench: ' || { echo "bench-e2e failed"; exit 1; }; }

lint-e2e:
	cd $(ROOT)/test/e2e && $(GO) vet -mod=mod ./... && $(GO) vet -mod=mod -tags bench ./bench
