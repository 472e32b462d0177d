/*
 * tessera_abi.h — the shared-memory ABI between the CUDA hook (inside a container),
 * the device plugin and the node monitor (on the host).
 *
 * Two files per container allocation:
 *
 *   limits  (tessera_limits)  written only by the node side (device plugin at Allocate,
 *           monitor later: memory balloons). Mounted read-only into the container and
 *           mapped PROT_READ by the hook, so a container cannot raise its own caps.
 *           The hook reads the limit words on every allocation; the node side changes
 *           them in place (never by replacing the file: the hook holds the old inode).
 *
 *   region  (tessera_region)  the usage accounting shared by all processes of the
 *           container, mapped MAP_SHARED read-write by the hook; read (and reaped) by
 *           the monitor.
 *
 * Device index d in the region means entry d of the limits file (matched by UUID).
 *
 * Concurrency: there is no lock anywhere in this ABI. Every word that more than one
 * process touches is accessed with C11 atomics (Go: sync/atomic), so a process
 * killed at any instruction cannot block the others. Each process owns one slot
 * (claimed by CAS on `pid`), and its slot's `used` words are the only record of its
 * usage: a dead process's usage is reclaimed by zeroing its slot, which is exact
 * because the driver frees a dead process's memory too.
 *
 * Charging protocol (what makes the cap exact without a lock): to take n bytes on
 * device d, a process first adds n to its own slot's used_bytes[d] (seq_cst), then sums
 * used_bytes[d] over slots [0, slot_hwm); if the sum exceeds the limit it subtracts n
 * again and refuses. Of two racing charges at least one sees the other (store-then-load
 * on both sides, sequentially consistent), so the cap can never be exceeded; near the
 * cap both may refuse, and the hook retries once after reaping dead slots.
 *
 * Layout rules: fixed-size, naturally aligned, little-endian host order, no pointers.
 * Any incompatible change bumps TESSERA_ABI_VERSION. Go mirrors this file in
 * internal/region; a test there compares every offset and size with this header.
 */
#ifndef TESSERA_ABI_H
#define TESSERA_ABI_H

#include <stdint.h>

/* The Go layout test (cgo) cannot express _Atomic; it defines this as plain `t`.
 * _Atomic uint32_t/uint64_t have the size and alignment of the plain types on every
 * supported platform (checked below), so the layout is the same either way. */
#ifndef TESSERA_ATOMIC
#define TESSERA_ATOMIC(t) _Atomic t
#endif

#define TESSERA_ABI_VERSION 2u
#define TESSERA_MAX_DEVICES 16
#define TESSERA_MAX_PROCS 1024
#define TESSERA_UUID_LEN 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

#define TESSERA_LIMITS_MAGIC 0x53544d494c535354ull /* "TSSLIMTS" little-endian */
#define TESSERA_REGION_MAGIC 0x4e4f494745525354ull /* "TSREGION" little-endian */

/*
 * A slot's pid word: 0 = free; a pid = owned by that process; RECLAIM_BIT|r = being
 * cleared by reaper r (real pids are < 2^22, so bit 31 is never part of one).
 * Reclaiming is claim-by-CAS (pid -> RECLAIM_BIT|me), zero used_bytes, then CAS
 * (RECLAIM_BIT|me -> 0). A container process may take over a slot whose reaper is a
 * dead process of the container; the node monitor reaps as TESSERA_REAPER_NODE, which
 * container processes treat as alive (only the restarted monitor takes its own slots
 * over), because the monitor's pid is not visible in the container's pid namespace.
 */
#define TESSERA_SLOT_RECLAIM_BIT 0x80000000u
#define TESSERA_REAPER_NODE 0x7fffffffu

/* ---- limits file ---- */

typedef struct tessera_device_limit {
    char uuid[TESSERA_UUID_LEN];                /* "GPU-…" as NVML and cuDeviceGetUuid report it */
    TESSERA_ATOMIC(uint64_t) mem_limit_bytes;   /* 0 = no memory cap on this device */
    TESSERA_ATOMIC(uint32_t) core_limit_pct;    /* 0 = no compute cap; 1..100 = share of one GPU */
    TESSERA_ATOMIC(int32_t) priority;           /* 0 (highest) .. 3; compute arbitration */
    /* Compute time slices (docs/hook.md "Compute time slices"). Written by the node
     * side only: the policy by the device plugin (Allocate, reconciliation), the
     * grant and heartbeat by the node agent's arbiter. */
    TESSERA_ATOMIC(uint64_t) compute_policy;       /* TESSERA_POLICY_* */
    TESSERA_ATOMIC(uint64_t) compute_grant;        /* TESSERA_GRANT_*: what the container may use now */
    TESSERA_ATOMIC(uint64_t) compute_heartbeat_ns; /* CLOCK_MONOTONIC of the arbiter's last pass */
    uint64_t balloon_words[3];                  /* reserved for memory balloons (ceiling, state) */
} tessera_device_limit;

typedef struct tessera_limits {
    uint64_t magic;        /* TESSERA_LIMITS_MAGIC */
    uint32_t abi_version;  /* TESSERA_ABI_VERSION */
    uint32_t size;         /* sizeof(tessera_limits) */
    TESSERA_ATOMIC(uint64_t) generation; /* bumped by the writer after every change */
    uint32_t device_count; /* entries in use, <= TESSERA_MAX_DEVICES */
    uint32_t flags;        /* reserved, 0 */
    uint64_t reserved[8];
    tessera_device_limit devices[TESSERA_MAX_DEVICES];
} tessera_limits;

/* compute_policy */
#define TESSERA_POLICY_GUARANTEED 0u /* at least the share under contention; more when the GPU is idle */
#define TESSERA_POLICY_HARD 1u       /* never more than the share */

/* compute_grant: low 32 bits a rate in parts per million of the device's time
 * (0..1000000) or TESSERA_GRANT_UNPACED; bit 32 set once the arbiter owns the
 * word. A word without TESSERA_GRANT_ARBITRATED (no arbiter yet) or whose
 * heartbeat is older than TESSERA_HEARTBEAT_STALE_NS makes the hook fall back to
 * the static share: hard = paced at core_limit_pct, guaranteed = unpaced. */
#define TESSERA_GRANT_RATE_MASK 0xffffffffull
#define TESSERA_GRANT_UNPACED 0xffffffffull
#define TESSERA_GRANT_PPM_MAX 1000000ull
#define TESSERA_GRANT_ARBITRATED (1ull << 32)
#define TESSERA_GRANT_SOLO (1ull << 33) /* no other tenant is active on the GPU: a deeper queue is allowed */
/* Bits 40..63: the turn's deadline, in microseconds after the word's heartbeat
 * (compute_heartbeat_ns); 0 = none. From then on the hook treats the grant as
 * rate 0 until the arbiter writes again: a holder stops by itself when the
 * arbiter is late to hand its turn on (a node agent the OS did not run). Hooks
 * that predate it ignore these bits; arbiters that predate it leave them 0. */
#define TESSERA_GRANT_UNTIL_SHIFT 40
#define TESSERA_GRANT_UNTIL_US_MAX 0xffffffull
#define TESSERA_HEARTBEAT_STALE_NS 1000000000ull

/* ---- usage region ---- */

/*
 * Launch sequences (core region only; in a memory region these words stay 0).
 *
 * A launch sequence (one thread's bursts in one context) with work in flight is
 * counted in compute[d].inflight. A thread that launched and then waits on the host
 * (PyTorch's autograd thread between backward passes) would keep its count until it
 * next calls the hook, so each counted sequence also holds one of its process's
 * seq_until[] words: (the time by which its work in flight should be done, CLOCK_MONOTONIC
 * ns, with the low 4 bits replaced by d) | 0 = none. The owning thread refreshes the word
 * whenever it launches or synchronises. Anyone (any hook of the container, a reaper) may
 * expire a word whose time has passed: compare-and-swap it to 0, then subtract 1 from
 * compute[d].inflight. An owner that finds its word 0 when it refreshes knows its count
 * was taken and adds it again; one that ends its sequence exchanges the word for 0 and
 * subtracts only if it was not 0. Whoever clears a slot (release, reaping, a process
 * taking its slot back after exec) expires its words first. Hooks that predate these
 * words leave them 0: their sequences are counted without expiry, as before.
 */
#define TESSERA_SEQ_RECORDS 6
#define TESSERA_SEQ_DEV_MASK 0xfull

typedef struct tessera_proc_slot {
    TESSERA_ATOMIC(uint32_t) pid;         /* see TESSERA_SLOT_RECLAIM_BIT */
    uint32_t flags;                       /* reserved, 0 */
    TESSERA_ATOMIC(uint64_t) start_time;  /* /proc/<pid>/stat field 22; detects pid reuse; 0 = claim in progress */
    TESSERA_ATOMIC(uint64_t) used_bytes[TESSERA_MAX_DEVICES]; /* device memory charged to this process */
    TESSERA_ATOMIC(uint64_t) seq_until[TESSERA_SEQ_RECORDS]; /* core region only: see "Launch sequences" */
} tessera_proc_slot;

/* Per-device words of the region for compute time slices, summed over all processes
 * of the container (fork/exec children included): written by the hook, read by the
 * node agent's arbiter. Times are CLOCK_MONOTONIC nanoseconds. */
typedef struct tessera_device_compute {
    TESSERA_ATOMIC(uint64_t) busy_ns;        /* GPU time of completed launch bursts, by events */
    TESSERA_ATOMIC(uint64_t) launches;       /* kernel and graph launches seen */
    TESSERA_ATOMIC(uint64_t) demand_ns;      /* last time a process launched or waited to */
    TESSERA_ATOMIC(uint64_t) tokens_ns;      /* token bucket (int64 two's complement), paced tenants */
    TESSERA_ATOMIC(uint64_t) refill_ns;      /* last refill of tokens_ns */
    TESSERA_ATOMIC(uint64_t) throttled_ns;   /* wall time launches waited for the grant */
    TESSERA_ATOMIC(uint64_t) throttle_waits; /* launches that had to wait */
    /* Launch sequences (one thread's bursts in one context) of the container,
     * over all its processes, with work opened and not yet accounted: non-zero
     * while work it launched may still run. The arbiter hands a turn over only
     * once the previous holder's count is back to what it was when that holder
     * last idled (a process killed with work in flight leaves its count
     * behind; the arbiter also clears a count left by a container idle for
     * long), or two quanta have passed: turns that never overlap on the GPU are
     * what make the events measure each tenant's own time. Sequences in flight
     * together share the GPU's time slices, so each burst is billed its
     * elapsed time divided by this count (fork/exec'd children, threads). */
    TESSERA_ATOMIC(uint64_t) inflight;
} tessera_device_compute;

/*
 * Memory balloons (docs/balloon.md).
 *
 * Limits file, balloon_words[] of a device entry, written only by the node side (read
 * by the hook with atomic loads):
 *   [TESSERA_BALLOON_CEILING]  the cap the container was given and may grow back to;
 *                              0 = the cap is not lowered (no balloon, nothing to wait for)
 *   [TESSERA_BALLOON_WAIT_MS]  how long an allocation above the lowered cap but within
 *                              the ceiling waits for the node to reclaim; 0 = the default
 *                              (TESSERA_BALLOON_DEFAULT_WAIT_MS)
 *   [TESSERA_BALLOON_FLOOR]    the floor the cap was lowered to (the node agent's state)
 * Inflating stores the ceiling before lowering mem_limit_bytes; deflating raises
 * mem_limit_bytes before clearing the ceiling, so a hook never waits on a cap that is
 * not lowered and never misses one that is.
 *
 * Region, balloon[d]: the hook's wait-for-reclaim request on device d, seen by the node
 * agent. A waiting allocation counts itself in `waiters`, raises `want_bytes` to the
 * container usage it needs (re-asserted on every poll, so a racing clear by the last
 * leaver loses nothing), stamps `poll_ns` on every poll (at most 5 ms apart: a
 * request whose poll_ns is seconds old has no live waiter, and only then does the
 * node agent clear it), and leaves when the cap admits it or its wait bound passes.
 * A live waiter that finds `waiters` cleared counts itself again; leaving never
 * takes `waiters` below zero.
 *
 * Every wait that ends is counted in `waits_ended` (granted in the low 32 bits,
 * expired in the high 32, each modulo 2^32) and in the per-wait histogram
 * `wait_hist`: 8 lanes of 16 bits, lane k in bits 16*(k%4) of wait_hist[k/4],
 * counting (modulo 2^16) the waits that lasted at most
 * TESSERA_BALLOON_WAIT_BOUND_US_k (lane 7: longer). Lanes are raised with a
 * compare-and-swap of the word, so a lane wraps on its own and never carries into
 * its neighbour; the node agent reads differences between its passes.
 */
#define TESSERA_BALLOON_CEILING 0
#define TESSERA_BALLOON_WAIT_MS 1
#define TESSERA_BALLOON_FLOOR 2
#define TESSERA_BALLOON_DEFAULT_WAIT_MS 3000u
#define TESSERA_BALLOON_WAIT_LANES 8
#define TESSERA_BALLOON_WAIT_LANE_BITS 16
#define TESSERA_BALLOON_WAIT_BOUND_US_0 1000u
#define TESSERA_BALLOON_WAIT_BOUND_US_1 10000u
#define TESSERA_BALLOON_WAIT_BOUND_US_2 50000u
#define TESSERA_BALLOON_WAIT_BOUND_US_3 200000u
#define TESSERA_BALLOON_WAIT_BOUND_US_4 500000u
#define TESSERA_BALLOON_WAIT_BOUND_US_5 1000000u
#define TESSERA_BALLOON_WAIT_BOUND_US_6 2500000u

typedef struct tessera_device_balloon {
    TESSERA_ATOMIC(uint64_t) want_bytes;     /* usage the waiting allocations need; 0 = no request */
    TESSERA_ATOMIC(uint64_t) waiters;        /* allocations waiting now */
    TESSERA_ATOMIC(uint64_t) wait_since_ns;  /* CLOCK_MONOTONIC start of the current waits; 0 = none */
    TESSERA_ATOMIC(uint64_t) wait_hist[2];   /* ended waits by duration: 8 lanes of 16 bits */
    TESSERA_ATOMIC(uint64_t) waits_ended;    /* low 32 bits: admitted; high 32: CUDA_ERROR_OUT_OF_MEMORY */
    TESSERA_ATOMIC(uint64_t) wait_ns_total;  /* nanoseconds spent in ended waits */
    TESSERA_ATOMIC(uint64_t) poll_ns;        /* CLOCK_MONOTONIC of the latest poll by any waiter */
} tessera_device_balloon;

typedef struct tessera_region {
    uint64_t magic;        /* TESSERA_REGION_MAGIC */
    uint32_t abi_version;  /* TESSERA_ABI_VERSION */
    uint32_t size;         /* sizeof(tessera_region) */
    uint32_t max_devices;  /* TESSERA_MAX_DEVICES */
    uint32_t max_procs;    /* TESSERA_MAX_PROCS */
    TESSERA_ATOMIC(uint32_t) slot_hwm;    /* 1 + highest slot index ever claimed; scans stop here */
    uint32_t pad0;
    TESSERA_ATOMIC(uint64_t) refused[TESSERA_MAX_DEVICES];     /* allocations refused for the cap */
    TESSERA_ATOMIC(uint64_t) peak_bytes[TESSERA_MAX_DEVICES];  /* highest total usage seen */
    TESSERA_ATOMIC(uint64_t) reaped_procs;                     /* dead processes whose slots were cleared */
    TESSERA_ATOMIC(uint64_t) reaped_bytes;                     /* bytes reclaimed from them */
    uint64_t reserved[30];
    tessera_proc_slot slots[TESSERA_MAX_PROCS];
    tessera_device_compute compute[TESSERA_MAX_DEVICES]; /* per-device compute accounting */
    tessera_device_balloon balloon[TESSERA_MAX_DEVICES]; /* per-device balloon requests */
} tessera_region;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(TESSERA_ATOMIC(uint64_t)) == 8, "atomic u64 must be 8 bytes");
_Static_assert(sizeof(TESSERA_ATOMIC(uint32_t)) == 4, "atomic u32 must be 4 bytes");
_Static_assert(sizeof(tessera_device_limit) == 160, "tessera_device_limit layout");
_Static_assert(sizeof(tessera_proc_slot) == 192, "tessera_proc_slot layout");
_Static_assert(sizeof(tessera_device_compute) == 64, "tessera_device_compute layout");
_Static_assert(sizeof(tessera_device_balloon) == 64, "tessera_device_balloon layout");
#endif

#endif /* TESSERA_ABI_H */
