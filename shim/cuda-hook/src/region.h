/* region.h — map and validate the limits file and the usage region, and the slot
 * protocol of tessera_abi.h (claim, release, reap dead processes). */
#ifndef HOOK_REGION_H
#define HOOK_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tessera_abi.h"

/* Map the usage region read-write / a limits file read-only, checking size, magic,
 * ABI version and the size fields. 0, or -1 with a message in err. */
int region_map(const char *path, tessera_region **out, char *err, size_t errlen);
int limits_map(const char *path, const tessera_limits **out, char *err, size_t errlen);
void region_unmap(tessera_region *r);
void limits_unmap(const tessera_limits *l);

/* /proc/<pid>/stat field 22 and whether the process is a zombie with no thread left
 * (state Z or X and num_threads at most 1: a leader that called pthread_exit is a
 * zombie whose process lives on). 0, or -1 when the process does not exist or
 * cannot be read. */
int proc_identity(pid_t pid, uint64_t *start_time, bool *zombie);
/* The same from the text of a stat file (NUL-terminated). 0, or -1 if malformed. */
int proc_stat_parse(const char *buf, uint64_t *start_time, bool *zombie);

/* Whether the owner of a slot (pid, start_time; start_time 0 = still claiming) is
 * alive. Unreadable means alive: never take a live process's usage away. */
bool proc_alive(uint32_t pid, uint64_t start_time);

/* Claim a slot for this process (pid, start_time), reaping dead slots first and
 * taking over a slot this very process left behind across exec. Slot index, or -1
 * when every slot belongs to a live process. */
int region_claim(tessera_region *r, uint32_t pid, uint64_t start_time);

/* Give a slot back at exit: zero its usage, then free it. */
void region_release(tessera_region *r, int slot, uint32_t pid);

/* Clear the slots of dead processes (and slots whose reaper died). Returns how
 * many were cleared. me/my_start identify this process (the reaper). */
int region_reap(tessera_region *r, uint32_t me, uint64_t my_start);

/* Expires the launch-sequence words of slot s whose time is at or before now
 * (UINT64_MAX: all of them), taking their counts from r's compute[].inflight
 * (tessera_abi.h, "Launch sequences"). Returns how many it expired. */
int region_expire_seqs(tessera_region *r, tessera_proc_slot *s, uint64_t now);

/* Subtracts n from *w, never below 0 (a count another process left behind may
 * have been taken back already). */
void region_dec_floor(_Atomic uint64_t *w, uint64_t n);

/* Sum of used_bytes[dev] over slots [0, slot_hwm). */
uint64_t region_usage(tessera_region *r, int dev);

#endif
