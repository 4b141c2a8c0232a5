/* TESSERA_TRACE=path: every allocation event in RMM's CSV log format
 *     Thread,Time,Action,Pointer,Size,Stream
 * so RMM's REPLAY_BENCH reads tessera's logs and tessera-replay reads RMM's.
 *
 * Lines are formatted on the stack and appended to a 256 KiB buffer under a mutex; the buffer is
 * written when full and at exit. The file is bounded by TESSERA_TRACE_LIMIT (bytes, K/M/G
 * suffixes, default 1G): past it recording stops and says so once. A fork child does not
 * record (its lines would interleave with the parent's in one file).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim/shim.h"

#define TRACE_BUF (256u * 1024u)

static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static int trace_fd = -1;
static bool trace_on;
static char trace_buf[TRACE_BUF];
static size_t trace_len;
static unsigned long long trace_written, trace_limit = 1ull << 30;
static __thread long trace_tid;

static void trace_flush_locked(void)
{
    size_t off = 0;
    while (off < trace_len) {
        ssize_t w = write(trace_fd, trace_buf + off, trace_len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    trace_written += trace_len;
    trace_len = 0;
}

static void trace_at_exit(void)
{
    pthread_mutex_lock(&trace_lock);
    if (trace_on) {
        trace_flush_locked();
        trace_on = false;
        close(trace_fd);
        trace_fd = -1;
    }
    pthread_mutex_unlock(&trace_lock);
}

static unsigned long long parse_limit(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v;
}

static void trace_init(void)
{
    const char *path = getenv("TESSERA_TRACE");
    if (!path || !*path)
        return;
    const char *lim = getenv("TESSERA_TRACE_LIMIT");
    if (lim && *lim)
        trace_limit = parse_limit(lim);
    trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (trace_fd < 0) {
        ts_log("TESSERA_TRACE: cannot open %s: %s; not recording", path, strerror(errno));
        return;
    }
    static const char header[] = "Thread,Time,Action,Pointer,Size,Stream\n";
    memcpy(trace_buf, header, sizeof header - 1);
    trace_len = sizeof header - 1;
    trace_on = true;
    atexit(trace_at_exit);
}

static void trace_line(const char *action, uintptr_t ptr, size_t size)
{
    pthread_once(&trace_once, trace_init);
    if (!__atomic_load_n(&trace_on, __ATOMIC_ACQUIRE))
        return;
    if (!trace_tid)
        trace_tid = (long)syscall(SYS_gettid);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long sod = (long)(ts.tv_sec % 86400); /* UTC time of day, as RMM's %H:%M:%S.%f */
    char line[160];
    int n;
    /* the stream as RMM writes it (%llx: hex, no prefix); tessera records stream 0 */
    if (ptr)
        n = snprintf(line, sizeof line, "%ld,%02ld:%02ld:%02ld.%06ld,%s,%#lx,%zu,0\n", trace_tid,
                     sod / 3600, sod / 60 % 60, sod % 60, ts.tv_nsec / 1000, action,
                     (unsigned long)ptr, size);
    else
        n = snprintf(line, sizeof line, "%ld,%02ld:%02ld:%02ld.%06ld,%s,(nil),%zu,0\n",
                     trace_tid, sod / 3600, sod / 60 % 60, sod % 60, ts.tv_nsec / 1000, action,
                     size);
    if (n <= 0)
        return;
    pthread_mutex_lock(&trace_lock);
    if (trace_on) {
        if (trace_written + trace_len + (size_t)n > trace_limit) {
            trace_flush_locked();
            trace_on = false;
            ts_log("TESSERA_TRACE: limit of %llu bytes reached; recording stopped (raise "
                   "TESSERA_TRACE_LIMIT)", trace_limit);
        } else {
            if (trace_len + (size_t)n > TRACE_BUF)
                trace_flush_locked();
            memcpy(trace_buf + trace_len, line, (size_t)n);
            trace_len += (size_t)n;
        }
    }
    pthread_mutex_unlock(&trace_lock);
}

void ts_trace_alloc(uintptr_t ptr, size_t size, bool failed)
{
    trace_line(failed ? "allocate failure" : "allocate", failed ? 0 : ptr, size);
}

void ts_trace_free(uintptr_t ptr, size_t size)
{
    trace_line("free", ptr, size); /* RMM's replay passes this size to deallocate */
}

void ts_trace_after_fork(void)
{
    pthread_mutex_init(&trace_lock, NULL);
    if (trace_on) {
        trace_on = false; /* the parent's buffer is the parent's to write */
        trace_len = 0;
        close(trace_fd);
        trace_fd = -1;
    }
}
