#!/usr/bin/env bash
# gpu-check.sh — validate the CUDA hook on a real NVIDIA GPU with PyTorch.
#
# Builds the hook, then runs PyTorch under it with a memory cap on GPU 0 and checks:
# torch.cuda.mem_get_info() shows the cap; allocating up to the cap works and beyond
# it raises torch's OutOfMemoryError; two processes share one cap; how much a
# launch-heavy loop slows down under the hook. Prints one `GPUCHECK <name> <value>`
# line per result (and nothing else on stdout); exits non-zero if a check fails.
# Takes well under 5 minutes. Needs: nvidia-smi, python3 with torch (CUDA build), gcc, make.
#
# usage: hack/gpu-check.sh [cap_gib]      (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
CAP_GIB=${1:-8}
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make -s hook >&2
HOOK=$PWD/lib/libtessera-hook.so
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
[[ $UUID == GPU-* ]] || { echo "gpu-check: no NVIDIA GPU found (nvidia-smi said: $UUID)" >&2; exit 2; }

# The limits file and the region, written from shim/cuda-hook/include/tessera_abi.h itself.
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Ishim/cuda-hook/include -Ishim/cuda-hook/test \
	-o "$work/abi_write" shim/cuda-hook/test/abi_write.c
"$work/abi_write" "$work/region" "$work/limits" "$UUID" $((CAP_GIB << 30))

hooked() {
	env LD_PRELOAD="$HOOK" TESSERA_REGION="$work/region" TESSERA_LIMITS="$work/limits" \
		TESSERA_CTX_RESERVE_MIB=0 TESSERA_LOG=warn "$@"
}

cat >"$work/check.py" <<'PYEOF'
import os, sys, time
import torch

GIB = 1 << 30
cap = int(os.environ["CAP_GIB"]) * GIB
mode = sys.argv[1]

def fill(chunk=256 << 20, limit=None):
    """Allocate chunks until torch raises OutOfMemoryError; returns (bytes, raised)."""
    held, total = [], 0
    try:
        while limit is None or total + chunk <= limit:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            total += chunk
    except torch.cuda.OutOfMemoryError:
        return total, True, held
    return total, False, held

if mode == "info":
    free, total = torch.cuda.mem_get_info()
    print(total, free)
elif mode == "fill":
    total, raised, _ = fill()
    print(total, int(raised))
elif mode == "hold":  # allocate the given GiB, say so, wait for stdin to close
    n = float(sys.argv[2])
    total, raised, held = fill(limit=int(n * GIB))
    print(total, int(raised), flush=True)
    sys.stdin.read()
elif mode == "try":
    n = float(sys.argv[2])
    try:
        x = torch.empty(int(n * GIB), dtype=torch.uint8, device="cuda")
        print(1)
    except torch.cuda.OutOfMemoryError:
        print(0)
elif mode == "launch":
    x = torch.ones(16, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50000):
        x.add_(1)
    torch.cuda.synchronize()
    print(f"{(time.perf_counter() - t0) / 50000 * 1e9:.1f}")
PYEOF
export CAP_GIB
fail=0
result() { echo "GPUCHECK $1 $2"; }
calc() { "$PY" -c "print($1)"; }
check() { if [[ $2 == 1 ]]; then result "$1" pass; else result "$1" fail; fail=1; fi; }

# py MODE [ARGS]: run check.py under the hook; its stdout, or stop with what went wrong.
py() {
	local out
	if ! out=$(hooked "$PY" "$work/check.py" "$@" 2>"$work/stderr"); then
		echo "gpu-check: check.py $* failed:" >&2
		cat "$work/stderr" >&2
		exit 1
	fi
	echo "$out"
}

out=$(py info)
read -r total free <<<"$out"
result mem_get_info_total_bytes "$total"
result mem_get_info_free_bytes "$free"
check mem_get_info_shows_cap "$(( total == CAP_GIB << 30 ))"

out=$(py fill)
read -r filled raised <<<"$out"
result alloc_up_to_cap_bytes "$filled"
check alloc_beyond_cap_raises_oom "$raised"
# torch's own context and workspace take a little of the cap; allow 1 GiB of slack.
check alloc_up_to_cap_reaches_cap "$(( filled > (CAP_GIB - 1) << 30 && filled <= CAP_GIB << 30 ))"

# Two processes share one cap: A holds 60%, B cannot take another 60% but can take 30%.
coproc HOLD { hooked "$PY" "$work/check.py" hold "$(calc "$CAP_GIB * 0.6")"; }
hold_in=${HOLD[1]}
read -r held _ <&"${HOLD[0]}" || { echo "gpu-check: the process holding 60% of the cap failed" >&2; exit 1; }
second=$(py try "$(calc "$CAP_GIB * 0.6")")
third=$(py try "$(calc "$CAP_GIB * 0.3")")
exec {hold_in}>&-
wait "$HOLD_PID" || true
result two_procs_first_holds_bytes "$held"
check two_procs_share_cap "$(( second == 0 && third == 1 ))"

base=$("$PY" "$work/check.py" launch)
with=$(py launch)
result launch_ns_per_op_direct "$base"
result launch_ns_per_op_hooked "$with"
result launch_loop_slowdown_pct "$(calc "round(($with - $base) * 100 / $base, 2)")"
exit $fail
