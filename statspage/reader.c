/* The stats page reader (statspage/reader.h): never trust a byte of the file; read it with pread
 * into private copies (a page that shrinks gives an error, not SIGBUS); validate every count
 * before using it. */
#include "statspage/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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

/* Reader bounds, all in wall time (a loaded machine makes every yield and sleep longer, so
 * attempts alone bound nothing). A busy slot is retried (spin, yield, then 200 us sleeps) for at
 * most TS_READ_SLOT_NS, and TS_READ_RETRIES attempts, before it is reported busy; the page's
 * other slots then get one try each, and a page whose owner is dead gets one try per slot.
 * Retrying is charged to the user owning the page file: each user may spend
 * TS_READ_USER_BUDGET_NS, and all users together TS_READ_ALL_BUDGET_NS, in any
 * TS_READ_BUDGET_WINDOW_NS; past that, a slot gets one look. One user's forged pages therefore
 * cost a bounded time and cannot spend the retries of another user's pages. */
#define TS_READ_RETRIES 164u
#define TS_READ_SLEEP_NS 200000L
#define TS_READ_SLOT_NS 20000000ull
#define TS_READ_USER_BUDGET_NS 250000000ull
#define TS_READ_ALL_BUDGET_NS 1000000000ull
#define TS_READ_BUDGET_WINDOW_NS 2000000000ull
#define TS_READ_BUDGET_USERS 16 /* users with their own budget; the rest share one */

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

int ts_page_name_pid(const char *name)
{
    const char *prefix = TESSERA_PAGE_FILE_PREFIX;
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
    case TS_PAGE_EOLDER: return "older-layout";
    case TS_PAGE_ECORRUPT: return "corrupt";
    case TS_PAGE_EBUSY: return "busy";
    case TS_PAGE_EEMPTY: return "empty";
    case TS_PAGE_EUNTRUSTED: return "untrusted";
    case TS_PAGE_ESKIPPED: return "skipped";
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
    if (pg->mapped)
        munmap((void *)pg->mem, (size_t)pg->hdr.total_size);
    pg->fd = -1;
    pg->mem = NULL;
    pg->mapped = 0;
    pg->size = 0;
}

int ts_page_map(ts_page *pg)
{
    if (pg->fd < 0 || pg->hdr.magic != TESSERA_PAGE_MAGIC || pg->hdr.total_size > pg->size)
        return EBADF;
    if (pg->uid != (uint32_t)geteuid())
        return EPERM;
    void *m = mmap(NULL, (size_t)pg->hdr.total_size, PROT_READ, MAP_SHARED, pg->fd, 0);
    if (m == MAP_FAILED)
        return errno;
    close(pg->fd);
    pg->fd = -1;
    pg->mem = m;
    pg->mapped = 1;
    return 0;
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
    if (h->layout_version < TESSERA_PAGE_LAYOUT_OLDEST)
        return page_fail(pg, TS_PAGE_EOLDER,
                         "written by an older tessera (layout %" PRIu32
                         "; this reader reads layouts %u to %u: use that version's tessera-stat)",
                         h->layout_version, TESSERA_PAGE_LAYOUT_OLDEST,
                         TESSERA_PAGE_LAYOUT_VERSION);
    if (pg->size < TESSERA_PAGE_HEADER_SIZE)
        return page_fail(pg, TS_PAGE_ETRUNCATED,
                         "truncated: %" PRIu64 " bytes, the header alone needs %u", pg->size,
                         TESSERA_PAGE_HEADER_SIZE);
    st = src_read(pg, 0, h, sizeof *h);
    if (st)
        return st;
    h->magic = magic;
    if (h->header_size != TESSERA_PAGE_HEADER_SIZE)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: header size %" PRIu32 " (layout %u has %u)",
                         h->header_size, TESSERA_PAGE_LAYOUT_VERSION, TESSERA_PAGE_HEADER_SIZE);
    if (h->slot_size != TESSERA_PAGE_SLOT_SIZE)
        return page_fail(pg, TS_PAGE_ECORRUPT, "corrupt: slot size %" PRIu32 " (layout %u has %u)",
                         h->slot_size, TESSERA_PAGE_LAYOUT_VERSION, TESSERA_PAGE_SLOT_SIZE);
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

/* Anyone may create a file named tessera.<pid> in a shared directory, for a process that is not
 * theirs, with counters of their choosing. A page is trusted only when its file is not writable
 * by group or others and belongs to a user the process runs as. A page whose owner cannot be
 * looked up (another pid namespace, whose pid numbers mean nothing here; /proc hidden or
 * unreadable) cannot be trusted: the namespace field is the forger's to choose too. Only a
 * process that is gone is left to the owner check that follows (judged stale, never live). */
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
        return page_fail(pg, TS_PAGE_EUNTRUSTED,
                         "untrusted: the page names pid namespace %" PRIu64
                         ", not this reader's: its owner cannot be checked",
                         pg->hdr.pid_namespace);
    uint32_t uids[4];
    int e = ts_proc_uids(pg->hdr.pid, uids);
    if (e == ENOENT || e == ESRCH)
        return status; /* gone: the owner state says stale */
    if (e != 0)
        return page_fail(pg, TS_PAGE_EUNTRUSTED,
                         "untrusted: cannot read /proc/%" PRId32 "/status (%s): its owner cannot "
                         "be checked", pg->hdr.pid, strerror(e));
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
    if (status == TS_PAGE_OK || status == TS_PAGE_ENEWER || status == TS_PAGE_EOLDER)
        status = check_trust(pg, status);
    return status;
}

int ts_page_open(ts_page *pg, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return open_path(pg, path, ts_page_name_pid(base));
}

int ts_page_open_as(ts_page *pg, const char *path, int pid)
{
    return open_path(pg, path, pid);
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

/* Retry budgets (see TS_READ_USER_BUDGET_NS): one per user seen recently, one for all. */
typedef struct read_budget {
    uint32_t uid;
    uint64_t window_start; /* monotonic ns; 0: unused entry */
    uint64_t spent;        /* ns of retrying charged in this window */
} read_budget;

static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static read_budget budget_all, budget_users[TS_READ_BUDGET_USERS + 1];

static void budget_roll(read_budget *b, uint64_t now)
{
    if (b->window_start == 0 || now - b->window_start > TS_READ_BUDGET_WINDOW_NS) {
        b->window_start = now;
        b->spent = 0;
    }
}

/* uid's budget: its own entry, a free or expired one, else the shared last entry. */
static read_budget *budget_of(uint32_t uid, uint64_t now)
{
    for (int i = 0; i < TS_READ_BUDGET_USERS; i++)
        if (budget_users[i].window_start && budget_users[i].uid == uid)
            return &budget_users[i];
    for (int i = 0; i < TS_READ_BUDGET_USERS; i++)
        if (!budget_users[i].window_start ||
            now - budget_users[i].window_start > TS_READ_BUDGET_WINDOW_NS) {
            budget_users[i].uid = uid;
            budget_users[i].window_start = 0;
            return &budget_users[i];
        }
    return &budget_users[TS_READ_BUDGET_USERS];
}

/* Charge ns of retrying to uid; false when its budget or everyone's is spent. */
static bool budget_charge(uint32_t uid, uint64_t ns)
{
    uint64_t now = now_monotonic_ns();
    pthread_mutex_lock(&budget_lock);
    read_budget *u = budget_of(uid, now);
    budget_roll(u, now);
    budget_roll(&budget_all, now);
    u->spent += ns;
    budget_all.spent += ns;
    bool ok = u->spent <= TS_READ_USER_BUDGET_NS && budget_all.spent <= TS_READ_ALL_BUDGET_NS;
    pthread_mutex_unlock(&budget_lock);
    return ok;
}

/* Wait before attempt number attempt (since started, monotonic ns; *charged: ns already charged
 * to uid). false: give up now (this slot's time or the budget is spent). */
static bool backoff(unsigned attempt, uint32_t uid, uint64_t started, uint64_t *charged)
{
    uint64_t now = now_monotonic_ns();
    uint64_t elapsed = now - started;
    if (elapsed >= TS_READ_SLOT_NS)
        return false;
    bool ok = budget_charge(uid, elapsed - *charged);
    *charged = elapsed;
    if (!ok)
        return false;
    if (attempt < 16)
        return true;
    if (attempt < 64) {
        sched_yield();
        return true;
    }
    struct timespec ts = {0, TS_READ_SLEEP_NS};
    nanosleep(&ts, NULL);
    return true;
}

int ts_page_snapshot(ts_page *pg, uint32_t index, tessera_page_slot_head *head,
                     tessera_page_segment *segs, tessera_page_block *blocks)
{
    const tessera_page_header *h = &pg->hdr;
    if (h->magic != TESSERA_PAGE_MAGIC || h->layout_version < TESSERA_PAGE_LAYOUT_OLDEST ||
        h->layout_version > TESSERA_PAGE_LAYOUT_VERSION || h->slot_size != TESSERA_PAGE_SLOT_SIZE)
        return page_fail(pg, TS_PAGE_EIO, "page not open");
    if (index >= h->slot_count)
        return page_fail(pg, TS_PAGE_ECORRUPT, "slot %" PRIu32 " out of range (%" PRIu32 " slots)",
                         index, h->slot_count);
    const bool with_map = segs && blocks;
    const uint64_t base = (uint64_t)h->header_size + (uint64_t)index * h->slot_size;
    const unsigned tries = pg->retries ? pg->retries : 1;
    uint64_t s1 = 0, s2 = 1, started = 0, charged = 0;
    unsigned attempt, looked = tries;
    for (attempt = 0; attempt < tries; attempt++) {
        if (attempt == 1)
            started = now_monotonic_ns();
        if (attempt && !backoff(attempt, pg->uid, started, &charged)) {
            looked = attempt;
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
    if (attempt > 1 && attempt <= tries) /* the last stretch of retrying, charged too */
        (void)budget_charge(pg->uid, now_monotonic_ns() - started - charged);
    if (attempt == tries) {
        pg->retries = 1; /* bounded work per page: its other slots get one look each */
        if (looked == 1 && tries > 1) /* the budget was spent before this slot's first retry */
            return page_fail(pg, TS_PAGE_EBUSY,
                             "slot %" PRIu32 ": the writer held its sequence lock (one look: the "
                             "time for retries on pages of uid %" PRIu32 " is spent for now)",
                             index, pg->uid);
        return page_fail(pg, TS_PAGE_EBUSY,
                         "slot %" PRIu32 ": the writer held its sequence lock through %u attempts "
                         "(%" PRIu64 " ms)", index, looked,
                         started ? (now_monotonic_ns() - started) / 1000000u : 0);
    }
    head->seq = s1;
    int st = ts_page_validate_slot(h, head, with_map ? segs : NULL, with_map ? blocks : NULL,
                                   pg->error, sizeof pg->error);
    return st;
}

int ts_page_owner_state(const tessera_page_header *h, char *why, size_t whylen)
{
    char boot[TESSERA_PAGE_BOOT_ID_LEN];
    char hb[TESSERA_PAGE_BOOT_ID_LEN];
    memcpy(hb, h->boot_id, sizeof hb);
    hb[sizeof hb - 1] = '\0';
    if (h->pid <= 0) {
        ts_msg_set(why, whylen, "no valid pid");
        return TS_OWNER_UNKNOWN;
    }
    if (hb[0] && ts_read_boot_id(boot, sizeof boot) == 0 && strcmp(boot, hb) != 0) {
        ts_msg_set(why, whylen, "written before the last reboot (boot id %s)", hb);
        return TS_OWNER_REBOOTED;
    }
    uint64_t ns = ts_pid_namespace("self");
    if (h->pid_namespace && ns && h->pid_namespace != ns) {
        /* Its pid number means nothing here. Dead only when provably so: no process at all is
         * left in that namespace (root in the initial namespace sees every process). */
        if (ts_pid_namespace_in_use(h->pid_namespace) == 0) {
            ts_msg_set(why, whylen, "no process is left in its pid namespace %" PRIu64,
                       h->pid_namespace);
            return TS_OWNER_DEAD;
        }
        ts_msg_set(why, whylen, "owner is in another pid namespace; cannot check it");
        return TS_OWNER_UNKNOWN;
    }
    if (kill(h->pid, 0) != 0 && errno == ESRCH) {
        ts_msg_set(why, whylen, "process %" PRId32 " is gone", h->pid);
        return TS_OWNER_DEAD;
    }
    char state = 0;
    uint64_t start = 0;
    int e = ts_proc_stat(h->pid, &state, &start);
    if (e == ENOENT || e == ESRCH) {
        ts_msg_set(why, whylen, "process %" PRId32 " is gone", h->pid);
        return TS_OWNER_DEAD;
    }
    if (e != 0) {
        ts_msg_set(why, whylen, "cannot read /proc/%" PRId32 "/stat: %s", h->pid, strerror(e));
        return TS_OWNER_UNKNOWN;
    }
    if (state == 'Z' || state == 'X') {
        ts_msg_set(why, whylen, "process %" PRId32 " has exited (not yet reaped)", h->pid);
        return TS_OWNER_DEAD;
    }
    if (h->start_time_ticks && start != h->start_time_ticks) {
        ts_msg_set(why, whylen,
                "pid %" PRId32 " now belongs to another process (start time %" PRIu64
                ", the page says %" PRIu64 ")",
                h->pid, start, h->start_time_ticks);
        return TS_OWNER_PID_REUSED;
    }
    ts_msg_set(why, whylen, "process %" PRId32 " is running", h->pid);
    return TS_OWNER_LIVE;
}
