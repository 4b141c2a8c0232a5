/* The stats page: writer (one page per process, one slot per device context) and reader.
 *
 * Writer side rules (docs/stats-page.md, "Writing"):
 *   - the page belongs to one process; each slot has exactly one writer at a time (the allocator
 *     of that context, under its mutex), so the per-slot sequence lock needs no CAS;
 *   - nothing here waits for a reader, takes a lock shared with another process, prints, or
 *     exits the host process; every failure is returned;
 *   - memory a sink or observer may still touch is never unmapped (close/forget replace the
 *     shared mapping in place with private memory and retire the handle).
 * Reader side rules: never trust a byte of the file; read it with pread into private copies
 * (a page that shrinks gives an error, not SIGBUS); validate every count before using it.
 */
#include "statspage/statspage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

/* Files without an identity (creation interrupted) are only collected once this old. */
#define TS_NO_IDENTITY_GRACE_S 2

/* Reader bounds. A slot is tried TS_READ_RETRIES times (spin, yield, then 200 us sleeps: about
 * 20 ms) before it is reported busy; the page's other slots then get one try each, and a page
 * whose owner is dead gets one try per slot. Over the whole process, readers sleep at most
 * TS_READ_SLEEP_BUDGET_NS in any TS_READ_BUDGET_WINDOW_NS: forged pages whose slots always look
 * mid-write cost one look each once that is spent, so a run stays bounded whatever the
 * directory holds. */
#define TS_READ_RETRIES 164u
#define TS_READ_SLEEP_NS 200000L
#define TS_READ_SLEEP_BUDGET_NS 250000000ull
#define TS_READ_BUDGET_WINDOW_NS 2000000000ull

_Static_assert(TESSERA_PAGE_HEADER_SIZE % 8 == 0, "word copies");
_Static_assert(offsetof(tessera_page_slot_head, seq) % 8 == 0, "seq aligned");
_Static_assert(offsetof(tessera_page_slot_head, stats) % 64 == 0, "stats on their own line");

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                              */

static void set_msg(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_msg(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static uint64_t now_realtime_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* Relaxed atomic word copies: the shared page is only ever accessed 8 bytes at a time. Falls
 * back to memcpy when either side is not word aligned (a private buffer, e.g. fuzz input). */
static void load_words(void *dst, const void *src, size_t bytes)
{
    if ((((uintptr_t)dst | (uintptr_t)src | bytes) & 7u) != 0) {
        memcpy(dst, src, bytes);
        return;
    }
    uint64_t *d = dst;
    const uint64_t *s = src;
    for (size_t i = 0; i < bytes / 8; i++)
        d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

static void store_words(void *dst, const void *src, size_t bytes)
{
    uint64_t *d = dst;
    const uint64_t *s = src;
    for (size_t i = 0; i < bytes / 8; i++)
        __atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
}

static void zero_words(void *dst, size_t bytes)
{
    uint64_t *d = dst;
    for (size_t i = 0; i < bytes / 8; i++)
        __atomic_store_n(&d[i], 0, __ATOMIC_RELAXED);
}

/* Read up to len-1 bytes of a small file; returns bytes read (NUL-terminated) or -errno. */
static ssize_t read_small_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    close(fd);
    return (ssize_t)got;
}

/* Copy text into a fixed field: control characters become '?', truncated with "..." when it
 * does not fit. Always NUL-terminates. */
static void copy_field(char *dst, size_t cap, const char *src, size_t srclen)
{
    size_t n = srclen < cap - 1 ? srclen : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    dst[n] = '\0';
    if (srclen > cap - 1 && cap > 4)
        memcpy(dst + cap - 4, "...", 4);
}

static int parse_pid_name(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0)
        return 0;
    const char *d = name + pl;
    if (*d < '1' || *d > '9')
        return 0;
    long long v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return 0;
        v = v * 10 + (*d - '0');
        if (v > INT_MAX)
            return 0;
    }
    return (int)v;
}

/* ------------------------------------------------------------------------------------------ */
/* process facts                                                                              */

int ts_proc_stat(int pid, char *state, uint64_t *start_ticks)
{
    char path[64], buf[1024];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
    else
        snprintf(path, sizeof path, "/proc/self/stat");
    ssize_t n = read_small_file(path, buf, sizeof buf);
    if (n < 0)
        return (int)-n;
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return EPROTO;
    p += 2;
    char st = *p;
    /* p is at field 3 (state); starttime is field 22. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return EPROTO;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno != 0)
        return EPROTO;
    if (state)
        *state = st;
    if (start_ticks)
        *start_ticks = v;
    return 0;
}

int ts_read_boot_id(char *buf, size_t len)
{
    char tmp[128];
    if (len == 0)
        return EINVAL;
    buf[0] = '\0';
    ssize_t n = read_small_file("/proc/sys/kernel/random/boot_id", tmp, sizeof tmp);
    if (n < 0)
        return (int)-n;
    size_t k = 0;
    while (k < (size_t)n && tmp[k] != '\n' && k + 1 < len) {
        buf[k] = tmp[k];
        k++;
    }
    buf[k] = '\0';
    return k ? 0 : EPROTO;
}

uint64_t ts_pid_namespace(const char *pid_or_self)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", pid_or_self ? pid_or_self : "self");
    if (stat(path, &st) != 0)
        return 0;
    return (uint64_t)st.st_ino;
}

/* 1: the pid names no process (or a zombie); 0: it exists or we cannot tell. */
static int pid_is_gone(int pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char state = 0;
    int e = ts_proc_stat(pid, &state, NULL);
    if (e == ENOENT || e == ESRCH)
        return 1;
    return e == 0 && (state == 'Z' || state == 'X');
}

/* ------------------------------------------------------------------------------------------ */
/* writer                                                                                     */

struct ts_slotref {
    ts_statspage *page;
    uint32_t index;
    uint32_t claimed;      /* this handle claimed the slot (atomic) */
    uint32_t fallocated;   /* the slot's file range is committed */
    uint32_t pad;
    tessera_page_segment *seg_scratch; /* map built here, then copied in a short write section */
    tessera_page_block *blk_scratch;
};

/* Invariant: no descriptor is held once create returns. The host program may close any fd it
 * did not open itself (daemons close 3..N) and reuse the number for its own files, so a slot's
 * growth re-opens the page by its absolute path and checks (dev, ino) before touching it. */
struct ts_statspage {
    unsigned char *base;
    size_t size;
    uint32_t slot_count;
    uint32_t retired; /* atomic: close/forget happened */
    uint64_t dev, ino;
    struct ts_slotref refs[TESSERA_PAGE_SLOTS];
    ts_statspage *next_retired;
    char path[PATH_MAX];
};

/* Retired handles stay allocated and reachable: an observer or sink may still refer to them. */
static ts_statspage *retired_pages;

const char *ts_statspage_dir(void)
{
    const char *d = getenv(TESSERA_PAGE_DIR_ENV);
    return (d && *d) ? d : TESSERA_PAGE_DEFAULT_DIR;
}

struct identity {
    int pid;
    uint64_t start_ticks;
    uint64_t pid_ns;
    char boot_id[TESSERA_PAGE_BOOT_ID_LEN];
};

static void identity_self(struct identity *id)
{
    memset(id, 0, sizeof *id);
    id->pid = (int)getpid();
    if (ts_proc_stat(0, NULL, &id->start_ticks) != 0)
        id->start_ticks = 0;
    id->pid_ns = ts_pid_namespace("self");
    if (ts_read_boot_id(id->boot_id, sizeof id->boot_id) != 0)
        id->boot_id[0] = '\0';
}

/* An existing file named after our pid: 0 when it is stale (safe to replace), else an errno
 * value with the reason in err. Its creator had our pid number, so unless it is this very
 * process (or a process of another pid namespace sharing the directory) it is gone. */
static int judge_existing(const char *path, const struct identity *self, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        int e = errno;
        if (e == ELOOP)
            set_msg(err, errlen, "%s exists and is a symbolic link, not a regular file; leaving "
                    "it alone", path);
        else
            set_msg(err, errlen, "%s exists and cannot be examined: %s", path, strerror(e));
        return EEXIST;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        set_msg(err, errlen, "%s exists and is not a regular file; leaving it alone", path);
        return EEXIST;
    }
    if (st.st_uid != geteuid()) {
        /* Another user's file in our name: never replace it, and never write into it. Readers
         * do not trust it either (its owner is not this process's user). */
        close(fd);
        set_msg(err, errlen, "%s exists and belongs to uid %u, not to this process's user; "
                "leaving it alone", path, (unsigned)st.st_uid);
        return EEXIST;
    }
    tessera_page_header h;
    memset(&h, 0, sizeof h);
    ssize_t n = pread(fd, &h, 128, 0);
    close(fd);
    if (n < 8 || h.magic == 0)
        return 0; /* its creation never finished */
    if (h.magic != TESSERA_PAGE_MAGIC) {
        set_msg(err, errlen, "%s exists and is not a tessera stats page; leaving it alone", path);
        return EEXIST;
    }
    if (n < 128)
        return 0;
    h.boot_id[sizeof h.boot_id - 1] = '\0';
    if (self->pid_ns && h.pid_namespace && h.pid_namespace != self->pid_ns &&
        strcmp(h.boot_id, self->boot_id) == 0) {
        set_msg(err, errlen, "%s belongs to a process of another pid namespace", path);
        return EEXIST;
    }
    if (h.pid == self->pid && h.start_time_ticks == self->start_ticks &&
        strcmp(h.boot_id, self->boot_id) == 0) {
        set_msg(err, errlen, "%s is already published by this process", path);
        return EEXIST;
    }
    return 0;
}

static void fill_header(tessera_page_header *h, const struct identity *id, const char *config,
                        uint64_t total)
{
    memset(h, 0, sizeof *h);
    h->magic = 0; /* stored last */
    h->layout_version = TESSERA_PAGE_LAYOUT_VERSION;
    h->header_size = TESSERA_PAGE_HEADER_SIZE;
    h->slot_size = TESSERA_PAGE_SLOT_SIZE;
    h->slot_count = TESSERA_PAGE_SLOTS;
    h->total_size = total;
    h->pid = id->pid;
    h->flags = 0;
    h->start_time_ticks = id->start_ticks;
    h->pid_namespace = id->pid_ns;
    h->created_ns = now_realtime_ns();
    memcpy(h->boot_id, id->boot_id, sizeof h->boot_id);
    h->boot_id[sizeof h->boot_id - 1] = '\0';
    long tck = sysconf(_SC_CLK_TCK);
    h->clock_ticks_per_second = tck > 0 ? (uint32_t)tck : 0;
    h->max_segments = TESSERA_PAGE_MAX_SEGMENTS;
    h->max_blocks = TESSERA_PAGE_MAX_BLOCKS;
    h->stats_words = (uint32_t)((sizeof(tessera_device_stats) -
                                 sizeof(((tessera_device_stats *)0)->reserved_tail)) / 8);
    copy_field(h->version, sizeof h->version, TESSERA_VERSION, strlen(TESSERA_VERSION));

    char cmd[TESSERA_PAGE_CMDLINE_LEN + 1];
    ssize_t n = read_small_file("/proc/self/cmdline", cmd, sizeof cmd);
    if (n > 0) {
        size_t len = (size_t)n;
        for (size_t i = 0; i < len; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        while (len > 0 && cmd[len - 1] == ' ')
            len--;
        copy_field(h->cmdline, sizeof h->cmdline, cmd, len);
        if (len > sizeof h->cmdline - 1)
            h->cmdline[sizeof h->cmdline - 1] = '\0'; /* cut, not marked: a prefix by design */
    }
    if (config)
        copy_field(h->config, sizeof h->config, config, strlen(config));
}

/* <dir>/tessera.<pid> as an absolute path: the page is re-opened and removed by this name, and
 * the program may chdir away from a relative TESSERA_STATS_DIR. The name must also fit the
 * readers' buffers (PATH_MAX), or the page would be written but never read. */
static int absolute_page_path(char *dst, size_t cap, const char *dir, int pid)
{
    char cwd[PATH_MAX] = "";
    if (dir[0] != '/' && !getcwd(cwd, sizeof cwd))
        return errno;
    int n = snprintf(dst, cap, "%s%s%s/" TESSERA_PAGE_FILE_PREFIX "%d", cwd, cwd[0] ? "/" : "",
                     dir, pid);
    return (n < 0 || (size_t)n >= cap) ? ENAMETOOLONG : 0;
}

/* Commit [off, off+len) of the page file (posix_fallocate: a full tmpfs fails here, not with
 * SIGBUS later). The page is re-opened by path and must still be the very file we mapped: the
 * program may have closed our descriptor, and the name may now be someone else's file.
 * Returns 0, ENOSPC, or ESTALE when the file is gone or replaced. */
static int commit_range(ts_statspage *p, off_t off, off_t len)
{
    int fd = open(p->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ESTALE;
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != p->dev ||
        (uint64_t)st.st_ino != p->ino)
        e = ESTALE;
    else if (posix_fallocate(fd, off, len) != 0)
        e = ENOSPC;
    close(fd);
    return e;
}

int ts_statspage_create(const char *dir, const char *config_text, ts_statspage **out, char *err,
                        size_t errlen)
{
    set_msg(err, errlen, "ok");
    if (!out) {
        set_msg(err, errlen, "no output pointer");
        return EINVAL;
    }
    *out = NULL;
    if (!dir)
        dir = ts_statspage_dir();

    struct identity self;
    identity_self(&self);

    ts_statspage *p = calloc(1, sizeof *p);
    if (!p) {
        set_msg(err, errlen, "out of memory");
        return ENOMEM;
    }
    int e = absolute_page_path(p->path, sizeof p->path, dir, self.pid);
    if (e != 0) {
        set_msg(err, errlen, "cannot use the stats directory %s: %s", dir, strerror(e));
        free(p);
        return e;
    }

    int fd = -1;
    for (int attempt = 0; attempt < 4 && fd < 0; attempt++) {
        /* Mode 0000 until published: an unpublished page is then told apart from any other
         * file of the name (the collector removes only what an interrupted creation leaves). */
        fd = open(p->path, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, 0);
        if (fd >= 0)
            break;
        e = errno;
        if (e != EEXIST) {
            set_msg(err, errlen, "cannot create %s: %s", p->path, strerror(e));
            free(p);
            return e;
        }
        int j = judge_existing(p->path, &self, err, errlen);
        if (j != 0) {
            free(p);
            return j;
        }
        if (unlink(p->path) != 0 && errno != ENOENT) {
            e = errno;
            set_msg(err, errlen, "cannot replace the stale page %s: %s", p->path, strerror(e));
            free(p);
            return e;
        }
    }
    if (fd < 0) {
        set_msg(err, errlen, "cannot create %s: it keeps reappearing", p->path);
        free(p);
        return EEXIST;
    }

    const uint64_t total =
        (uint64_t)TESSERA_PAGE_HEADER_SIZE + (uint64_t)TESSERA_PAGE_SLOTS * TESSERA_PAGE_SLOT_SIZE;
    const char *what = NULL;
    struct stat st;
    if (ftruncate(fd, (off_t)total) != 0) {
        e = errno;
        what = "ftruncate";
    } else if ((e = posix_fallocate(fd, 0, TESSERA_PAGE_HEADER_SIZE)) != 0) {
        what = "posix_fallocate"; /* a full /dev/shm must fail here, not SIGBUS later */
    } else if (fstat(fd, &st) != 0) {
        e = errno;
        what = "fstat";
    }
    void *base = MAP_FAILED;
    if (!what) {
        base = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            e = errno;
            what = "mmap";
        }
    }
    if (what) {
        set_msg(err, errlen, "cannot set up %s: %s: %s", p->path, what, strerror(e));
        unlink(p->path);
        close(fd);
        free(p);
        return e ? e : EIO;
    }
    p->base = base;
    p->size = (size_t)total;
    p->slot_count = TESSERA_PAGE_SLOTS;
    p->dev = (uint64_t)st.st_dev;
    p->ino = (uint64_t)st.st_ino;
    for (uint32_t i = 0; i < TESSERA_PAGE_SLOTS; i++) {
        p->refs[i].page = p;
        p->refs[i].index = i;
    }

    tessera_page_header *h = malloc(sizeof *h);
    e = h ? 0 : ENOMEM;
    if (h) {
        fill_header(h, &self, config_text, total);
        store_words(base, h, sizeof *h); /* magic is still 0 */
        free(h);
        __atomic_store_n(&((tessera_page_header *)base)->magic, TESSERA_PAGE_MAGIC,
                         __ATOMIC_RELEASE);
        if (fchmod(fd, 0644) != 0) /* published: exact mode whatever the umask */
            e = errno;
    }
    /* The mapping keeps the file; a descriptor held on would be closed and reused by a program
     * that closes what it did not open. */
    close(fd);
    if (e != 0) {
        set_msg(err, errlen, "cannot set up %s: %s", p->path, strerror(e));
        munmap(base, p->size);
        unlink(p->path);
        free(p);
        return e;
    }
    *out = p;
    return 0;
}

static tessera_page_slot *slot_at(ts_statspage *p, uint32_t i)
{
    return (tessera_page_slot *)(void *)(p->base + TESSERA_PAGE_HEADER_SIZE +
                                         (size_t)i * TESSERA_PAGE_SLOT_SIZE);
}

static bool is_retired(const ts_statspage *p)
{
    return __atomic_load_n(&p->retired, __ATOMIC_ACQUIRE) != 0;
}

int ts_statspage_claim(ts_statspage *p, int device, uint64_t context_id, ts_stats_sink *sink)
{
    if (sink) {
        sink->stats = NULL;
        sink->seq = NULL;
    }
    if (!p || !sink || device < 0)
        return -EINVAL;
    if (is_retired(p))
        return -ESTALE;
    for (uint32_t i = 0; i < p->slot_count; i++) {
        tessera_page_slot *s = slot_at(p, i);
        uint32_t expect = TESSERA_SLOT_FREE;
        if (!__atomic_compare_exchange_n(&s->head.state, &expect, TESSERA_SLOT_CLAIMING, false,
                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue;
        struct ts_slotref *r = &p->refs[i];
        if (!__atomic_load_n(&r->fallocated, __ATOMIC_ACQUIRE)) {
            int e = commit_range(p, (off_t)((char *)s - (char *)p->base), TESSERA_PAGE_SLOT_SIZE);
            if (e != 0) {
                __atomic_store_n(&s->head.state, TESSERA_SLOT_FREE, __ATOMIC_RELEASE);
                return -e;
            }
            __atomic_store_n(&r->fallocated, 1, __ATOMIC_RELEASE);
        }
        if (!r->seg_scratch) {
            r->seg_scratch = calloc(TESSERA_PAGE_MAX_SEGMENTS, sizeof *r->seg_scratch);
            r->blk_scratch = calloc(TESSERA_PAGE_MAX_BLOCKS, sizeof *r->blk_scratch);
            if (!r->seg_scratch || !r->blk_scratch) { /* no maps for this slot, counters fine */
                free(r->seg_scratch);
                free(r->blk_scratch);
                r->seg_scratch = NULL;
                r->blk_scratch = NULL;
            }
        }
        /* Re-initialise under the sequence lock: a reader that raced with the old owner of the
         * slot retries rather than mixing old and new. */
        tessera_seq_write_begin(&s->head.seq);
        zero_words(&s->head.stats, sizeof s->head.stats);
        zero_words(&s->head.map, sizeof s->head.map);
        __atomic_store_n(&s->head.device, (int32_t)device, __ATOMIC_RELAXED);
        __atomic_store_n(&s->head.context_id, context_id, __ATOMIC_RELAXED);
        __atomic_store_n(&s->head.claimed_ns, now_realtime_ns(), __ATOMIC_RELAXED);
        tessera_seq_write_end(&s->head.seq);
        __atomic_store_n(&r->claimed, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&s->head.state, TESSERA_SLOT_ACTIVE, __ATOMIC_RELEASE);
        sink->stats = &s->head.stats;
        sink->seq = &s->head.seq;
        return (int)i;
    }
    return -ENOSPC;
}

void ts_statspage_release(ts_statspage *p, int slot)
{
    if (!p || slot < 0 || (uint32_t)slot >= p->slot_count || is_retired(p))
        return;
    struct ts_slotref *r = &p->refs[slot];
    if (!__atomic_exchange_n(&r->claimed, 0, __ATOMIC_ACQ_REL))
        return;
    __atomic_store_n(&slot_at(p, (uint32_t)slot)->head.state, TESSERA_SLOT_FREE,
                     __ATOMIC_RELEASE);
}

void *ts_statspage_observer_user(ts_statspage *p, int slot)
{
    if (!p || slot < 0 || (uint32_t)slot >= p->slot_count)
        return NULL;
    return &p->refs[slot];
}

int ts_statspage_observer_target(void *user, ts_statspage **page)
{
    const struct ts_slotref *r = user;
    if (!r)
        return -1;
    *page = r->page;
    return (int)r->index;
}

tessera_page_slot *ts_statspage_slot(ts_statspage *p, int slot)
{
    if (!p || slot < 0 || (uint32_t)slot >= p->slot_count || is_retired(p))
        return NULL;
    return slot_at(p, (uint32_t)slot);
}

const char *ts_statspage_path(const ts_statspage *p)
{
    return p ? p->path : "";
}

/* Building a map from a walk. */
struct map_build {
    tessera_page_map map;
    tessera_page_segment *segs;
    tessera_page_block *blocks;
    tessera_page_segment *cur; /* recorded entry of the segment being walked, or NULL */
    bool truncated;
};

static uint32_t sat_u32_inc(uint32_t v)
{
    return v == UINT32_MAX ? v : v + 1;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int map_segment_cb(void *user, const ts_segment_info *seg)
{
    struct map_build *b = user;
    b->map.total_segments = sat_u32_inc(b->map.total_segments);
    b->map.segment_bytes = sat_add(b->map.segment_bytes, seg->size);
    b->map.mapped_bytes = sat_add(b->map.mapped_bytes, seg->mapped);
    if (b->map.nsegments >= TESSERA_PAGE_MAX_SEGMENTS) {
        b->cur = NULL;
        b->truncated = true;
        return 0;
    }
    tessera_page_segment *e = &b->segs[b->map.nsegments++];
    memset(e, 0, sizeof *e);
    e->address = (uint64_t)seg->addr;
    e->size = (uint64_t)seg->size;
    e->mapped = (uint64_t)(seg->mapped < seg->size ? seg->mapped : seg->size);
    e->stream = (uint64_t)seg->stream;
    e->first_block = b->map.nblocks;
    e->nblocks = 0;
    e->nblocks_total = seg->nblocks > UINT32_MAX ? UINT32_MAX : (uint32_t)seg->nblocks;
    e->pool = seg->small_pool ? TESSERA_POOL_SMALL : TESSERA_POOL_LARGE;
    e->kind = (unsigned)seg->kind < TESSERA_SEGMENT_KIND_COUNT ? (uint8_t)seg->kind
                                                               : (uint8_t)TESSERA_SEGMENT_PLAIN;
    b->cur = e;
    return 0;
}

static int map_block_cb(void *user, const ts_segment_info *seg, const ts_block_info *blk)
{
    (void)seg;
    struct map_build *b = user;
    uint64_t size = (uint64_t)blk->size;
    uint32_t state = (uint32_t)blk->state;
    b->map.total_blocks = sat_u32_inc(b->map.total_blocks);
    switch (state) {
    case TESSERA_BLOCK_ALLOCATED:
        b->map.allocated_bytes = sat_add(b->map.allocated_bytes, size);
        break;
    case TESSERA_BLOCK_PENDING:
        b->map.pending_bytes = sat_add(b->map.pending_bytes, size);
        break;
    case TESSERA_BLOCK_FREE:
        b->map.free_bytes = sat_add(b->map.free_bytes, size);
        b->map.free_blocks = sat_u32_inc(b->map.free_blocks);
        if (size > b->map.largest_free)
            b->map.largest_free = size;
        break;
    case TESSERA_BLOCK_UNMAPPED:
        b->map.unmapped_bytes = sat_add(b->map.unmapped_bytes, size);
        break;
    default:
        state = TESSERA_BLOCK_ALLOCATED; /* unknown: show as in use, the safe reading */
        break;
    }
    if (!b->cur || b->map.nblocks >= TESSERA_PAGE_MAX_BLOCKS) {
        b->truncated = true;
        return 0;
    }
    tessera_page_block *e = &b->blocks[b->map.nblocks++];
    e->size = size;
    e->state = state;
    e->slack = 0;
    if ((state == TESSERA_BLOCK_ALLOCATED || state == TESSERA_BLOCK_PENDING) &&
        blk->requested <= blk->size) /* what a snapshot's requested_size is made of */
        e->slack = blk->size - blk->requested > UINT32_MAX ? UINT32_MAX
                                                           : (uint32_t)(blk->size - blk->requested);
    b->cur->nblocks++;
    if (b->cur->nblocks > b->cur->nblocks_total)
        b->cur->nblocks_total = b->cur->nblocks;
    return 0;
}

void ts_statspage_publish_walk(ts_statspage *p, int slot, ts_statspage_walk_fn walk, void *ctx)
{
    if (!p || !walk || slot < 0 || (uint32_t)slot >= p->slot_count || is_retired(p))
        return;
    struct ts_slotref *r = &p->refs[slot];
    if (!__atomic_load_n(&r->claimed, __ATOMIC_ACQUIRE) || !r->seg_scratch)
        return;
    tessera_page_slot *s = slot_at(p, (uint32_t)slot);

    struct map_build b;
    memset(&b, 0, sizeof b);
    /* Read before the walk: a request made later is not served by this map. */
    b.map.request_served = __atomic_load_n(&s->head.map_request, __ATOMIC_RELAXED);
    b.segs = r->seg_scratch;
    b.blocks = r->blk_scratch;
    ts_walker w = {.user = &b, .segment = map_segment_cb, .block = map_block_cb};
    walk(ctx, &w);
    for (uint32_t i = 0; i < b.map.nsegments; i++)
        if (b.segs[i].nblocks < b.segs[i].nblocks_total)
            b.truncated = true;

    b.map.ops = (uint64_t)__atomic_load_n(&s->head.stats.num_ops, __ATOMIC_RELAXED);
    b.map.time_ns = now_realtime_ns();
    b.map.flags = TESSERA_MAP_VALID | (b.truncated ? TESSERA_MAP_TRUNCATED : 0u);
    b.map.checksum = 0;
    b.map.checksum = tessera_page_map_checksum(&b.map, b.segs, b.blocks);

    /* The allocator may call us from inside its own write section (seq odd): then we are part
     * of it; else we open a short one of our own. Either way the mutex makes us the writer. */
    uint64_t *seq = &s->head.seq;
    bool nested = (__atomic_load_n(seq, __ATOMIC_RELAXED) & 1u) != 0;
    if (!nested)
        tessera_seq_write_begin(seq);
    store_words(&s->head.map, &b.map, sizeof b.map);
    store_words(s->segments, b.segs, (size_t)b.map.nsegments * sizeof *b.segs);
    store_words(s->blocks, b.blocks, (size_t)b.map.nblocks * sizeof *b.blocks);
    if (!nested)
        tessera_seq_write_end(seq);
}

static void retire(ts_statspage *p)
{
    if (__atomic_exchange_n(&p->retired, 1, __ATOMIC_ACQ_REL))
        return;
    /* Same address, private zero-filled memory: late writes through a sink land here. */
    (void)mmap(p->base, p->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
               -1, 0);
    ts_statspage *head = __atomic_load_n(&retired_pages, __ATOMIC_RELAXED);
    do {
        p->next_retired = head;
    } while (!__atomic_compare_exchange_n(&retired_pages, &head, p, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
}

void ts_statspage_close(ts_statspage *p, bool unlink_file)
{
    if (!p || is_retired(p))
        return;
    if (unlink_file) {
        struct stat st;
        /* Remove the name only while it still is our file. */
        if (lstat(p->path, &st) == 0 && (uint64_t)st.st_dev == p->dev &&
            (uint64_t)st.st_ino == p->ino)
            unlink(p->path);
    } else {
        __atomic_fetch_or(&((tessera_page_header *)(void *)p->base)->flags,
                          TESSERA_PAGE_FLAG_CLOSED, __ATOMIC_RELEASE);
    }
    retire(p);
}

void ts_statspage_forget(ts_statspage *p)
{
    if (!p)
        return;
    retire(p);
}

/* ------------------------------------------------------------------------------------------ */
/* reader                                                                                     */

const char *ts_page_status_name(int status)
{
    switch (status) {
    case TS_PAGE_OK: return "ok";
    case TS_PAGE_EIO: return "unreadable";
    case TS_PAGE_ENOENT: return "missing";
    case TS_PAGE_ETRUNCATED: return "truncated";
    case TS_PAGE_EFOREIGN: return "foreign";
    case TS_PAGE_ENOTREADY: return "not-ready";
    case TS_PAGE_ENEWER: return "newer-layout";
    case TS_PAGE_ECORRUPT: return "corrupt";
    case TS_PAGE_EBUSY: return "busy";
    case TS_PAGE_EEMPTY: return "empty";
    case TS_PAGE_EUNTRUSTED: return "untrusted";
    default: return "unknown";
    }
}

const char *ts_owner_state_name(int s)
{
    switch (s) {
    case TS_OWNER_LIVE: return "live";
    case TS_OWNER_UNKNOWN: return "unverified";
    case TS_OWNER_DEAD: return "stale";
    case TS_OWNER_PID_REUSED: return "stale";
    case TS_OWNER_REBOOTED: return "stale";
    default: return "unknown";
    }
}

void ts_page_init(ts_page *pg)
{
    memset(pg, 0, sizeof *pg);
    pg->fd = -1;
    pg->retries = TS_READ_RETRIES;
}

void ts_page_close(ts_page *pg)
{
    if (!pg)
        return;
    if (pg->fd >= 0)
        close(pg->fd);
    pg->fd = -1;
    pg->mem = NULL;
    pg->size = 0;
}

static int page_fail(ts_page *pg, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int page_fail(ts_page *pg, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pg->error, sizeof pg->error, fmt, ap);
    va_end(ap);
    return status;
}

/* Read [off, off+len) of the page into dst. */
static int src_read(ts_page *pg, uint64_t off, void *dst, size_t len)
{
    if (off > pg->size || len > pg->size - off)
        return page_fail(pg, TS_PAGE_ETRUNCATED, "truncated: %" PRIu64 " bytes, reading %zu at %" PRIu64,
                         pg->size, len, off);
    if (pg->fd < 0) {
        if (!pg->mem)
            return page_fail(pg, TS_PAGE_EIO, "page not open");
        load_words(dst, pg->mem + off, len);
        return TS_PAGE_OK;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(pg->fd, (char *)dst + got, len - got, (off_t)(off + got));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return page_fail(pg, TS_PAGE_EIO, "read error: %s", strerror(errno));
        }
        if (n == 0)
            return page_fail(pg, TS_PAGE_ETRUNCATED, "truncated: the file shrank while being read");
        got += (size_t)n;
    }
    return TS_PAGE_OK;
}

static bool nul_terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static int validate_header(ts_page *pg)
{
    tessera_page_header *h = &pg->hdr;
    memset(h, 0, sizeof *h);
    pg->have_identity = 0;
    if (pg->size == 0)
        return page_fail(pg, TS_PAGE_ETRUNCATED, "truncated: empty file (a page being created?)");
    if (pg->size < 8)
        return page_fail(pg, TS_PAGE_ETRUNCATED, "truncated: %" PRIu64 " bytes", pg->size);
    uint64_t magic;
    int st = src_read(pg, 0, &magic, sizeof magic);
    if (st)
        return st;
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* pairs with the writer's release of magic */
    if (magic == 0)
        return page_fail(pg, TS_PAGE_ENOTREADY,
                         "not published yet (magic is 0): being created, or its creator died "
                         "while creating it");
    if (magic != TESSERA_PAGE_MAGIC)
        return page_fail(pg, TS_PAGE_EFOREIGN, "not a tessera stats page (magic 0x%016" PRIx64 ")",
                         magic);
    if (pg->size < 128)
        return page_fail(pg, TS_PAGE_ETRUNCATED,
                         "truncated: %" PRIu64 " bytes, the identity prefix needs 128", pg->size);
    st = src_read(pg, 0, h, 128);
    if (st)
        return st;
    h->magic = magic;
    if (!nul_terminated(h->boot_id, sizeof h->boot_id))
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: boot id not terminated");
    if (h->pid <= 0)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: pid %" PRId32, h->pid);
    if (pg->name_pid > 0 && h->pid != pg->name_pid)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: the file name says pid %d, the page says %" PRId32,
                         pg->name_pid, h->pid);
    pg->have_identity = 1;
    if (h->layout_version == 0)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: layout version 0");
    if (h->layout_version > TESSERA_PAGE_LAYOUT_VERSION)
        return page_fail(pg, TS_PAGE_ENEWER,
                         "written by a newer tessera (layout %" PRIu32
                         ", this reader understands up to %u)",
                         h->layout_version, TESSERA_PAGE_LAYOUT_VERSION);
    if (pg->size < TESSERA_PAGE_HEADER_SIZE)
        return page_fail(pg, TS_PAGE_ETRUNCATED,
                         "truncated: %" PRIu64 " bytes, the header alone needs %u", pg->size,
                         TESSERA_PAGE_HEADER_SIZE);
    st = src_read(pg, 0, h, sizeof *h);
    if (st)
        return st;
    h->magic = magic;
    if (h->header_size != TESSERA_PAGE_HEADER_SIZE)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: header size %" PRIu32 " (layout 1 has %u)",
                         h->header_size, TESSERA_PAGE_HEADER_SIZE);
    if (h->slot_size != TESSERA_PAGE_SLOT_SIZE)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: slot size %" PRIu32 " (layout 1 has %u)",
                         h->slot_size, TESSERA_PAGE_SLOT_SIZE);
    if (h->slot_count == 0 || h->slot_count > TESSERA_PAGE_MAX_SLOT_COUNT)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: slot count %" PRIu32 " (1 to %u)",
                         h->slot_count, TESSERA_PAGE_MAX_SLOT_COUNT);
    uint64_t total = (uint64_t)h->header_size + (uint64_t)h->slot_count * h->slot_size;
    if (h->total_size != total)
        return page_fail(pg, TS_PAGE_ECORRUPT,
                         "corrupt: total size %" PRIu64 " is not header + slots = %" PRIu64,
                         h->total_size, total);
    if (pg->size < total)
        return page_fail(pg, TS_PAGE_ETRUNCATED,
                         "truncated: %" PRIu64 " bytes, the header says %" PRIu64, pg->size, total);
    if (h->max_segments != TESSERA_PAGE_MAX_SEGMENTS || h->max_blocks != TESSERA_PAGE_MAX_BLOCKS)
        return page_fail(pg, TS_PAGE_ECORRUPT,
                         "corrupt: map limits %" PRIu32 "/%" PRIu32 " (layout 1 has %u/%u)",
                         h->max_segments, h->max_blocks, TESSERA_PAGE_MAX_SEGMENTS,
                         TESSERA_PAGE_MAX_BLOCKS);
    if (h->stats_words == 0 || h->stats_words > TESSERA_PAGE_STATS_AREA / 8)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: %" PRIu32 " counter words", h->stats_words);
    if (!nul_terminated(h->version, sizeof h->version) ||
        !nul_terminated(h->cmdline, sizeof h->cmdline) ||
        !nul_terminated(h->config, sizeof h->config))
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: a text field is not terminated");
    pg->error[0] = '\0';
    return TS_PAGE_OK;
}

static void note_stat(ts_page *pg, const struct stat *st)
{
    pg->size = (uint64_t)st->st_size;
    pg->dev = (uint64_t)st->st_dev;
    pg->ino = (uint64_t)st->st_ino;
    pg->uid = (uint32_t)st->st_uid;
    pg->mode = (uint32_t)st->st_mode;
    pg->mtime = (int64_t)st->st_mtime;
}

/* The real, effective, saved and file-system uids of pid (the Uid: line of /proc/<pid>/status).
 * Returns 0 or an errno value (ENOENT: no such process). */
static int proc_uids(int pid, uint32_t uids[4])
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    ssize_t n = read_small_file(path, buf, sizeof buf);
    if (n < 0)
        return (int)-n;
    const char *p = strstr(buf, "\nUid:");
    if (!p)
        return EPROTO;
    p += 5;
    for (int i = 0; i < 4; i++) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno != 0 || v > UINT32_MAX)
            return EPROTO;
        uids[i] = (uint32_t)v;
        p = end;
    }
    return 0;
}

/* Anyone may create a file named tessera.<pid> in a shared directory, for a process that is not
 * theirs, with counters of their choosing. A page is trusted only when its file is not writable
 * by group or others and belongs to a user the process runs as. Processes this reader cannot
 * look up (gone: judged stale later; another pid namespace; /proc hidden) are not checked here. */
static int check_trust(ts_page *pg, int status)
{
    if (pg->fd < 0)
        return status;
    if (pg->mode & (S_IWGRP | S_IWOTH))
        return page_fail(pg, TS_PAGE_EUNTRUSTED,
                         "untrusted: the file is writable by group or others (mode %04o)",
                         (unsigned)(pg->mode & 07777));
    uint64_t ns = ts_pid_namespace("self");
    if (pg->hdr.pid_namespace && ns && pg->hdr.pid_namespace != ns)
        return status;
    uint32_t uids[4];
    if (proc_uids(pg->hdr.pid, uids) != 0)
        return status;
    for (int i = 0; i < 4; i++)
        if (uids[i] == pg->uid)
            return status;
    return page_fail(pg, TS_PAGE_EUNTRUSTED,
                     "untrusted: the file belongs to uid %" PRIu32 " but process %" PRId32
                     " runs as uid %" PRIu32 " (not written by that process)",
                     pg->uid, pg->hdr.pid, uids[0]);
}

static int open_path(ts_page *pg, const char *path, int expect_pid)
{
    unsigned retries = pg->retries ? pg->retries : 400;
    ts_page_init(pg);
    pg->retries = retries;
    snprintf(pg->path, sizeof pg->path, "%s", path);
    pg->name_pid = expect_pid;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return page_fail(pg, TS_PAGE_ENOENT, "no such page");
        if (e == ELOOP)
            return page_fail(pg, TS_PAGE_EIO, "is a symbolic link (not followed)");
        /* A page being created has mode 0000 (only root may open it): judged by its stat. */
        if (e == EACCES && lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            (st.st_mode & 07777) == 0) {
            note_stat(pg, &st);
            return page_fail(pg, TS_PAGE_ENOTREADY,
                             "not published yet (mode 0000): being created, or its creator died "
                             "while creating it");
        }
        return page_fail(pg, TS_PAGE_EIO, "cannot open: %s", strerror(e));
    }
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return page_fail(pg, TS_PAGE_EIO, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return page_fail(pg, TS_PAGE_EIO, "not a regular file");
    }
    pg->fd = fd;
    note_stat(pg, &st);
    int status = validate_header(pg);
    if (status == TS_PAGE_OK || status == TS_PAGE_ENEWER)
        status = check_trust(pg, status);
    return status;
}

int ts_page_open(ts_page *pg, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return open_path(pg, path, parse_pid_name(base, TESSERA_PAGE_FILE_PREFIX));
}

int ts_page_open_pid(ts_page *pg, const char *dir, int pid)
{
    char path[PATH_MAX];
    if (!dir)
        dir = ts_statspage_dir();
    int n = snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d", dir, pid);
    if (n < 0 || (size_t)n >= sizeof path) {
        ts_page_init(pg);
        return page_fail(pg, TS_PAGE_EIO, "directory name too long");
    }
    return open_path(pg, path, pid);
}

int ts_page_parse(ts_page *pg, const void *buf, size_t len)
{
    ts_page_init(pg);
    pg->retries = 1;
    pg->mem = buf;
    pg->size = buf ? (uint64_t)len : 0;
    snprintf(pg->path, sizeof pg->path, "(memory)");
    return validate_header(pg);
}

static int slot_fail(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int slot_fail(char *err, size_t errlen, int status, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

int ts_page_validate_slot(const tessera_page_header *h, const tessera_page_slot_head *head,
                          const tessera_page_segment *segs, const tessera_page_block *blocks,
                          char *err, size_t errlen)
{
    if (head->state == TESSERA_SLOT_FREE || head->state == TESSERA_SLOT_CLAIMING)
        return slot_fail(err, errlen, TS_PAGE_EEMPTY, "slot not in use");
    if (head->state != TESSERA_SLOT_ACTIVE)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT, "corrupt: slot state %" PRIu32, head->state);
    if (head->device < 0 || head->device > 65535)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT, "corrupt: device %" PRId32, head->device);
    const tessera_page_map *m = &head->map;
    uint32_t max_s = h ? h->max_segments : TESSERA_PAGE_MAX_SEGMENTS;
    uint32_t max_b = h ? h->max_blocks : TESSERA_PAGE_MAX_BLOCKS;
    if (max_s > TESSERA_PAGE_MAX_SEGMENTS)
        max_s = TESSERA_PAGE_MAX_SEGMENTS;
    if (max_b > TESSERA_PAGE_MAX_BLOCKS)
        max_b = TESSERA_PAGE_MAX_BLOCKS;
    if (!(m->flags & TESSERA_MAP_VALID)) {
        if (m->nsegments || m->nblocks)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT, "corrupt: entries in an unpublished map");
        return TS_PAGE_OK;
    }
    if (m->nsegments > max_s || m->nblocks > max_b)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                         "corrupt: map holds %" PRIu32 " segments and %" PRIu32
                         " blocks (at most %" PRIu32 " and %" PRIu32 ")",
                         m->nsegments, m->nblocks, max_s, max_b);
    if (m->nsegments > m->total_segments || m->nblocks > m->total_blocks)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT, "corrupt: map records more than its totals");
    bool truncated = (m->flags & TESSERA_MAP_TRUNCATED) != 0;
    if (!truncated && (m->nsegments != m->total_segments || m->nblocks != m->total_blocks))
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                         "corrupt: map not marked truncated but incomplete");
    if (m->largest_free > m->free_bytes)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                         "corrupt: largest free block above the free total");
    if (!segs || !blocks)
        return TS_PAGE_OK;
    uint64_t next = 0;
    for (uint32_t i = 0; i < m->nsegments; i++) {
        const tessera_page_segment *s = &segs[i];
        if (s->first_block != next)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " starts at block %" PRIu32 ", expected %" PRIu64,
                             i, s->first_block, next);
        if (s->nblocks > s->nblocks_total)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " records more blocks than it has", i);
        if (s->nblocks < s->nblocks_total && !truncated)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " incomplete in an untruncated map", i);
        if (s->pool != TESSERA_POOL_SMALL && s->pool != TESSERA_POOL_LARGE)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " pool %u", i, (unsigned)s->pool);
        if (s->kind >= TESSERA_SEGMENT_KIND_COUNT)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " kind %u", i, (unsigned)s->kind);
        if (s->mapped > s->size)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " maps more than its size", i);
        next += s->nblocks;
        if (next > m->nblocks)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                             "corrupt: segment %" PRIu32 " blocks beyond the recorded %" PRIu32, i,
                             m->nblocks);
    }
    if (next != m->nblocks)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT,
                         "corrupt: %" PRIu32 " blocks recorded, segments claim %" PRIu64, m->nblocks,
                         next);
    for (uint32_t i = 0; i < m->nblocks; i++)
        if (blocks[i].state >= TESSERA_BLOCK_STATE_COUNT)
            return slot_fail(err, errlen, TS_PAGE_ECORRUPT, "corrupt: block %" PRIu32 " state %" PRIu32,
                             i, blocks[i].state);
    uint64_t sum = tessera_page_map_checksum(m, segs, blocks);
    if (sum != m->checksum)
        return slot_fail(err, errlen, TS_PAGE_ECORRUPT, "corrupt: segment map checksum mismatch");
    return TS_PAGE_OK;
}

static uint64_t now_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* The process-wide sleep budget of readers (see TS_READ_SLEEP_BUDGET_NS). */
static uint64_t read_window_start, read_window_slept;

/* Take one sleep from the budget: false when this window's budget is spent. */
static bool read_budget_take(void)
{
    uint64_t now = now_monotonic_ns();
    uint64_t start = __atomic_load_n(&read_window_start, __ATOMIC_RELAXED);
    if (start == 0 || now - start > TS_READ_BUDGET_WINDOW_NS) {
        if (__atomic_compare_exchange_n(&read_window_start, &start, now, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            __atomic_store_n(&read_window_slept, 0, __ATOMIC_RELAXED);
    }
    return __atomic_add_fetch(&read_window_slept, (uint64_t)TS_READ_SLEEP_NS, __ATOMIC_RELAXED) <=
           TS_READ_SLEEP_BUDGET_NS;
}

/* Wait before attempt number attempt; false: give up now (the sleep budget is spent). */
static bool backoff(unsigned attempt)
{
    if (attempt < 16)
        return true;
    if (attempt < 64) {
        sched_yield();
        return true;
    }
    if (!read_budget_take())
        return false;
    struct timespec ts = {0, TS_READ_SLEEP_NS};
    nanosleep(&ts, NULL);
    return true;
}

int ts_page_snapshot(ts_page *pg, uint32_t index, tessera_page_slot_head *head,
                     tessera_page_segment *segs, tessera_page_block *blocks)
{
    const tessera_page_header *h = &pg->hdr;
    if (h->magic != TESSERA_PAGE_MAGIC || h->layout_version != TESSERA_PAGE_LAYOUT_VERSION ||
        h->slot_size != TESSERA_PAGE_SLOT_SIZE)
        return page_fail(pg, TS_PAGE_EIO, "page not open");
    if (index >= h->slot_count)
        return page_fail(pg, TS_PAGE_ECORRUPT, "slot %" PRIu32 " out of range (%" PRIu32 " slots)",
                         index, h->slot_count);
    const bool with_map = segs && blocks;
    const uint64_t base = (uint64_t)h->header_size + (uint64_t)index * h->slot_size;
    const unsigned tries = pg->retries ? pg->retries : 1;
    uint64_t s1 = 0, s2 = 1;
    unsigned attempt;
    for (attempt = 0; attempt < tries; attempt++) {
        if (attempt && !backoff(attempt)) {
            attempt = tries;
            break;
        }
        int st = src_read(pg, base + offsetof(tessera_page_slot_head, seq), &s1, sizeof s1);
        if (st)
            return st;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (s1 & 1u)
            continue;
        st = src_read(pg, base, head, sizeof *head);
        if (st)
            return st;
        if (with_map && head->map.nsegments <= TESSERA_PAGE_MAX_SEGMENTS &&
            head->map.nblocks <= TESSERA_PAGE_MAX_BLOCKS) {
            st = src_read(pg, base + offsetof(tessera_page_slot, segments), segs,
                          (size_t)head->map.nsegments * sizeof *segs);
            if (!st)
                st = src_read(pg, base + offsetof(tessera_page_slot, blocks), blocks,
                              (size_t)head->map.nblocks * sizeof *blocks);
            if (st)
                return st;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        st = src_read(pg, base + offsetof(tessera_page_slot_head, seq), &s2, sizeof s2);
        if (st)
            return st;
        if (s1 == s2)
            break;
    }
    if (attempt == tries) {
        pg->retries = 1; /* bounded work per page: its other slots get one look each */
        return page_fail(pg, TS_PAGE_EBUSY,
                         "slot %" PRIu32 ": the writer held its sequence lock through %u attempts",
                         index, tries);
    }
    head->seq = s1;
    int st = ts_page_validate_slot(h, head, with_map ? segs : NULL, with_map ? blocks : NULL,
                                   pg->error, sizeof pg->error);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* liveness, listing, collection                                                              */

int ts_page_owner_state(const tessera_page_header *h, char *why, size_t whylen)
{
    char boot[TESSERA_PAGE_BOOT_ID_LEN];
    char hb[TESSERA_PAGE_BOOT_ID_LEN];
    memcpy(hb, h->boot_id, sizeof hb);
    hb[sizeof hb - 1] = '\0';
    if (h->pid <= 0) {
        set_msg(why, whylen, "no valid pid");
        return TS_OWNER_UNKNOWN;
    }
    if (hb[0] && ts_read_boot_id(boot, sizeof boot) == 0 && strcmp(boot, hb) != 0) {
        set_msg(why, whylen, "written before the last reboot (boot id %s)", hb);
        return TS_OWNER_REBOOTED;
    }
    uint64_t ns = ts_pid_namespace("self");
    if (h->pid_namespace && ns && h->pid_namespace != ns) {
        set_msg(why, whylen, "owner is in another pid namespace; cannot check it");
        return TS_OWNER_UNKNOWN;
    }
    if (kill(h->pid, 0) != 0 && errno == ESRCH) {
        set_msg(why, whylen, "process %" PRId32 " is gone", h->pid);
        return TS_OWNER_DEAD;
    }
    char state = 0;
    uint64_t start = 0;
    int e = ts_proc_stat(h->pid, &state, &start);
    if (e == ENOENT || e == ESRCH) {
        set_msg(why, whylen, "process %" PRId32 " is gone", h->pid);
        return TS_OWNER_DEAD;
    }
    if (e != 0) {
        set_msg(why, whylen, "cannot read /proc/%" PRId32 "/stat: %s", h->pid, strerror(e));
        return TS_OWNER_UNKNOWN;
    }
    if (state == 'Z' || state == 'X') {
        set_msg(why, whylen, "process %" PRId32 " has exited (not yet reaped)", h->pid);
        return TS_OWNER_DEAD;
    }
    if (h->start_time_ticks && start != h->start_time_ticks) {
        set_msg(why, whylen,
                "pid %" PRId32 " now belongs to another process (start time %" PRIu64
                ", the page says %" PRIu64 ")",
                h->pid, start, h->start_time_ticks);
        return TS_OWNER_PID_REUSED;
    }
    set_msg(why, whylen, "process %" PRId32 " is running", h->pid);
    return TS_OWNER_LIVE;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int ts_page_list(const char *dir, int **pids, size_t *n)
{
    *pids = NULL;
    *n = 0;
    if (!dir)
        dir = ts_statspage_dir();
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    size_t cap = 0, cnt = 0;
    int *v = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int pid = parse_pid_name(de->d_name, TESSERA_PAGE_FILE_PREFIX);
        if (pid <= 0)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            int *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return ENOMEM;
            }
            v = nv;
            cap = ncap;
        }
        v[cnt++] = pid;
    }
    closedir(d);
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_int);
    *pids = v;
    *n = cnt;
    return 0;
}

/* What an interrupted creation leaves, and nothing else: a regular file of mode 0000 (a page
 * gets its mode only once published) that is empty or exactly layout 1's size. */
static bool interrupted_creation(const ts_page *pg)
{
    const uint64_t total =
        (uint64_t)TESSERA_PAGE_HEADER_SIZE + (uint64_t)TESSERA_PAGE_SLOTS * TESSERA_PAGE_SLOT_SIZE;
    return pg->ino != 0 && (pg->mode & 07777) == 0 && (pg->size == 0 || pg->size == total);
}

int ts_page_judge(ts_page *pg, int status, int pid, char *why, size_t whylen)
{
    if (status == TS_PAGE_ENOENT) {
        set_msg(why, whylen, "no such page");
        return TS_OWNER_UNKNOWN;
    }
    if (pg->have_identity) {
        int owner = ts_page_owner_state(&pg->hdr, why, whylen);
        if (ts_owner_is_stale(owner))
            pg->retries = 1; /* nobody writes a dead process's page: a busy slot stays busy */
        return owner;
    }
    if (interrupted_creation(pg)) {
        if (time(NULL) - pg->mtime < TS_NO_IDENTITY_GRACE_S) {
            set_msg(why, whylen, "being created");
            return TS_OWNER_UNKNOWN;
        }
        if (pid_is_gone(pid)) {
            set_msg(why, whylen, "creation never finished and process %d is gone", pid);
            return TS_OWNER_DEAD;
        }
        set_msg(why, whylen, "not published yet; process %d is running", pid);
        return TS_OWNER_UNKNOWN;
    }
    set_msg(why, whylen, "not a readable tessera page");
    return TS_OWNER_UNKNOWN;
}

int ts_page_is_stale(ts_page *pg, const char *dir, int pid, char *why, size_t whylen)
{
    int st = ts_page_open_pid(pg, dir, pid);
    return ts_owner_is_stale(ts_page_judge(pg, st, pid, why, whylen));
}

/* Judge the file now at path (moved aside) as the page of pid, identical to (dev, ino). */
static int still_stale(const char *path, int pid, uint64_t dev, uint64_t ino, char *why,
                       size_t whylen)
{
    ts_page pg;
    ts_page_init(&pg);
    int st = open_path(&pg, path, pid);
    int stale = 0;
    if (st != TS_PAGE_ENOENT && pg.dev == dev && pg.ino == ino)
        stale = ts_owner_is_stale(ts_page_judge(&pg, st, pid, why, whylen));
    else
        set_msg(why, whylen, "replaced while being collected");
    ts_page_close(&pg);
    return stale;
}

/* Put a file moved aside back under its name, never over a newer file. */
static int restore_name(const char *aside, const char *path)
{
    if (renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return errno;
    if (link(aside, path) != 0)
        return errno;
    unlink(aside);
    return 0;
}

static int collect_one(const char *dir, const char *name, int pid, int *removed,
                       ts_gc_report_fn report, void *user)
{
    char path[PATH_MAX], aside[PATH_MAX], why[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = snprintf(aside, sizeof aside, "%s/.tessera-gc.%d.%d", dir, (int)getpid(), pid);
    if (n < 0 || (size_t)n >= sizeof aside)
        return ENAMETOOLONG;

    ts_page pg;
    ts_page_init(&pg);
    int st = open_path(&pg, path, pid);
    int stale = ts_owner_is_stale(ts_page_judge(&pg, st, pid, why, sizeof why));
    uint64_t dev = pg.dev, ino = pg.ino;
    ts_page_close(&pg);
    if (!stale)
        return 0;
    /* Move it aside (atomic), then judge exactly that inode again: a live page can never be
     * removed, even if its pid's new owner replaced the file in between. */
    if (rename(path, aside) != 0) {
        int e = errno;
        if (e != ENOENT && report) {
            char msg[320];
            snprintf(msg, sizeof msg, "%s; cannot remove it: %s", why, strerror(e));
            report(user, pid, 0, msg);
        }
        return 0;
    }
    char why2[256];
    if (still_stale(aside, pid, dev, ino, why2, sizeof why2) && unlink(aside) == 0) {
        (*removed)++;
        if (report)
            report(user, pid, 1, why);
        return 0;
    }
    int e = restore_name(aside, path);
    if (report) {
        char msg[PATH_MAX + 320];
        if (e)
            snprintf(msg, sizeof msg, "changed while being collected; left as %s (%s)", aside,
                     strerror(e));
        else
            snprintf(msg, sizeof msg, "changed while being collected (%s); left in place", why2);
        report(user, pid, 0, msg);
    }
    return 0;
}

/* A file moved aside by a collector that died before finishing: .tessera-gc.<gcpid>.<pid>. */
static void recover_aside(const char *dir, const char *name, int *removed, ts_gc_report_fn report,
                          void *user)
{
    int gcpid = 0, pid = 0;
    char tail;
    if (sscanf(name, ".tessera-gc.%d.%d%c", &gcpid, &pid, &tail) != 2 || gcpid <= 0 || pid <= 0)
        return;
    if (gcpid == (int)getpid() || !pid_is_gone(gcpid))
        return;
    char aside[PATH_MAX], path[PATH_MAX], why[256];
    snprintf(aside, sizeof aside, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d", dir, pid);
    ts_page pg;
    ts_page_init(&pg);
    int st = open_path(&pg, aside, pid);
    int stale = ts_owner_is_stale(ts_page_judge(&pg, st, pid, why, sizeof why));
    ts_page_close(&pg);
    if (stale) {
        if (unlink(aside) == 0) {
            (*removed)++;
            if (report)
                report(user, pid, 1, why);
        }
    } else if (st != TS_PAGE_ENOENT) {
        (void)restore_name(aside, path);
    }
}

int ts_page_gc(const char *dir, ts_gc_report_fn report, void *user)
{
    if (!dir)
        dir = ts_statspage_dir();
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    size_t cap = 0, cnt = 0;
    char (*names)[256] = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (parse_pid_name(de->d_name, TESSERA_PAGE_FILE_PREFIX) <= 0 &&
            strncmp(de->d_name, ".tessera-gc.", 12) != 0)
            continue;
        if (strlen(de->d_name) >= 256)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            void *nv = realloc(names, ncap * sizeof *names);
            if (!nv) {
                free(names);
                closedir(d);
                return -ENOMEM;
            }
            names = nv;
            cap = ncap;
        }
        snprintf(names[cnt++], sizeof names[0], "%s", de->d_name);
    }
    closedir(d);
    int removed = 0;
    for (size_t i = 0; i < cnt; i++) {
        int pid = parse_pid_name(names[i], TESSERA_PAGE_FILE_PREFIX);
        if (pid > 0)
            collect_one(dir, names[i], pid, &removed, report, user);
        else
            recover_aside(dir, names[i], &removed, report, user);
    }
    free(names);
    return removed;
}
