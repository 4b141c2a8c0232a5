/* Logging as a guest in someone else's process: stderr only, one write(2) per line, prefixed,
 * formatted on the stack, never allocating, never touching stdout. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim/shim.h"

__attribute__((format(printf, 1, 0))) static void log_write(const char *fmt, va_list ap)
{
    char buf[1024];
    int saved = errno;
    int n = snprintf(buf, sizeof buf, "tessera: ");
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
    errno = saved;
}

void ts_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_write(fmt, ap);
    va_end(ap);
}

#define ONCE_KEYS 64
static const void *once_keys[ONCE_KEYS];

void ts_log_once(const void *key, const char *fmt, ...)
{
    for (size_t i = 0; i < ONCE_KEYS; i++) {
        const void *k = __atomic_load_n(&once_keys[i], __ATOMIC_ACQUIRE);
        if (k == key)
            return;
        if (k == NULL) {
            const void *expected = NULL;
            if (!__atomic_compare_exchange_n(&once_keys[i], &expected, key, false,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (expected == key)
                    return;
                continue;
            }
            break;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    log_write(fmt, ap);
    va_end(ap);
}
