/* log.h — one-line diagnostics on stderr (never stdout), filtered by TESSERA_LOG. */
#ifndef HOOK_LOG_H
#define HOOK_LOG_H

enum hook_log_level { HOOK_LOG_ERROR = 0, HOOK_LOG_WARN = 1, HOOK_LOG_INFO = 2, HOOK_LOG_DEBUG = 3 };

/* Current threshold; set once from the configuration, read without a lock. */
extern int hook_log_threshold;

void hook_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define hook_log(level, ...)                                                                                       \
    do {                                                                                                           \
        if ((level) <= hook_log_threshold)                                                                         \
            hook_log_write((level), __VA_ARGS__);                                                                  \
    } while (0)

#endif
