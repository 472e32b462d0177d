/* interpose.h — the three paths to the driver that programs use: exported symbols
 * (these files' TESSERA_EXPORT functions), cuGetProcAddress(_v2), and dlsym. */
#ifndef HOOK_INTERPOSE_H
#define HOOK_INTERPOSE_H

/* Find the real dlsym (dlvsym on the GLIBC versions that define it). */
void interpose_resolve_dlsym(void);
/* Fill REAL / REAL_NVML from the driver libraries' handles (cuda: NULL when
 * there is no driver; every wrapped entry point then fails cleanly). */
void interpose_resolve_cuda(void *handle);
void interpose_resolve_nvml(void *handle);
/* The pointer to hand out for a driver symbol: our wrapper when p is the real entry
 * point we intercept, p otherwise. */
void *interpose_wrap(const char *name, void *p);

#endif
