/* once.c — hook_once: a three-state word (not run, running, done) and a futex to
 * sleep on while another thread runs the function (it dlopens the driver, which
 * takes long enough that spinning would burn a core). */
#include "once.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { ONCE_NOT_RUN, ONCE_RUNNING, ONCE_DONE };

static void run(hook_once_t *once, void (*fn)(void))
{
    fn();
    atomic_store_explicit(&once->state, ONCE_DONE, memory_order_release);
    syscall(SYS_futex, (int *)&once->state, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void hook_once(hook_once_t *once, void (*fn)(void))
{
    int state = atomic_load_explicit(&once->state, memory_order_acquire);
    if (state == ONCE_DONE)
        return;
    int self = (int)getpid();
    if (state == ONCE_NOT_RUN && atomic_compare_exchange_strong(&once->state, &state, ONCE_RUNNING)) {
        atomic_store(&once->pid, self);
        run(once, fn);
        return;
    }
    /* Woken when the runner is done; the timeout notices a runner that is not in
     * this process (we were forked while it ran), and a pid not stored yet. */
    const struct timespec tick = {0, 10 * 1000 * 1000};
    while (atomic_load_explicit(&once->state, memory_order_acquire) == ONCE_RUNNING) {
        int runner = atomic_load(&once->pid);
        if (runner != 0 && runner != self && atomic_compare_exchange_strong(&once->pid, &runner, self)) {
            run(once, fn);
            return;
        }
        syscall(SYS_futex, (int *)&once->state, FUTEX_WAIT_PRIVATE, ONCE_RUNNING, &tick, NULL, 0);
    }
}
