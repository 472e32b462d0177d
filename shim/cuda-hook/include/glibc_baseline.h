/* glibc_baseline.h — bind the glibc entry points whose default symbol version is
 * newer than the oldest glibc the hook and the simulated driver must load in.
 *
 * The hook is loaded through /etc/ld.so.preload into every program of a container:
 * one symbol version the image's glibc lacks and the dynamic loader refuses to start
 * any program there. Building on a new glibc binds dlopen, dlvsym, dlerror and
 * pthread_once to GLIBC_2.34 and fstat to GLIBC_2.33; this header binds them to the
 * architecture's base version instead (x86_64 GLIBC_2.2.5, aarch64 GLIBC_2.17; the
 * baseline is GLIBC_2.17, as manylinux2014), which every glibc since keeps exporting.
 *
 * Before glibc 2.34 the dl* functions live in libdl.so.2, not libc.so.6. Linking
 * libdl would load it into every program of the container (measured in docs/hook.md),
 * so they are weak references instead: any process that can reach a CUDA driver has
 * libdl loaded already (the driver and every program that calls dlopen need it), and
 * the hook checks dl_available() and fails closed otherwise. pthread_once, which also
 * lived in libpthread, is replaced by hook_once (src/once.c). fstat was a header
 * wrapper around __fxstat before 2.33; baseline_fstat calls that directly.
 *
 * Include it in every file that calls one of these; TestLibrariesNeedOnlyBaselineGlibc
 * fails when a newer version slips in. */
#ifndef TESSERA_GLIBC_BASELINE_H
#define TESSERA_GLIBC_BASELINE_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#if defined(__x86_64__)
#define GLIBC_BASELINE_VERSION "GLIBC_2.2.5"
#define GLIBC_BASELINE_STAT_VER 1 /* _STAT_VER_LINUX */
#elif defined(__aarch64__)
#define GLIBC_BASELINE_VERSION "GLIBC_2.17"
#define GLIBC_BASELINE_STAT_VER 0
#else
#error "glibc_baseline.h: add this architecture's base symbol version"
#endif

__asm__(".symver dlopen,dlopen@" GLIBC_BASELINE_VERSION);
__asm__(".symver dlerror,dlerror@" GLIBC_BASELINE_VERSION);
__asm__(".symver dlvsym,dlvsym@" GLIBC_BASELINE_VERSION);
__asm__(".symver __fxstat,__fxstat@" GLIBC_BASELINE_VERSION);

#pragma weak dlopen
#pragma weak dlerror
#pragma weak dlvsym

int __fxstat(int ver, int fd, struct stat *st);

/* The dl* functions resolved (libc >= 2.34, or libdl loaded). */
static inline bool dl_available(void) { return &dlopen != NULL && &dlerror != NULL && &dlvsym != NULL; }

static inline int baseline_fstat(int fd, struct stat *st) { return __fxstat(GLIBC_BASELINE_STAT_VER, fd, st); }

#endif
