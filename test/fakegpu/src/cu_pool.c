/* cu_pool.c — stream-ordered allocator (pools). */
#include "cu_internal.h"

void fg_pools_init(void) {}
void fg_pools_reset(void) {}
void fg_pools_sync(int dev) { (void)dev; }
void fg_pool_release_entry(const struct fg_entry *e) { fg_uncharge(e->dev, e->charged); }
