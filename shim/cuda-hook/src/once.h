/* once.h — run a function exactly once across threads (hook initialisation). */
#ifndef HOOK_ONCE_H
#define HOOK_ONCE_H

/* 0: not run; -1: done; otherwise the pid of the process one of whose threads is
 * running it. Zero-initialised. */
typedef _Atomic int hook_once_t;

/* Runs fn on the first call; every other caller waits until it has returned. A
 * child forked while another thread ran fn runs it again, as pthread_once does.
 * Unlike pthread_once it needs nothing from libpthread, which glibc before 2.34
 * keeps out of libc (glibc_baseline.h). Never on a hot path: callers check their
 * own ready flag first. */
void hook_once(hook_once_t *once, void (*fn)(void));

#endif
