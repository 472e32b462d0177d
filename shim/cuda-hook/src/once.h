/* once.h — run a function exactly once across threads (hook initialisation). */
#ifndef HOOK_ONCE_H
#define HOOK_ONCE_H

typedef struct {
    _Atomic int state; /* zero-initialised: not run yet */
    _Atomic int pid;   /* the process whose thread is running it */
} hook_once_t;

/* Runs fn on the first call; every other caller waits until it has returned. A
 * child forked while another thread ran fn runs it again, as pthread_once does.
 * Unlike pthread_once it needs nothing from libpthread, which glibc before 2.34
 * keeps out of libc (glibc_baseline.h). Never on a hot path: callers check their
 * own ready flag first. */
void hook_once(hook_once_t *once, void (*fn)(void));

#endif
