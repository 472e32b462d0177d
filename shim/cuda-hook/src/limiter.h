/* limiter.h — caps. Maps the limits files and the usage region and implements the
 * charging protocol of tessera_abi.h for this process's slot. Device indices are
 * entries of the limits file; -1 means "not listed" (devices.c refuses such a GPU
 * while limits are in force: DEVICE_UNLISTED). */
#ifndef HOOK_LIMITER_H
#define HOOK_LIMITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "tessera_abi.h"

enum { LIMITER_OK = 0, LIMITER_OVER_CAP = -1, LIMITER_NO_SLOT = -2 };

/* Map the files the configuration names. 0, or -1 with a message in err. */
int limiter_open(const struct hook_config *cfg, char *err, size_t errlen);

/* Whether a limits file is in force (otherwise every device passes through). */
bool limiter_active(void);

/* Entry of the limits file for a "GPU-…" UUID, or -1 when it is not listed. */
int limiter_index(const char *uuid);

/* Take n bytes on device idx for this process: LIMITER_OK, LIMITER_OVER_CAP (nothing
 * taken; counted in the region's refused[]) or LIMITER_NO_SLOT. idx < 0: no-op. */
int limiter_charge(int idx, uint64_t n);
/* limiter_charge without counting a refusal (the caller may still wait for a
 * balloon to deflate, balloon.c); limiter_note_refused counts one. */
int limiter_try(int idx, uint64_t n);
void limiter_note_refused(int idx);
/* Take n bytes whatever the cap (memory the driver already holds for us). */
void limiter_force(int idx, uint64_t n);
/* Give n bytes back (saturating at zero). */
void limiter_uncharge(int idx, uint64_t n);

uint64_t limiter_cap(int idx);   /* current cap in bytes, 0 = uncapped */
uint64_t limiter_usage(int idx); /* the container's usage on idx, all processes */
uint32_t limiter_core_pct(const char *uuid); /* TESSERA_CORE_LIMITS entry, 0 = none */
/* The mapped core-limits file and core region (NULL when not configured). */
void limiter_core_files(const tessera_limits **core_limits, tessera_region **core_region);

/* The mapped files while limits are in force, else NULL (balloon.c reads its words). */
const tessera_limits *limiter_limits(void);
tessera_region *limiter_region(void);

/* Process lifecycle: the child of fork() claims its own slot on first charge; at
 * exit the slot is handed back (the driver frees the memory with the process). */
void limiter_atfork_child(void);
void limiter_release(void);

#endif
