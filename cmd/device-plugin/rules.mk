# cmd/device-plugin — kubelet device plugin.
#
# test-kubelet runs the plugin against kubelet's real device manager in the
# separate module test/kubelet (it imports k8s.io/kubernetes, which the main
# module must not). bench-device-plugin runs the plugin binary, built with
# the tessera_sim tag, on a simulated 8xH200 node and measures it over gRPC.

TEST_TARGETS  += test-kubelet
BENCH_TARGETS += bench-device-plugin
LINT_TARGETS  += lint-device-plugin

.PHONY: test-kubelet bench-device-plugin lint-device-plugin

# -mod=mod: the module replaces the main module, whose requirements move
# with every merge; let the go command settle go.sum instead of failing.
test-kubelet:
	cd $(ROOT)/test/kubelet && $(GO) test -mod=mod -count=1 ./...

# Files behind build tags, and the kubelet test module, which `go vet ./...`
# at the top does not see.
lint-device-plugin:
	$(GO) vet -tags 'bench tessera_sim' ./cmd/device-plugin
	cd $(ROOT)/test/kubelet && $(GO) vet -mod=mod ./...

bench-device-plugin:
	@mkdir -p $(BIN)
	$(GO) build -tags tessera_sim -o $(BIN)/device-plugin-sim ./cmd/device-plugin
	@TESSERA_DP_SIM=$(BIN)/device-plugin-sim $(GO) test -count=1 -tags bench -run '^TestBench' -v ./cmd/device-plugin \
		| grep -E '^(BENCH |--- FAIL|FAIL)' || { echo "bench-device-plugin failed"; exit 1; }
