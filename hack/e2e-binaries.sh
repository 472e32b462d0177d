#!/usr/bin/env bash
# Builds the real binaries the end-to-end suites run (etcd, the Kubernetes
# control plane and kubelet, kwok, containerd, helm) from the Go module proxy
# into $TESSERA_CACHE/bin, once per machine. Each binary is built in its own
# scratch module under $TESSERA_CACHE/src so that the product module never
# sees their dependency graphs. Prints what it builds and how long it took.
#
# Usage: hack/e2e-binaries.sh [name...]   (default: all)
# Names: etcd kube-apiserver kube-controller-manager kube-scheduler kubelet
#        kwok containerd helm
set -euo pipefail

K8S_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
CONTAINERD_VERSION=v2.4.2
HELM_VERSION=v3.22.0

cache=${TESSERA_CACHE:-$HOME/.cache/tessera}
bin=$cache/bin
src=$cache/src
mkdir -p "$bin" "$src"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

log() { printf 'e2e-binaries: %s\n' "$*" >&2; }

# scratch NAME: a fresh module directory for one binary family.
scratch() {
	local dir=$src/$1
	mkdir -p "$dir"
	if [ ! -f "$dir/go.mod" ]; then
		(cd "$dir" && go mod init "tessera.local/build/$1" >/dev/null 2>&1)
	fi
	echo "$dir"
}

# build NAME OUT DIR PKG [LDFLAGS] [env...]: go build PKG in DIR to $bin/OUT,
# unless it is already there.
build() {
	local name=$1 out=$2 dir=$3 pkg=$4 ldflags=${5:-}
	shift 5 || shift $#
	if [ -x "$bin/$out" ]; then
		log "$name: cached ($bin/$out)"
		return
	fi
	log "$name: building $pkg (cold builds take minutes)"
	local start=$SECONDS
	(cd "$dir" && env "$@" go build -ldflags "$ldflags" -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
	log "$name: built in $((SECONDS - start)) s"
}

k8s_module() {
	local dir
	dir=$(scratch kubernetes)
	if [ ! -f "$dir/.ready" ]; then
		log "kubernetes $K8S_VERSION: resolving modules (staging replaced by $STAGING_VERSION)"
		(cd "$dir" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null)
		local mod
		mod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
		local staging
		staging=$(grep '=> ./staging' "$mod" | awk '{print $1}')
		local args=()
		for m in $staging; do args+=(-replace "$m=$m@$STAGING_VERSION"); done
		(cd "$dir" && go mod edit "${args[@]}" -require "k8s.io/kubernetes@$K8S_VERSION" &&
			go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
				"k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
				"k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
				"k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" >/dev/null)
		touch "$dir/.ready"
	fi
	echo "$dir"
}

k8s_ldflags() {
	local v=${K8S_VERSION#v} p
	local major=${v%%.*} minor
	minor=${v#*.}
	minor=${minor%%.*}
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
			"$p" "$K8S_VERSION" "$p" "$major" "$p" "$minor" "$p"
	done
	printf -- '-s -w'
}

single_module() { # NAME MODULE@VERSION PKG...: scratch module requiring MODULE
	local name=$1 modver=$2
	shift 2
	local dir
	dir=$(scratch "$name")
	if [ ! -f "$dir/.ready" ]; then
		log "$name: resolving $modver"
		(cd "$dir" && go get "$modver" >/dev/null 2>&1 || true)
		local p
		for p in "$@"; do (cd "$dir" && go get "$p@${modver#*@}" >/dev/null); done
		touch "$dir/.ready"
	fi
	echo "$dir"
}

want() { [ ${#targets[@]} -eq 0 ] || [[ " ${targets[*]} " == *" $1 "* ]]; }
targets=("$@")

if want kube-apiserver || want kube-controller-manager || want kube-scheduler || want kubelet; then
	kdir=$(k8s_module)
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
		want "$c" && build "$c" "$c-$K8S_VERSION" "$kdir" "k8s.io/kubernetes/cmd/$c" "$(k8s_ldflags)" CGO_ENABLED=0
	done
fi
if want etcd; then
	d=$(single_module etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3)
	build etcd "etcd-$ETCD_VERSION" "$d" go.etcd.io/etcd/server/v3 "-s -w" CGO_ENABLED=0
fi
if want kwok; then
	d=$(single_module kwok "sigs.k8s.io/kwok@$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok)
	build kwok "kwok-$KWOK_VERSION" "$d" sigs.k8s.io/kwok/cmd/kwok "-s -w" CGO_ENABLED=0
fi
if want containerd; then
	d=$(single_module containerd "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" \
		github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		github.com/containerd/containerd/v2/cmd/ctr)
	for c in containerd containerd-shim-runc-v2 ctr; do
		build "$c" "$c-$CONTAINERD_VERSION" "$d" "github.com/containerd/containerd/v2/cmd/$c" \
			"-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
			CGO_ENABLED=1 GOFLAGS="-mod=mod -tags=no_btrfs"
	done
fi
if want helm; then
	d=$(single_module helm "helm.sh/helm/v3@$HELM_VERSION" helm.sh/helm/v3/cmd/helm)
	build helm "helm-$HELM_VERSION" "$d" helm.sh/helm/v3/cmd/helm \
		"-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" CGO_ENABLED=0
fi
log "done: $bin"
