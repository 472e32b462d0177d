# deploy/ — Helm chart, rendered manifests and container images.
#
# deploy/ is its own Go module: go-containerregistry (images) and the
# chart tests' client-go scheme stay out of the product module. Helm is the
# v3.22.0 binary hack/e2e-binaries.sh builds from the Go module proxy.

HELM_VERSION := v3.22.0
HELM         := $(TESSERA_CACHE)/bin/helm-$(HELM_VERSION)
IMAGES_DIR   := $(ROOT)/build/images

TEST_TARGETS += chart-test
LINT_TARGETS += lint-deploy

.PHONY: images manifests chart-test lint-deploy

$(HELM):
	$(ROOT)/hack/e2e-binaries.sh helm

# OCI image archives of the binaries and the hook, tagged with the chart's
# appVersion; the hook installer is linked statically (its image has no C library).
images: go-build $(LIB)/libtessera-hook.so
	CGO_ENABLED=0 $(GO) build -o $(BIN)/hook-installer ./cmd/hook-installer
	cd $(ROOT)/deploy && $(GO) run -mod=mod ./cmd/tessera-images --bin $(BIN) --lib $(LIB) \
		--chart $(ROOT)/deploy/helm/tessera --out $(IMAGES_DIR)

# deploy/manifests/*.yaml and the values table of docs/operator-guide.md.
manifests: $(HELM)
	cd $(ROOT)/deploy && $(GO) run -mod=mod ./cmd/render-manifests --helm $(HELM) --root $(ROOT)

# helm lint + template for every values set, manifests and docs in sync,
# objects valid; the image builder's reproducibility tests.
# -mod=mod: the module replaces the main module, whose requirements move
# with every merge; let the go command settle go.sum instead of failing.
chart-test: $(HELM)
	cd $(ROOT)/deploy && TESSERA_HELM=$(HELM) $(GO) test -mod=mod -count=1 ./...

lint-deploy:
	cd $(ROOT)/deploy && $(GO) vet -mod=mod ./...
