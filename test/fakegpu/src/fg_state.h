/*
 * fg_state.h — the node-wide state file shared by every process that uses the
 * simulated GPU (and read by Go tests): physical memory per process and device,
 * simulated busy time, and each device's kernel timeline.
 *
 * No lock is ever held while a process runs: every shared word is a C11 atomic,
 * each process owns one slot claimed by CAS on `owner`, and the slots' `used`
 * words are the only record of memory in use. A device's memory in use is the sum
 * over slots, so a SIGKILLed process can leave no inconsistency behind: whoever
 * next notices that its owner is dead zeroes its slot (the real driver frees a
 * dead process's memory too). The only lock is flock() during file set-up, which
 * the kernel drops when its holder dies.
 *
 * Layout (little-endian, fixed, documented in docs/fakegpu.md): header (64 bytes),
 * FG_MAX_DEVICES device records (64 bytes each), FG_MAX_SLOTS slots (384 bytes).
 */
#ifndef FAKEGPU_STATE_H
#define FAKEGPU_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "fg_config.h"
#include "fg_sched.h"

#define FG_STATE_MAGIC 0x3145544154534746ull /* "FGSTATE1" little-endian */
#define FG_STATE_VERSION 2u
#define FG_MAX_SLOTS 256
#define FG_OWNER_REAPING (1ull << 63)

struct fg_state_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;     /* sizeof(struct fg_state_header) */
    uint32_t device_size;     /* sizeof(struct fg_state_device) */
    uint32_t slot_size;       /* sizeof(struct fg_state_slot) */
    uint32_t max_devices;     /* FG_MAX_DEVICES */
    uint32_t max_slots;       /* FG_MAX_SLOTS */
    uint32_t device_count;    /* devices configured */
    _Atomic uint32_t slot_hwm; /* slots [0, slot_hwm) have ever been claimed */
    uint64_t config_fingerprint;
    uint64_t boot_id;         /* hash of /proc/sys/kernel/random/boot_id */
    uint64_t slice_ns;        /* time slice of a context (FAKEGPU_SLICE_US of the formatter) */
};

struct fg_state_device {
    uint64_t mem_bytes;              /* physical capacity */
    uint64_t reserved0;              /* version 1: tail of the serial timeline */
    _Atomic uint64_t busy_total_ns;  /* kernel time ever queued on the device */
    _Atomic uint64_t xid_seq;        /* Xid errors injected by tests (NVML events) */
    _Atomic uint64_t xid_last;       /* code of the latest one (written before xid_seq) */
    _Atomic uint64_t sched;          /* committed timeline snapshot (fg_sched.h) */
    uint64_t reserved[2];
};

struct fg_state_slot {
    /* 0: free. Else pid (bits 0-31) | process start time in clock ticks, low 31
     * bits (bits 32-62). FG_OWNER_REAPING | pid: being zeroed by that pid. */
    _Atomic uint64_t owner;
    _Atomic uint64_t claimed_ns;                 /* CLOCK_MONOTONIC at claim */
    _Atomic uint64_t used[FG_MAX_DEVICES];       /* physical bytes held */
    _Atomic uint64_t busy_ns[FG_MAX_DEVICES];    /* kernel time queued by the process */
    _Atomic uint32_t contexts[FG_MAX_DEVICES];   /* live contexts on the device */
    uint64_t reserved[6];
};

struct fg_state {
    struct fg_state_header hdr;
    struct fg_state_device dev[FG_MAX_DEVICES];
    struct fg_state_slot slot[FG_MAX_SLOTS];
    struct fg_sched_slot sched[FG_MAX_SLOTS]; /* launch rings and snapshot buffers */
};

/* Size of a version 1 file (no timeline): replaced when no live process uses it. */
#define FG_STATE_V1_SIZE (64 + 64 * FG_MAX_DEVICES + 384 * FG_MAX_SLOTS)

_Static_assert(sizeof(struct fg_state_header) == 64, "header layout");
_Static_assert(sizeof(struct fg_state_device) == 64, "device layout");
_Static_assert(sizeof(struct fg_state_slot) == 384, "slot layout");

/* Maps (creating or validating) the state file for cfg. Returns the mapping or
 * NULL with a message in err. */
struct fg_state *fg_state_open(const struct fg_config *cfg, uint64_t slice_ns, char *err, unsigned errlen);

void fg_state_close(struct fg_state *st);

/* Claims a slot for the calling process; NULL when all are held by live processes. */
struct fg_state_slot *fg_state_claim(struct fg_state *st);

/* Takes n physical bytes on dev for slot s; 0, or -1 when the device is full. */
int fg_state_charge(struct fg_state *st, struct fg_state_slot *s, int dev, uint64_t n);
void fg_state_uncharge(struct fg_state_slot *s, int dev, uint64_t n);

/* Bytes in use on dev by all slots (dead, unreaped ones included). */
uint64_t fg_state_used(const struct fg_state *st, int dev);

/* Zeroes the slots of dead processes; returns how many were reclaimed. */
int fg_state_reap(struct fg_state *st);

/* pid of a slot's owner, or 0 if the slot is free or being reaped. */
static inline uint32_t fg_owner_pid(uint64_t owner)
{
    return (owner == 0 || (owner & FG_OWNER_REAPING)) ? 0 : (uint32_t)owner;
}

/* Whether slot still belongs to owner and its process lives: it holds the
 * slot's lock (see fg_state.c), whatever pid namespace it runs in. */
int fg_owner_alive(const struct fg_state *st, uint32_t slot, uint64_t owner);

/* Uses path (the state file) for the slots' liveness locks; fg_state_open calls
 * it. Unit tests with an anonymous state call it with a scratch file. */
int fg_state_lock_file(const char *path);

uint64_t fg_now_ns(void);

#endif
