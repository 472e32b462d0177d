/* balloon.h — the bounded wait-for-reclaim of a container whose cap the node lowered
 * (a memory balloon, docs/balloon.md). Only refused allocations get here: the
 * admitted path never reads a balloon word. */
#ifndef HOOK_BALLOON_H
#define HOOK_BALLOON_H

#include <stdint.h>

#include "tessera_abi.h"

/* An allocation of n bytes on device idx was refused at the cap. If the cap is
 * lowered and usage + n fits the ceiling, publish a request in the region and retry
 * until the node raises the cap or the wait bound passes; no lock is held. Returns
 * LIMITER_OK (charged) or LIMITER_OVER_CAP (not charged, refusal not yet counted). */
int balloon_wait(const char *api, int idx, uint64_t n);

/* Counts one ended wait of waited_ns in b: waits_ended (admitted or not) and the
 * lane of wait_hist its duration falls in (tessera_abi.h). */
void balloon_count_wait(tessera_device_balloon *b, uint64_t waited_ns, int admitted);

/* The wait bound for a balloon's wait word: 0 = the default; capped at a minute so
 * a wrong word cannot hang an allocation. */
uint64_t balloon_wait_ms(uint64_t word);

#endif
