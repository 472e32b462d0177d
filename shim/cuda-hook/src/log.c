/* log.c — stderr diagnostics. Each message is formatted into one buffer and written
 * with a single write(2), so lines from concurrent processes and threads never mix. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

int hook_log_threshold = HOOK_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void hook_log_write(int level, const char *fmt, ...)
{
    char buf[512];
    int saved = errno;
    int n = snprintf(buf, sizeof buf, "tessera-hook[%d] %s: ", (int)getpid(), level_names[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
    errno = saved;
}
