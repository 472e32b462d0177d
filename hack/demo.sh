#!/usr/bin/env bash
# make demo: builds what the demo needs (each part cached; says what it
# builds, with progress, and how long it took), then runs bin/tessera-demo
# (test/e2e/cmd/tessera-demo), which prints the account. As root the
# scenario runs on a real node, which also needs the pinned Kubernetes
# binaries (hack/e2e-binaries.sh, which prints its own progress), runc and
# the CNI plugins, and `make images` (run by the scenario, cached by make).
# DEMO_FLAGS are passed to tessera-demo (-reduced: the reduced form even as
# root; -seeds 42-43: a shorter simulator run).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
MAKE=${MAKE:-make}
GO=${GO:-go}
began=$SECONDS

say() { printf 'demo: %s\n' "$*"; }

# compiled LABEL: go build -v's package lines as progress, every 20 packages;
# any other line (a build error, "# pkg" before it, go: downloading) is
# passed through, since an import path has neither blanks nor colons.
compiled() {
	awk -v label="$1" '/[ :]/ { print; fflush(); next }
		{ n++; if (n % 20 == 0) { printf "demo:   %s: %d packages compiled (now %s)\n", label, n, $0; fflush() } }
		END { if (n > 0) printf "demo:   %s: %d packages compiled\n", label, n; else printf "demo:   %s: cached\n", label }'
}

say "building the hook and the simulated GPU (C: lib/libtessera-hook.so, lib/fakegpu/, build/hook/cudash)"
start=$SECONDS
if $MAKE -q "$root/lib/libtessera-hook.so" "$root/lib/fakegpu/libcuda.so.1" "$root/lib/fakegpu/libnvidia-ml.so.1" 2>/dev/null; then
	say "  cached"
fi
$MAKE --no-print-directory -s hook fakegpu "$root/build/hook/cudash"
say "  done in $((SECONDS - start)) s"

say "building bin/vgpu-monitor and bin/cluster-scheduler (go; a cold build compiles client-go and go-nvml: minutes)"
start=$SECONDS
mkdir -p bin
$GO build -v -o bin/ ./cmd/vgpu-monitor ./cmd/cluster-scheduler 2>&1 | compiled "product"
say "  done in $((SECONDS - start)) s"

say "building bin/tessera-demo (the test/e2e module)"
start=$SECONDS
(cd test/e2e && $GO build -mod=mod -v -o ../../bin/tessera-demo ./cmd/tessera-demo 2>&1) | compiled "tessera-demo"
say "  done in $((SECONDS - start)) s"

DEMO_FLAGS=${DEMO_FLAGS:-}
if [ "$(id -u)" = 0 ] && [[ " $DEMO_FLAGS " != *" -reduced "* ]] && bin/tessera-demo -real-node-available; then
	say "root: building the real node's binaries (kubelet, containerd, control plane, helm; cold: about 8 minutes)"
	start=$SECONDS
	$MAKE --no-print-directory e2e-binaries e2e-node-deps
	say "  done in $((SECONDS - start)) s"
fi

say "builds took $((SECONDS - began)) s; running the scenario"
run=$SECONDS
# shellcheck disable=SC2086 # DEMO_FLAGS is a list of flags
bin/tessera-demo -root "$root" $DEMO_FLAGS
say "ran in $((SECONDS - run)) s; $((SECONDS - began)) s in all"
