# tessera — top-level build. Each component keeps its own rules in a fragment
# (*/rules.mk) and registers its targets in the lists below, so that `make test`,
# `make bench` and `make lint` always run everything the repository has.
#
# The only things a fresh Debian machine needs beforehand are Go and gcc;
# `make tools` (run by the targets that need it) installs the rest.

SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
GO           ?= go
CC           ?= gcc
ROOT         := $(abspath .)
BIN          := $(ROOT)/bin
LIB          := $(ROOT)/lib
# Cached, untracked tool and binary downloads live outside the checkout.
TESSERA_CACHE ?= $(HOME)/.cache/tessera
export TESSERA_CACHE
# go-nvml's cgo wrappers reference every NVML entry point, deprecated ones too.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# Lists that fragments append to.
BUILD_TARGETS :=
TEST_TARGETS  :=
BENCH_TARGETS :=
LINT_TARGETS  :=
DEMO_TARGETS  :=

.PHONY: all build test bench demo lint fuzz clean go-build go-test go-vet go-fmt tools
all: build

include $(sort $(wildcard */rules.mk */*/rules.mk))

GO_CMDS := $(patsubst cmd/%/main.go,%,$(wildcard cmd/*/main.go))

go-build:
	@mkdir -p $(BIN)
	$(if $(GO_CMDS),$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(GO_CMDS)))

# Packages that measure shares of (simulated) GPU time: their host threads
# must get the CPU they ask for, so they run after the rest, one at a time,
# instead of beside other packages' tests on a 2-core CI machine.
MODULE      := github.com/tessera-gpu/tessera
TIMING_PKGS := $(MODULE)/shim/cuda-hook/computetest $(MODULE)/test/fakegpu

# Go tests that load the hook or the simulated GPU find them through these.
go-test: $(BUILD_TARGETS)
	TESSERA_LIB_DIR=$(LIB) $(GO) test -count=1 $$($(GO) list ./... | grep -vxF $(addprefix -e ,$(TIMING_PKGS)))
	TESSERA_LIB_DIR=$(LIB) $(GO) test -count=1 -p 1 $(TIMING_PKGS)

go-vet:
	$(GO) vet ./...

go-fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

build: go-build $(BUILD_TARGETS)
test: build go-test $(TEST_TARGETS)
	@echo "make test: all suites passed"
bench: build $(BENCH_TARGETS)
lint: go-vet go-fmt $(LINT_TARGETS)
# The demo builds what it needs itself, saying what and how long (hack/demo.sh).
demo: $(DEMO_TARGETS)
# Every fuzz target for FUZZTIME each (default 10s); `make test` replays their seeds.
fuzz: build
	TESSERA_LIB_DIR=$(LIB) hack/fuzz.sh

clean:
	rm -rf $(BIN) $(LIB) build
