/* statspage-fixture: publishes and forges stats pages with known contents for the CLI tests.
 *
 *   statspage-fixture serve [--tag TEXT] [--keep]
 *       create this process's page in $TESSERA_STATS_DIR with the known contents below, print
 *       "ready <pid>" and wait until stdin closes or SIGTERM; then close it (unlinked unless
 *       --keep). SIGKILL it to leave a stale page behind.
 *   statspage-fixture forge KIND PID [--start auto|N]
 *       write $TESSERA_STATS_DIR/tessera.PID holding the known contents as if PID wrote it,
 *       damaged as KIND says: valid, reused, rebooted, corrupt, corrupt-slot, corrupt-map,
 *       truncated-map (a map that says it was cut short), truncated, foreign, newer, notready,
 *       newline-command.
 *   statspage-fixture corpus DIR
 *       write the fuzz seed corpus (small pages: trailing zero bytes trimmed).
 *
 * The known contents (slot 0 is also drawn by the map test):
 *   slot 0: device 0, context 0x1000; slot 1: device 1, context 0x2000 (no map)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statspage/identity.h"
#include "statspage/writer.h"

#define MiB (UINT64_C(1) << 20)

static void die(const char *what)
{
    fprintf(stderr, "statspage-fixture: %s\n", what);
    exit(1);
}

/* ---- the known counters, written through the sink exactly as the allocator will ---- */

static void set_stat(tessera_stat *s, int64_t cur, int64_t peak, int64_t alloc, int64_t freed)
{
    tessera_stat_store(&s->current, cur);
    tessera_stat_store(&s->peak, peak);
    tessera_stat_store(&s->allocated, alloc);
    tessera_stat_store(&s->freed, freed);
}

/* pool values: small, large; all = small + large */
static void set_array(tessera_stat a[3], int64_t small, int64_t large, int64_t speak, int64_t lpeak)
{
    set_stat(&a[TESSERA_POOL_SMALL], small, speak, small + 100, 100);
    set_stat(&a[TESSERA_POOL_LARGE], large, lpeak, large + 1000, 1000);
    set_stat(&a[TESSERA_POOL_ALL], small + large, speak + lpeak, small + large + 1100, 1100);
}

static void write_known(ts_stats_sink sink, int which)
{
    tessera_device_stats *s = sink.stats;
    tessera_seq_write_begin(sink.seq);
    if (which == 0) {
        set_array(s->allocated_bytes, 1 * (int64_t)MiB, 768 * (int64_t)MiB, 2 * (int64_t)MiB,
                  898 * (int64_t)MiB);
        set_array(s->reserved_bytes, 2 * (int64_t)MiB, 1024 * (int64_t)MiB, 2 * (int64_t)MiB,
                  1198 * (int64_t)MiB);
        set_array(s->allocation, 3, 40, 5, 50);
        set_array(s->segment, 1, 9, 1, 10);
        tessera_stat_store(&s->num_alloc_retries, 3);
        tessera_stat_store(&s->num_ooms, 1);
        tessera_stat_store(&s->num_ops, 12345);
        tessera_stat_store(&s->num_alloc_calls, 7000);
        tessera_stat_store(&s->max_split_size, -1);
        tessera_stat_store(&s->device_total_bytes, 80 * 1024 * (int64_t)MiB);
        tessera_stat_store(&s->largest_free_block_bytes, 16 * (int64_t)MiB);
        set_stat(&s->oversize_allocations, 2, 4, 9, 7);
    } else {
        set_array(s->allocated_bytes, 0, 100 * (int64_t)MiB, 0, 100 * (int64_t)MiB);
        set_array(s->reserved_bytes, 0, 100 * (int64_t)MiB, 0, 100 * (int64_t)MiB);
        tessera_stat_store(&s->num_ops, 77);
        tessera_stat_store(&s->max_split_size, 256 * (int64_t)MiB);
    }
    tessera_seq_write_end(sink.seq);
}

/* ---- the known segment map, fed through a walker like ts_allocator_walk ---- */

struct fake_block {
    uint64_t size;
    int state;
};
struct fake_seg {
    uint64_t addr, size, mapped;
    bool small;
    int kind;
    int nblocks;
    struct fake_block b[4];
};
static const struct fake_seg KNOWN_MAP[] = {
    {UINT64_C(0x7f0000000000), 20 * MiB, 20 * MiB, false, TS_SEGMENT_PLAIN, 4,
     {{8 * MiB, TS_BLOCK_ALLOCATED}, {4 * MiB, TS_BLOCK_FREE}, {2 * MiB, TS_BLOCK_PENDING},
      {6 * MiB, TS_BLOCK_ALLOCATED}}},
    {UINT64_C(0x7f0001400000), 2 * MiB, 2 * MiB, true, TS_SEGMENT_PLAIN, 2,
     {{1 * MiB, TS_BLOCK_ALLOCATED}, {1 * MiB, TS_BLOCK_FREE}}},
    {UINT64_C(0x7f0010000000), 64 * MiB, 48 * MiB, false, TS_SEGMENT_EXPANDABLE, 3,
     {{32 * MiB, TS_BLOCK_ALLOCATED}, {16 * MiB, TS_BLOCK_FREE}, {16 * MiB, TS_BLOCK_UNMAPPED}}},
    {UINT64_C(0x7f0020000000), 8 * MiB, 8 * MiB, false, TS_SEGMENT_STITCHED, 1,
     {{8 * MiB, TS_BLOCK_ALLOCATED}}},
};

static void walk_known(void *ctx, const ts_walker *w)
{
    (void)ctx;
    for (size_t i = 0; i < sizeof KNOWN_MAP / sizeof KNOWN_MAP[0]; i++) {
        const struct fake_seg *fs = &KNOWN_MAP[i];
        ts_segment_info si = {.addr = (uintptr_t)fs->addr, .size = (size_t)fs->size,
                              .mapped = (size_t)fs->mapped, .small_pool = fs->small,
                              .kind = (ts_segment_kind)fs->kind, .stream = 0x7,
                              .nblocks = (size_t)fs->nblocks};
        if (w->segment(w->user, &si))
            return;
        uint64_t off = 0;
        for (int b = 0; b < fs->nblocks; b++) {
            ts_block_info bi = {.addr = (uintptr_t)(fs->addr + off), .size = (size_t)fs->b[b].size,
                                .requested = (size_t)fs->b[b].size,
                                .state = (ts_block_state)fs->b[b].state, .stream = 0x7};
            off += fs->b[b].size;
            if (w->block(w->user, &si, &bi))
                return;
        }
    }
}

static ts_statspage *publish_known(const char *dir, const char *config)
{
    char err[512];
    ts_statspage *p = NULL;
    int e = ts_statspage_create(dir, config, &p, err, sizeof err);
    if (e)
        die(err);
    ts_stats_sink s0, s1;
    int a = ts_statspage_claim(p, 0, 0x1000, &s0);
    int b = ts_statspage_claim(p, 1, 0x2000, &s1);
    if (a != 0 || b != 1)
        die("claim failed");
    write_known(s0, 0);
    write_known(s1, 1);
    ts_statspage_publish_walk(p, a, walk_known, NULL);
    return p;
}

#define KNOWN_CONFIG "max_split_size:unlimited,expandable_segments:True,stats:True"

/* ---- serve ---- */

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static int cmd_serve(int argc, char **argv)
{
    bool keep = false;
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--keep") == 0)
            keep = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    ts_statspage *p = publish_known(NULL, KNOWN_CONFIG);
    printf("ready %d %s\n", (int)getpid(), ts_statspage_path(p));
    fflush(stdout);
    char c;
    while (!stop) {
        ssize_t n = read(0, &c, 1);
        if (n == 0 || (n < 0 && errno != EINTR))
            break;
    }
    ts_statspage_close(p, !keep);
    return 0;
}

/* ---- forge ---- */

static unsigned char *known_bytes(size_t *len)
{
    char tmpl[] = "/tmp/tessera-fixture-XXXXXX";
    if (!mkdtemp(tmpl))
        die("mkdtemp");
    ts_statspage *p = publish_known(tmpl, KNOWN_CONFIG);
    const char *path = ts_statspage_path(p);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("reopen");
    struct stat st;
    fstat(fd, &st);
    unsigned char *buf = malloc((size_t)st.st_size);
    if (!buf || pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
        die("read back");
    close(fd);
    ts_statspage_close(p, true);
    rmdir(tmpl);
    *len = (size_t)st.st_size;
    return buf;
}

static void write_file(const char *path, const void *buf, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len || close(fd) != 0 || rename(tmp, path) != 0)
        die("write page");
}

static tessera_page_slot *slot_of(unsigned char *buf, uint32_t i)
{
    return (tessera_page_slot *)(void *)(buf + TESSERA_PAGE_HEADER_SIZE +
                                         (size_t)i * TESSERA_PAGE_SLOT_SIZE);
}

static int cmd_forge(int argc, char **argv)
{
    if (argc < 2)
        die("forge KIND PID [--start auto|N]");
    const char *kind = argv[0];
    int pid = atoi(argv[1]);
    const char *start = argc >= 4 && strcmp(argv[2], "--start") == 0 ? argv[3] : "auto";
    size_t len;
    unsigned char *buf = known_bytes(&len);
    tessera_page_header *h = (tessera_page_header *)(void *)buf;
    h->pid = pid;
    uint64_t ticks = 0;
    if (strcmp(start, "auto") == 0) {
        if (ts_proc_stat(pid, NULL, &ticks) != 0)
            ticks = 4242; /* a dead pid: any value */
    } else {
        ticks = strtoull(start, NULL, 10);
    }
    h->start_time_ticks = ticks;
    if (strcmp(kind, "valid") == 0) {
    } else if (strcmp(kind, "reused") == 0) {
        h->start_time_ticks = ticks + 12345;
    } else if (strcmp(kind, "rebooted") == 0) {
        snprintf(h->boot_id, sizeof h->boot_id, "00000000-1111-2222-3333-444444444444");
    } else if (strcmp(kind, "corrupt") == 0) {
        h->total_size += 4096;
    } else if (strcmp(kind, "corrupt-slot") == 0) {
        slot_of(buf, 1)->head.state = 9;
    } else if (strcmp(kind, "corrupt-map") == 0) {
        slot_of(buf, 0)->blocks[1].size += 512; /* the map no longer matches its checksum */
    } else if (strcmp(kind, "truncated-map") == 0) {
        tessera_page_slot *sl = slot_of(buf, 0);
        sl->head.map.flags |= TESSERA_MAP_TRUNCATED;
        sl->head.map.total_segments += 3;
        sl->head.map.total_blocks += 10;
        sl->head.map.checksum = tessera_page_map_checksum(&sl->head.map, sl->segments, sl->blocks);
    } else if (strcmp(kind, "truncated") == 0) {
        len = 1000;
    } else if (strcmp(kind, "foreign") == 0) {
        memcpy(&h->magic, "NOTTESSR", 8);
    } else if (strcmp(kind, "newer") == 0) {
        h->layout_version = 99;
    } else if (strcmp(kind, "notready") == 0) {
        h->magic = 0;
    } else if (strcmp(kind, "layout2") == 0) {
        /* what the tessera before lending wrote: no channel, no device UUIDs, the counters up
         * to the pinned host memory ones (offsetof num_lend_asks) */
        h->layout_version = 2;
        h->control_secret = 0;
        h->stats_words = (uint32_t)(offsetof(tessera_device_stats, num_lend_asks) / 8);
        for (uint32_t i = 0; i < h->slot_count; i++) {
            memset(slot_of(buf, i)->head.device_uuid, 0, 16);
            slot_of(buf, i)->head.stats.num_lend_asks = 0;
        }
    } else if (strcmp(kind, "newline-command") == 0) {
        /* and control bytes a terminal would obey (ESC [2J clears the screen) */
        snprintf(h->cmdline, sizeof h->cmdline, "evil \"quoted\" back\\slash\nnext line\x01\x1b[2J");
    } else {
        die("unknown kind");
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d", ts_statspage_dir(), pid);
    write_file(path, buf, len);
    free(buf);
    return 0;
}

/* ---- corpus: small pages (1 slot) with trailing zeros trimmed; the fuzz target pads ---- */

static void corpus_file(const char *dir, const char *name, const unsigned char *buf, size_t len)
{
    while (len > 0 && buf[len - 1] == 0)
        len--;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, buf, len);
}

static int cmd_corpus(int argc, char **argv)
{
    if (argc < 1)
        die("corpus DIR");
    size_t len;
    unsigned char *buf = known_bytes(&len);
    tessera_page_header *h = (tessera_page_header *)(void *)buf;
    const size_t one = TESSERA_PAGE_HEADER_SIZE + (size_t)TESSERA_PAGE_SLOT_SIZE;
    h->pid = 4242;
    h->slot_count = 1; /* one slot keeps the seeds small (about 7 KB) */
    h->total_size = one;
    snprintf(h->cmdline, sizeof h->cmdline, "python train.py --fuzz \"x\" \\");
    corpus_file(argv[0], "valid", buf, one);
    unsigned char *c = malloc(one);
    if (!c)
        die("oom");
    tessera_page_header *ch = (tessera_page_header *)(void *)c;
    tessera_page_map *cm = &slot_of(c, 0)->head.map;
#define VARIANT(name, edit, keep)                                                                  \
    do {                                                                                           \
        memcpy(c, buf, one);                                                                       \
        edit;                                                                                      \
        corpus_file(argv[0], name, c, keep);                                                       \
    } while (0)
    VARIANT("newer", ch->layout_version = TESSERA_PAGE_LAYOUT_VERSION + 1, one);
    VARIANT("older", ch->layout_version = 1, one);
    VARIANT("notready", ch->magic = 0, 200);
    VARIANT("foreign", memcpy(&ch->magic, "GGUF\3\0\0\0", 8), one);
    VARIANT("header-only", (void)0, TESSERA_PAGE_HEADER_SIZE);
    VARIANT("busy", slot_of(c, 0)->head.seq = 3, one);
    VARIANT("corrupt-checksum", slot_of(c, 0)->blocks[2].size += 1, one);
    VARIANT("truncated-map",
            (cm->flags |= TESSERA_MAP_TRUNCATED, cm->total_segments += 3, cm->total_blocks += 9,
             slot_of(c, 0)->segments[3].nblocks_total = 4,
             cm->checksum = tessera_page_map_checksum(cm, slot_of(c, 0)->segments,
                                                      slot_of(c, 0)->blocks)),
            one);
    VARIANT("huge-values",
            (slot_of(c, 0)->head.stats.reserved_bytes[0].current = INT64_MIN,
             slot_of(c, 0)->head.stats.allocated_bytes[0].current = INT64_MAX,
             slot_of(c, 0)->segments[0].size = UINT64_MAX, slot_of(c, 0)->blocks[0].size = UINT64_MAX,
             cm->checksum = tessera_page_map_checksum(cm, slot_of(c, 0)->segments,
                                                      slot_of(c, 0)->blocks)),
            one);
#undef VARIANT
    free(c);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0)
        return cmd_serve(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "forge") == 0)
        return cmd_forge(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "corpus") == 0)
        return cmd_corpus(argc - 2, argv + 2);
    die("usage: statspage-fixture serve|forge|corpus ...");
    return 1;
}
