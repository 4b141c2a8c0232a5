/* The stats page writer (statspage/writer.h): one page per process, one slot per device context.
 *
 * Rules (docs/stats-page.md, "Writing"):
 *   - the page belongs to one process; each slot has exactly one writer at a time (the allocator
 *     of that context, under its mutex), so the per-slot sequence lock needs no CAS;
 *   - nothing here waits for a reader, takes a lock shared with another process, prints, or
 *     exits the host process; every failure is returned;
 *   - memory a sink or observer may still touch is never unmapped (close/forget replace the
 *     shared mapping in place with private memory and retire the handle).
 */
#include "statspage/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "statspage/identity.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

_Static_assert(TESSERA_PAGE_HEADER_SIZE % 8 == 0, "word copies");
_Static_assert(offsetof(tessera_page_slot_head, seq) % 8 == 0, "seq aligned");
_Static_assert(offsetof(tessera_page_slot_head, stats) % 64 == 0, "stats on their own line");

static uint64_t now_realtime_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* Relaxed atomic word copies: the shared page is only ever written 8 bytes at a time. */
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

struct ts_slotref {
    ts_statspage *page;
    uint32_t index;
    uint32_t claimed;      /* this handle claimed the slot (atomic) */
    uint32_t fallocated;   /* the slot's file range is committed */
    uint32_t pad;
    tessera_page_segment *seg_scratch; /* map built here, then copied in a short write section */
    tessera_page_block *blk_scratch;
    const tessera_history_header *history; /* the slot's ring (atomic), or NULL: its `written`
                                            * is read with the map, under the allocator's
                                            * mutex, which also orders the ring's writes */
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

/* An existing file named after our pid: 0 when it is stale (safe to replace), else an errno
 * value with the reason in err. Its creator had our pid number, so unless it is this very
 * process (or a process of another pid namespace sharing the directory) it is gone. */
static int judge_existing(const char *path, const ts_identity *self, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        int e = errno;
        if (e == ELOOP)
            ts_msg_set(err, errlen, "%s exists and is a symbolic link, not a regular file; leaving "
                    "it alone", path);
        else
            ts_msg_set(err, errlen, "%s exists and cannot be examined: %s", path, strerror(e));
        return EEXIST;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        ts_msg_set(err, errlen, "%s exists and is not a regular file; leaving it alone", path);
        return EEXIST;
    }
    if (st.st_uid != geteuid()) {
        /* Another user's file in our name: never replace it, and never write into it. Readers
         * do not trust it either (its owner is not this process's user). */
        close(fd);
        ts_msg_set(err, errlen, "%s exists and belongs to uid %u, not to this process's user; "
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
        ts_msg_set(err, errlen, "%s exists and is not a tessera stats page; leaving it alone", path);
        return EEXIST;
    }
    if (n < 128)
        return 0;
    h.boot_id[sizeof h.boot_id - 1] = '\0';
    if (self->pid_ns && h.pid_namespace && h.pid_namespace != self->pid_ns &&
        strcmp(h.boot_id, self->boot_id) == 0) {
        ts_msg_set(err, errlen, "%s belongs to a process of another pid namespace", path);
        return EEXIST;
    }
    if (h.pid == self->pid && h.start_time_ticks == self->start_ticks &&
        strcmp(h.boot_id, self->boot_id) == 0) {
        ts_msg_set(err, errlen, "%s is already published by this process", path);
        return EEXIST;
    }
    return 0;
}

static void fill_header(tessera_page_header *h, const ts_identity *id, const char *config,
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
    long n = ts_proc_cmdline(cmd, sizeof cmd);
    if (n > 0) {
        size_t len = (size_t)n;
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

/* tessera run --summary: a second name for the published page, in TESSERA_SUMMARY_DIR, so that
 * the run's summary reads the last numbers of every process of the run after it removed its page
 * (and while the page stays where anyone watching the run looks for it). Only into a directory
 * that is the user's own and no one else's (what tessera run makes): the variable is inherited
 * by whatever the program starts. Best effort: a page that cannot be linked is missing from the
 * summary, nothing else. */
static void summary_link(const ts_statspage *p)
{
    const char *dir = getenv(TS_SUMMARY_DIR_ENV);
    if (!dir || dir[0] != '/')
        return;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    struct stat st;
    const char *name = strrchr(p->path, '/');
    if (fstat(dfd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 077) == 0 && name)
        (void)linkat(AT_FDCWD, p->path, dfd, name + 1, 0);
    close(dfd);
}

int ts_statspage_create(const char *dir, const char *config_text, ts_statspage **out, char *err,
                        size_t errlen)
{
    ts_msg_set(err, errlen, "ok");
    if (!out) {
        ts_msg_set(err, errlen, "no output pointer");
        return EINVAL;
    }
    *out = NULL;
    if (!dir)
        dir = ts_statspage_dir();

    ts_identity self;
    ts_identity_self(&self);

    ts_statspage *p = calloc(1, sizeof *p);
    if (!p) {
        ts_msg_set(err, errlen, "out of memory");
        return ENOMEM;
    }
    int e = absolute_page_path(p->path, sizeof p->path, dir, self.pid);
    if (e != 0) {
        ts_msg_set(err, errlen, "cannot use the stats directory %s: %s", dir, strerror(e));
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
            ts_msg_set(err, errlen, "cannot create %s: %s", p->path, strerror(e));
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
            ts_msg_set(err, errlen, "cannot replace the stale page %s: %s", p->path, strerror(e));
            free(p);
            return e;
        }
    }
    if (fd < 0) {
        ts_msg_set(err, errlen, "cannot create %s: it keeps reappearing", p->path);
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
        ts_msg_set(err, errlen, "cannot set up %s: %s: %s", p->path, what, strerror(e));
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
        ts_msg_set(err, errlen, "cannot set up %s: %s", p->path, strerror(e));
        munmap(base, p->size);
        unlink(p->path);
        free(p);
        return e;
    }
    summary_link(p);
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
        zero_words(s->head.device_uuid, sizeof s->head.device_uuid);
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
    __atomic_store_n(&r->history, NULL, __ATOMIC_RELEASE); /* the next owner has its own ring */
    __atomic_store_n(&slot_at(p, (uint32_t)slot)->head.state, TESSERA_SLOT_FREE,
                     __ATOMIC_RELEASE);
}

void ts_statspage_set_device_uuid(ts_statspage *p, int slot, const uint8_t uuid[16])
{
    if (!p || slot < 0 || (uint32_t)slot >= p->slot_count || is_retired(p))
        return;
    tessera_page_slot *s = slot_at(p, (uint32_t)slot);
    uint64_t words[2];
    memcpy(words, uuid, sizeof words);
    tessera_seq_write_begin(&s->head.seq);
    store_words(s->head.device_uuid, words, sizeof words);
    tessera_seq_write_end(&s->head.seq);
}

void ts_statspage_set_control(ts_statspage *p, uint64_t secret)
{
    if (!p || is_retired(p))
        return;
    /* set once, from 0: a reader that read 0 before sees a process without a channel */
    uint64_t none = 0;
    __atomic_compare_exchange_n(&((tessera_page_header *)(void *)p->base)->control_secret, &none, secret,
                                false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

void ts_statspage_set_history(ts_statspage *p, int slot, const tessera_history_header *ring)
{
    if (!p || slot < 0 || (uint32_t)slot >= p->slot_count)
        return;
    __atomic_store_n(&p->refs[slot].history, ring, __ATOMIC_RELEASE);
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
    case TESSERA_BLOCK_LENT:
        break; /* the stitched segment it backs counts those bytes */
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
    const tessera_history_header *hist = __atomic_load_n(&r->history, __ATOMIC_ACQUIRE);
    if (hist) {
        /* the layout's instant in the history: both are written under the allocator's mutex */
        b.map.history_written = __atomic_load_n(&hist->written, __ATOMIC_ACQUIRE);
        b.map.flags |= TESSERA_MAP_HISTORY;
    }
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
