/* TESSERA_TRACE=path: every allocation event in RMM's CSV log format
 *     Thread,Time,Action,Pointer,Size,Stream,Note
 * so RMM's REPLAY_BENCH reads tessera's logs and tessera-replay reads RMM's. RMM's parser reads
 * the columns it knows by name, so the Note column is tessera's own: on the first row and on
 * each "allocate failure" row it says what the allocator ran on,
 *     "device=D total=BYTES limit=BYTES conf=TEXT"
 * (the device's total, the allocator's cap or 0, the effective configuration), so that a replay
 * of a run that died uses the device the run had. Other rows leave it out (RMM's parser takes
 * rows with fewer fields than the header as long as its own columns are there).
 *
 * Lines are formatted on the stack and appended to a 256 KiB buffer under a mutex; the buffer is
 * written when full and at exit. The file is bounded by TESSERA_TRACE_LIMIT (bytes, K/M/G/T
 * suffixes, default 1G): past it recording stops and says so once. A fork child does not
 * record (its lines would interleave with the parent's in one file).
 *
 * We are a guest in the program: no descriptor is held between writes (the program may close
 * fds it did not open and reuse the numbers for its own files), so each flush opens the file by
 * its absolute path, checks it is still the file created at start (dev, ino), appends and
 * closes. Only regular files of this user and character devices (/dev/null) are accepted:
 * symbolic links are not followed (a planted link must not truncate its target), and a FIFO
 * would block the program or kill it with SIGPIPE. Every problem is one line, said once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim/shim.h"

#define TRACE_BUF (256u * 1024u)

static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static bool trace_on;
static char trace_path[PATH_MAX]; /* absolute: the program may chdir */
static dev_t trace_dev;           /* identity of the file opened at start */
static ino_t trace_ino;
static char trace_buf[TRACE_BUF];
static size_t trace_len;
static unsigned long long trace_written, trace_limit = 1ull << 30;
static __thread long trace_tid;

#define TRACE_OPEN_FLAGS (O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)

/* Append the buffer to the file; on any failure stop recording and say why, once. */
static void trace_flush_locked(void)
{
    if (trace_len == 0)
        return;
    const char *why = NULL;
    int e = 0;
    int fd = open(trace_path, TRACE_OPEN_FLAGS | O_APPEND);
    struct stat st;
    if (fd < 0) {
        e = errno;
        why = "cannot reopen it";
    } else if (fstat(fd, &st) != 0 || st.st_dev != trace_dev || st.st_ino != trace_ino) {
        why = "the file was removed or replaced";
    } else {
        size_t off = 0;
        while (off < trace_len) {
            ssize_t w = write(fd, trace_buf + off, trace_len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                e = w < 0 ? errno : EIO;
                why = "write";
                break;
            }
            off += (size_t)w;
        }
        trace_written += off;
    }
    if (fd >= 0)
        close(fd);
    trace_len = 0;
    if (why) {
        trace_on = false;
        ts_log("TESSERA_TRACE: writing %s failed (%s%s%s); recording stopped after %llu bytes",
               trace_path, why, e ? ": " : "", e ? strerror(e) : "", trace_written);
    }
}

static void trace_at_exit(void)
{
    pthread_mutex_lock(&trace_lock);
    if (trace_on) {
        trace_flush_locked();
        trace_on = false;
    }
    pthread_mutex_unlock(&trace_lock);
}

/* Bytes: decimal digits, then optionally one of K, M, G, T (binary multiples, any case); at
 * least 1. Returns false for anything else ("abc", "1e9", "10X", "-1", overflow). */
static bool parse_limit(const char *s, unsigned long long *out)
{
    unsigned long long v = 0;
    const char *d = s;
    for (; *d >= '0' && *d <= '9'; d++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return false;
        v = v * 10 + (unsigned)(*d - '0');
    }
    if (d == s)
        return false;
    unsigned shift = 0;
    switch (*d) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: return false;
    }
    if (*d && d[1] != '\0')
        return false;
    if (v == 0 || v > (ULLONG_MAX >> shift))
        return false;
    *out = v << shift;
    return true;
}

/* Create or truncate the trace file, refusing what must not be written (see the top). */
static bool trace_open_file(const char *path)
{
    char cwd[PATH_MAX] = "";
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd)) {
        ts_log("TESSERA_TRACE: cannot resolve %s: %s; not recording", path, strerror(errno));
        return false;
    }
    int n = snprintf(trace_path, sizeof trace_path, "%s%s%s", cwd, cwd[0] ? "/" : "", path);
    if (n < 0 || (size_t)n >= sizeof trace_path) {
        ts_log("TESSERA_TRACE: path too long; not recording");
        return false;
    }
    int fd = open(trace_path, TRACE_OPEN_FLAGS | O_CREAT, 0644);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            ts_log("TESSERA_TRACE: %s is a symbolic link (not followed); not recording", path);
        else if (e == ENXIO)
            ts_log("TESSERA_TRACE: %s is a FIFO (not a regular file); not recording", path);
        else
            ts_log("TESSERA_TRACE: cannot open %s: %s; not recording", path, strerror(e));
        return false;
    }
    struct stat st;
    const char *bad = NULL;
    if (fstat(fd, &st) != 0)
        bad = "cannot be examined";
    else if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
        bad = "is not a regular file";
    else if (S_ISREG(st.st_mode) && st.st_uid != geteuid())
        bad = "belongs to another user";
    else if (S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)
        bad = "cannot be truncated";
    if (bad) {
        close(fd);
        ts_log("TESSERA_TRACE: %s %s; not recording", path, bad);
        return false;
    }
    trace_dev = st.st_dev;
    trace_ino = st.st_ino;
    close(fd);
    return true;
}

static void trace_fork_child(void);

static void trace_init(void)
{
    pthread_atfork(NULL, NULL, trace_fork_child);
    const char *path = getenv("TESSERA_TRACE");
    if (!path || !*path)
        return;
    const char *lim = getenv("TESSERA_TRACE_LIMIT");
    if (lim && *lim && !parse_limit(lim, &trace_limit)) {
        ts_log("TESSERA_TRACE_LIMIT: '%.64s' is not a size (bytes, at least 1, with an optional "
               "K, M, G or T suffix); not recording", lim);
        return;
    }
    if (!trace_open_file(path))
        return;
    static const char header[] = "Thread,Time,Action,Pointer,Size,Stream,Note\n";
    memcpy(trace_buf, header, sizeof header - 1);
    trace_len = sizeof header - 1;
    trace_on = true;
    atexit(trace_at_exit);
}

/* The Note field (see the top) for the calling thread's current allocator, quoted as CSV
 * quotes a field: ",\"device=0 total=... conf=...\"". Empty when there is no allocator. Called
 * outside trace_lock: it takes the allocator's mutex (ts_get_stats). */
static void trace_note(char *buf, size_t len)
{
    buf[0] = '\0';
    CUcontext ctx = NULL;
    ts_allocator *a = ts_ctx_allocator(&ctx);
    if (!a)
        return;
    tessera_device_stats st;
    ts_get_stats(a, &st);
    char conf[TS_CONFIG_FORMAT_MAX];
    ts_config_format(ts_allocator_config(a), conf, sizeof conf);
    int n = snprintf(buf, len, ",\"device=%d total=%lld limit=%lld conf=", ts_allocator_device(a),
                     (long long)st.device_total_bytes, (long long)st.memory_limit_bytes);
    if (n <= 0 || (size_t)n >= len)
        return (void)(buf[0] = '\0');
    size_t k = (size_t)n;
    /* a path in the configuration (snapshot_on_oom) may hold a quote: doubled, as CSV does */
    for (const char *c = conf; *c && k + 4 < len; c++) {
        if (*c == '"')
            buf[k++] = '"';
        buf[k++] = (unsigned char)*c < 0x20 ? '?' : *c;
    }
    buf[k++] = '"';
    buf[k] = '\0';
}

static bool trace_start_noted; /* atomic: the first row carries a note */

static void trace_line(const char *action, uintptr_t ptr, size_t size, uintptr_t stream,
                       bool failure)
{
    pthread_once(&trace_once, trace_init);
    if (!__atomic_load_n(&trace_on, __ATOMIC_ACQUIRE))
        return;
    if (!trace_tid)
        trace_tid = (long)syscall(SYS_gettid);
    /* Only the first row and failures carry a note: the steady path formats none. */
    char note[TS_CONFIG_FORMAT_MAX + 128];
    note[0] = '\0'; /* not "" in the declaration: that would clear the whole array each time */
    if (failure || (!__atomic_load_n(&trace_start_noted, __ATOMIC_RELAXED) &&
                    !__atomic_exchange_n(&trace_start_noted, true, __ATOMIC_RELAXED)))
        trace_note(note, sizeof note); /* a plain load first: no shared write per line */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long sod = (long)(ts.tv_sec % 86400); /* UTC time of day, as RMM's %H:%M:%S.%f */
    char line[TS_CONFIG_FORMAT_MAX + 320];
    int n;
    /* RMM's columns: the pointer as hex with its 0x (also for a failed allocation: "0x0", which
     * RMM's parser reads, where glibc's %p would write "(nil)"), the stream as hex without one
     * (0 for cudaMalloc and cudaFree, which name none; the stream a stream-ordered call names) */
    n = snprintf(line, sizeof line, "%ld,%02ld:%02ld:%02ld.%06ld,%s,0x%lx,%zu,%lx%s\n", trace_tid,
                 sod / 3600, sod / 60 % 60, sod % 60, ts.tv_nsec / 1000, action,
                 (unsigned long)ptr, size, (unsigned long)stream, note);
    if (n <= 0 || (size_t)n >= sizeof line)
        return;
    pthread_mutex_lock(&trace_lock);
    if (trace_on) {
        if (trace_written + trace_len + (size_t)n > trace_limit) {
            trace_flush_locked();
            if (trace_on) /* else the flush failed and said so */
                ts_log("TESSERA_TRACE: limit of %llu bytes reached; recording stopped (raise "
                       "TESSERA_TRACE_LIMIT)", trace_limit);
            trace_on = false;
        } else {
            if (trace_len + (size_t)n > TRACE_BUF)
                trace_flush_locked();
            if (trace_on) {
                memcpy(trace_buf + trace_len, line, (size_t)n);
                trace_len += (size_t)n;
            }
        }
    }
    pthread_mutex_unlock(&trace_lock);
}

void ts_trace_alloc_on(uintptr_t ptr, size_t size, bool failed, uintptr_t stream)
{
    trace_line(failed ? "allocate failure" : "allocate", failed ? 0 : ptr, size, stream, failed);
}

void ts_trace_free_on(uintptr_t ptr, size_t size, uintptr_t stream)
{
    trace_line("free", ptr, size, stream, false); /* RMM's replay passes this size to deallocate */
}

void ts_trace_alloc(uintptr_t ptr, size_t size, bool failed)
{
    ts_trace_alloc_on(ptr, size, failed, 0);
}

void ts_trace_free(uintptr_t ptr, size_t size)
{
    ts_trace_free_on(ptr, size, 0);
}

/* A forked child records nothing: the parent's buffer and file are the parent's. Registered by
 * trace_init, so only a process that looked at TESSERA_TRACE pays for it. */
static void trace_fork_child(void)
{
    pthread_mutex_init(&trace_lock, NULL);
    trace_on = false; /* the parent's buffer is the parent's to write */
    trace_len = 0;
    trace_start_noted = false;
}
