/* pools.h — stream-ordered memory pools are charged for what they reserve from the
 * device (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not for what they hand out: freed
 * blocks stay reserved until the pool trims. The charge follows the reservation. */
#ifndef HOOK_POOLS_H
#define HOOK_POOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_driver.h"

/* Remember which limits-file device a pool belongs to (first sighting wins).
 * Whether the pool is tracked (false: the table is full; charge per allocation). */
bool pool_note(CUmemoryPool pool, int idx);
/* The pool's device index, or def when the pool was never seen. */
int pool_index(CUmemoryPool pool, int def);
/* Reserved minus used: what the pool can hand out without growing. */
uint64_t pool_headroom(CUmemoryPool pool);
/* Add n to what is charged for the pool as an allocation's pending pre-charge
 * (after limiter_charge took it). */
void pool_add_charge(CUmemoryPool pool, uint64_t n);
/* Bring the pool's charge to its current reservation (plus the pre-charges of
 * allocations still in flight). checked: growth must fit under the cap (returns
 * -1 and changes nothing when it does not); unchecked: the driver already holds
 * the memory, charge it whatever the cap. A reading that another thread's change
 * overtook is read again, never applied. */
int pool_reconcile(CUmemoryPool pool, int checked);
/* The same for the allocation that pre-charged pre with pool_add_charge: its
 * pre-charge is settled (no longer pending) unless -1 is returned. */
int pool_reconcile_pre(CUmemoryPool pool, int checked, uint64_t pre);
/* After a sync point: reconcile every known pool (reservations shrink there). */
void pool_reconcile_all(void);
/* An allocation from / free into the pool. */
void pool_outstanding(CUmemoryPool pool, int delta);
/* The pool was destroyed: its charge goes when its last allocation is freed. */
void pool_destroyed(CUmemoryPool pool);

extern _Atomic int pools_known; /* >0 once any pool was seen */

void pools_atfork_prepare(void);
void pools_atfork_parent(void);
void pools_atfork_child(void); /* the child owns none of its parent's pools' charges */
#endif
