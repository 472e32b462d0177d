/* once.c — hook_once: one word that says not run, done, or which process is
 * running the function, and a futex to sleep on meanwhile (it dlopens the driver,
 * which takes long enough that spinning would burn a core). Naming the process in
 * the same word that is claimed means a fork at any instant leaves the child a
 * word it can recognise as its parent's. */
#include "once.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ONCE_NOT_RUN = 0, ONCE_DONE = -1 };

void hook_once(hook_once_t *once, void (*fn)(void))
{
    int state = atomic_load_explicit(once, memory_order_acquire);
    if (state == ONCE_DONE)
        return;
    int self = (int)getpid();
    for (;;) {
        if (state == ONCE_DONE)
            return;
        /* Not run, or run by a thread of the parent we were forked from. */
        if (state != self && atomic_compare_exchange_strong(once, &state, self)) {
            fn();
            atomic_store_explicit(once, ONCE_DONE, memory_order_release);
            syscall(SYS_futex, (int *)once, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
            return;
        }
        if (state == self) {
            /* Returns at once when the word is no longer ours; interruptions loop. */
            syscall(SYS_futex, (int *)once, FUTEX_WAIT_PRIVATE, self, NULL, NULL, 0);
            state = atomic_load_explicit(once, memory_order_acquire);
        }
        /* A failed compare-and-swap reloaded state: look again. */
    }
}
