#!/usr/bin/env bash
# gpu-check.sh — validate the CUDA hook on a real NVIDIA GPU with PyTorch.
#
# Builds the hook, then runs PyTorch under it with a memory cap on GPU 0 and checks:
# torch.cuda.mem_get_info() shows the cap; allocating up to the cap works and beyond
# it raises torch's OutOfMemoryError; two processes share one cap; how much a
# launch-heavy loop slows down under the hook; compute time slices: a single PyTorch
# matmul tenant's throughput under the hook (no share) against without it, two matmul
# tenants at 30/70 and a P0/P2 pair under the node agent's arbiter (hack/arbiter),
# shares judged by device-side timing (CUDA events: each tenant's matmuls completed ×
# the GPU time one takes alone), never by nvidia-smi; and a memory balloon: a running
# PyTorch whose cap is lowered in place sees OOM and recovers (torch.cuda.empty_cache())
# once the cap is raised back, and an allocation over the lowered cap waits in the hook
# until the cap comes back (docs/balloon.md). Prints one `GPUCHECK <name> <value>` line
# per result (and nothing else on stdout); exits non-zero if a check fails. Takes under
# 5 minutes. Needs: nvidia-smi, python3 with torch (CUDA build), gcc, make, go.
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
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Ishim/cuda-hook/include \
	-o "$work/balloon_set" shim/cuda-hook/test/balloon_set.c

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
elif mode == "balloon":  # one step per line on stdin, one answer per line on stdout
    total, raised, held = fill(limit=cap // 2)
    print(total, flush=True)
    for line in sys.stdin:
        step = line.split()
        if not step:
            continue
        n = int(float(step[1]) * GIB)
        t0 = time.perf_counter()
        try:
            held.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
            ok = 1
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()  # the caching allocator must let go to recover
            ok = 0
        print(ok, f"{time.perf_counter() - t0:.3f}", flush=True)
elif mode in ("matmul", "solo"):
    # matmul SECONDS: saturate with 2048² matmuls, print how many completed.
    # solo: the GPU time of one, by CUDA events, alone (median of 50).
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    if mode == "solo":
        times = []
        for _ in range(50):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); a @ b; e.record(); e.synchronize()
            times.append(s.elapsed_time(e))
        print(f"{sorted(times)[25]:.4f}")
    else:
        end, n = time.perf_counter() + float(sys.argv[2]), 0
        while time.perf_counter() < end:
            for _ in range(8):
                a @ b
            n += 8
            torch.cuda.synchronize()
        print(n)
elif mode == "burst":
    # burst SECONDS WORK_MS PERIOD_MS: WORK_MS of matmuls (by the solo time in
    # argv[5]) every PERIOD_MS; print the median burst latency in ms (CUDA events).
    secs, work, period, solo = (float(v) for v in sys.argv[2:6])
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    k = max(1, round(work / solo))
    lats, end = [], time.perf_counter() + secs
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(k):
            a @ b
        e.record(); e.synchronize()
        lats.append((time.perf_counter() - t0) * 1e3)
        time.sleep(max(0, period / 1e3 - (time.perf_counter() - t0)))
    print(f"{sorted(lats[1:])[len(lats) // 2]:.3f}")
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

# Memory balloon: a PyTorch owner holds half its cap; the node lowers the cap in place
# to 60 % (ceiling the full cap, wait bound 200 ms); a 30 % allocation gets OOM after
# the bound and torch recovers; the cap raised back, the same allocation succeeds; the
# cap lowered again with a 10 s bound and raised 1 s later from here, an allocation
# over it waits about 1 s in the hook and succeeds.
coproc OWNER { hooked "$PY" "$work/check.py" balloon; }
owner_in=${OWNER[1]}
read -r owner_held <&"${OWNER[0]}" || { echo "gpu-check: the balloon owner failed" >&2; exit 1; }
cap=$((CAP_GIB << 30))
low=$((cap * 6 / 10))
"$work/balloon_set" "$work/limits" "$low" "$cap" 200
echo "alloc $(calc "$CAP_GIB * 0.3")" >&"$owner_in"
read -r lowered_ok lowered_s <&"${OWNER[0]}"
"$work/balloon_set" "$work/limits" "$cap" 0 0
echo "alloc $(calc "$CAP_GIB * 0.3")" >&"$owner_in"
read -r raised_ok _ <&"${OWNER[0]}"
"$work/balloon_set" "$work/limits" "$(( owner_held + (cap * 3 / 10) + (256 << 20) ))" "$cap" 10000
echo "alloc $(calc "$CAP_GIB * 0.15")" >&"$owner_in"
sleep 1
"$work/balloon_set" "$work/limits" "$cap" 0 0
read -r waited_ok waited_s <&"${OWNER[0]}"
exec {owner_in}>&-
wait "$OWNER_PID" || true
result balloon_owner_held_bytes "$owner_held"
result balloon_oom_after_s "$lowered_s"
result balloon_wait_s "$waited_s"
check balloon_lowered_cap_ooms "$(( lowered_ok == 0 ))"
check balloon_raised_cap_recovers "$(( raised_ok == 1 ))"
check balloon_owner_waits_for_cap "$(( waited_ok == 1 ))"
check balloon_wait_about_1s "$(calc "int(0.8 <= $waited_s <= 3)")"

base=$("$PY" "$work/check.py" launch)
with=$(py launch)
result launch_ns_per_op_direct "$base"
result launch_ns_per_op_hooked "$with"
result launch_loop_slowdown_pct "$(calc "round(($with - $base) * 100 / $base, 2)")"

# ---- compute time slices ----
# One tenant, no share: throughput under the hook against without it (target ≤ 2 % loss).
m_base=$("$PY" "$work/check.py" matmul 10)
m_hook=$(py matmul 10)
result matmul_per_10s_direct "$m_base"
result matmul_per_10s_hooked "$m_hook"
loss=$(calc "round(($m_base - $m_hook) * 100 / $m_base, 2)")
result matmul_unthrottled_loss_pct "$loss"
check matmul_unthrottled_loss_within_2pct "$(calc "int($loss <= 2)")"
solo=$("$PY" "$work/check.py" solo)
result matmul_solo_ms "$solo"

# The arbiter over a scratch state directory; tenants get its files.
go build -o "$work/arbiter" ./hack/arbiter
arbiter_start() { # TENANT specs...; fills $work/files and waits for "ready"
	coproc ARB { "$work/arbiter" -state "$work/state-$RANDOM" -uuid "$UUID" "${@/#/-tenant=}"; }
	: >"$work/files"
	while read -r line <&"${ARB[0]}"; do
		[[ $line == ready ]] && break
		echo "$line" >>"$work/files"
	done
}
arbiter_stop() { kill "$ARB_PID" 2>/dev/null; wait "$ARB_PID" 2>/dev/null || true; }
# tenant_run NAME MODE ARGS...: check.py under the hook with tenant NAME's core files.
tenant_run() {
	local name=$1 limits region
	shift
	read -r _ limits region < <(grep "^$name " "$work/files")
	env LD_PRELOAD="$HOOK" TESSERA_CORE_LIMITS="$limits" TESSERA_CORE_REGION="$region" TESSERA_LOG=warn \
		"$PY" "$work/check.py" "$@"
}

# 30/70, both saturating for 20 s: share = matmuls × solo time / wall.
arbiter_start a:30:guaranteed:2 b:70:guaranteed:2
tenant_run a matmul 20 >"$work/a.out" &
pa=$!
tenant_run b matmul 20 >"$work/b.out" &
pb=$!
wait "$pa" "$pb"
arbiter_stop
share_a=$(calc "round($(cat "$work/a.out") * $solo / 200, 2)")
share_b=$(calc "round($(cat "$work/b.out") * $solo / 200, 2)")
result share_30_pct "$share_a"
result share_70_pct "$share_b"
err=$(calc "round(max(abs($share_a / ($share_a + $share_b) * 100 - 30), abs($share_b / ($share_a + $share_b) * 100 - 70)), 2)")
result share_30_70_error_pp "$err"
check share_30_70_within_2pp "$(calc "int($err <= 2)")"
result share_30_70_device_busy_pct "$(calc "round($share_a + $share_b, 1)")"

# P0 bursts (2 ms every 20 ms) alone, then beside a saturating P2.
arbiter_start p0:50:guaranteed:0 p2:50:guaranteed:2
alone=$(tenant_run p0 burst 8 2 20 "$solo")
tenant_run p2 matmul 14 >"$work/p2.out" &
p2=$!
sleep 2
beside=$(tenant_run p0 burst 8 2 20 "$solo")
wait "$p2"
arbiter_stop
ratio=$(calc "round($beside / $alone, 3)")
result p0_burst_ms_alone "$alone"
result p0_burst_ms_beside_p2 "$beside"
result p0_latency_ratio "$ratio"
check p0_latency_ratio_within_1_2 "$(calc "int($ratio <= 1.2)")"
# P2 had the GPU while P0 was not running: 14 s, of which 8 beside P0.
result p2_share_pct "$(calc "round($(cat "$work/p2.out") * $solo / 140, 1)")"
exit $fail
