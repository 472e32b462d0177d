#!/usr/bin/env bash
# Runs every Go fuzz target of the main module and of the deploy/ module
# for $FUZZTIME each (default 10s).
# `go test` alone replays only the seed corpora; this explores beyond them.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
mapfile -t files < <(git ls-files '*_test.go' | grep -v '^test/kubelet/' | xargs grep -l '^func Fuzz')
for f in "${files[@]}"; do
	pkg=./$(dirname "$f") mod=.
	# deploy/ is its own module replacing the main one: let go settle go.sum.
	case $f in deploy/*) mod=deploy pkg=./$(dirname "${f#deploy/}") ;; esac
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
		echo "== fuzz $mod $pkg $fn ($fuzztime)"
		(cd "$mod" && GOFLAGS=$([ "$mod" = deploy ] && echo -mod=mod) go test "$pkg" -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime")
	done
done
