#!/usr/bin/env bash
# old-glibc-check.sh — run the hook and the simulated driver under an older glibc
# than the build machine's: Debian bullseye's 2.31 (Ubuntu 20.04 has 2.31 too), the
# dynamic loader and libc of the image, not of the host.
#
# Fetches bullseye's libc6 and libc6-dev with apt into a private directory (a
# private sources list and cache: the system's apt configuration is not touched),
# builds two programs against them, and checks with bullseye's own ld.so:
#   - a program that does not link libdl starts with the hook preloaded (also with
#     LD_BIND_NOW=1): a hook needing a newer glibc would stop it at load;
#   - cudash on the simulated GPU under a 4 GiB cap: 3 GiB fits, 2 GiB more is
#     refused, 1 GiB fits;
#   - a CUDA program without libdl (where glibc 2.31 has no dlopen to give the hook)
#     gets the hook's fail-closed answer, CUDA_ERROR_NOT_INITIALIZED, not a crash.
# Prints one `OLDGLIBC <check> ok` line per check; exits non-zero if one fails.
# Needs network access to deb.debian.org, apt-get, dpkg-deb, gcc, make.
# The ELF-level check of the baseline (GLIBC_2.17) runs in `make test`
# (TestHookNeedsOnlyBaselineGlibc); this one shows the libraries working there.
#
# usage: hack/old-glibc-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SUITE=bullseye
CACHE=${TESSERA_CACHE:-$HOME/.cache/tessera}/old-glibc-$SUITE
LIB=${TESSERA_LIB_DIR:-$PWD/lib}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -n ${TESSERA_LIB_DIR:-} ]] || make -s hook fakegpu >&2

root=$CACHE/root
if [[ ! -x $root/lib/x86_64-linux-gnu/libc.so.6 ]]; then
	mkdir -p "$CACHE/lists/partial" "$CACHE/cache/archives/partial" "$CACHE/debs"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SUITE main" >"$CACHE/sources.list"
	apt=(-o Dir::Etc::sourcelist="$CACHE/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$CACHE/lists"
		-o Dir::Cache="$CACHE/cache" -o APT::Architecture=amd64)
	apt-get "${apt[@]}" -qq update >&2
	for p in libc6 libc6-dev linux-libc-dev; do
		v=$(apt-cache "${apt[@]}" madison "$p" | awk -F'|' -v s="$SUITE/" '$3 ~ s {gsub(/ /, "", $2); print $2; exit}')
		(cd "$CACHE/debs" && apt-get "${apt[@]}" -qq download "$p=$v" 2>/dev/null)
	done
	rm -rf "$root" && mkdir -p "$root"
	for d in "$CACHE"/debs/*.deb; do dpkg-deb -x "$d" "$root"; done
	ln -sf ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
fi
libc=$root/lib/x86_64-linux-gnu
ldso=$libc/ld-linux-x86-64.so.2

# gcc against the bullseye sysroot: its crt files, headers and libc, gcc's own headers.
cc_old() {
	gcc --sysroot="$root" -B"$root/usr/lib/x86_64-linux-gnu" -L"$root/usr/lib/x86_64-linux-gnu" -L"$libc" \
		-nostdinc -isystem "$(gcc -print-file-name=include)" -isystem "$root/usr/include/x86_64-linux-gnu" \
		-isystem "$root/usr/include" "$@"
}
printf '#include <stdio.h>\nint main(void) { puts("started"); return 0; }\n' >"$work/hello.c"
cc_old -O2 -o "$work/hello" "$work/hello.c"
cc_old -std=c11 -D_GNU_SOURCE -O2 -Ishim/cuda-hook/include -o "$work/cudash" shim/cuda-hook/test/cudash.c \
	"$LIB/fakegpu/libcuda.so.1" "$LIB/fakegpu/libnvidia-ml.so.1" "$libc/libdl.so.2" "$libc/libpthread.so.0"
printf '#include <stdio.h>\n#include "cuda_driver.h"\nint main(void) { CUdeviceptr p;
  printf("%%d %%d\\n", (int)cuInit(0), (int)cuMemAlloc_v2(&p, 1 << 20)); return 0; }\n' >"$work/nodl.c"
cc_old -std=c11 -O2 -Ishim/cuda-hook/include -o "$work/nodl" "$work/nodl.c" "$LIB/fakegpu/libcuda.so.1"
gcc -std=c11 -D_GNU_SOURCE -O2 -Ishim/cuda-hook/include -Ishim/cuda-hook/test -o "$work/abi_write" shim/cuda-hook/test/abi_write.c

fail=0
check() { # name, want, got
	if [[ $3 == "$2" ]]; then echo "OLDGLIBC $1 ok"; else echo "OLDGLIBC $1 FAILED: want [$2], got [$3]" >&2; fail=1; fi
}
glibc=$("$ldso" --library-path "$libc" "$libc/libc.so.6" | head -1)
echo "$glibc" | grep -q 'release version 2.31' || { echo "old-glibc-check: not glibc 2.31: $glibc" >&2; exit 2; }

for now in "" 1; do # LD_BIND_NOW empty: lazy binding
	got=$(LD_BIND_NOW=$now LD_PRELOAD="$LIB/libtessera-hook.so" "$ldso" --library-path "$libc" "$work/hello" 2>&1 || true)
	check "nolibdl_program_starts${now:+_bind_now}" started "$got"
done

export FAKEGPU_STATE=$work/fakegpu.state FAKEGPU_DEVICES="H200:81920:132;H200:81920:132"
hooked() { LD_PRELOAD="$LIB/libtessera-hook.so" "$ldso" --library-path "$libc:$LIB/fakegpu" "$work/cudash"; }
uuid=$(printf 'init\nuuid 1\nexit\n' | hooked | sed -n 's/^ok uuid=//p')
"$work/abi_write" "$work/region" "$work/limits" "$uuid" $((4 << 30))
got=$(printf 'init\nctx 1\ninfo\nalloc a %d\nalloc b %d\nalloc c %d\nexit\n' $((3 << 30)) $((2 << 30)) $((1 << 30)) |
	TESSERA_REGION=$work/region TESSERA_LIMITS=$work/limits hooked 2>&1 | sed -n '3,6p' | cut -d' ' -f1-3 | tr '\n' ';')
check cap_4gib_enforced "ok free=$((4 << 30)) total=$((4 << 30));ok;err 2 CUDA_ERROR_OUT_OF_MEMORY;ok;" "$got"
got=$(LD_PRELOAD="$LIB/libtessera-hook.so" "$ldso" --library-path "$libc:$LIB/fakegpu" "$work/nodl" 2>/dev/null)
check cuda_without_libdl_fails_closed "3 3" "$got"
exit $fail
