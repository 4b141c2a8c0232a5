/* Stats page writer and reader: creation, replacement of stale files, slots, maps, validation of
 * damaged pages, liveness, garbage collection, fork. Every test works in its own directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <utime.h>

#include "statspage/collect.h"
#include "statspage/render.h"
#include "statspage/writer.h"
#include "tessera/history.h"

#define MiB (UINT64_C(1) << 20)

static char dir[256];
static const uint64_t TOTAL =
    (uint64_t)TESSERA_PAGE_HEADER_SIZE + (uint64_t)TESSERA_PAGE_SLOTS * TESSERA_PAGE_SLOT_SIZE;

static int setup_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tessera-test-page-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv(TESSERA_PAGE_DIR_ENV, dir, 1);
    return 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void page_path(char *buf, size_t len, int pid)
{
    snprintf(buf, len, "%s/tessera.%d", dir, pid);
}

static ts_statspage *must_create(void)
{
    char err[512];
    ts_statspage *p = NULL;
    int e = ts_statspage_create(NULL, "max_split_size:unlimited", &p, err, sizeof err);
    if (e)
        fprintf(stderr, "create: %s\n", err);
    assert_int_equal(e, 0);
    assert_non_null(p);
    return p;
}

/* A pid that names no process: a child that exited and was reaped. */
static int dead_pid(void)
{
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0)
        _exit(0);
    int st;
    waitpid(c, &st, 0);
    return (int)c;
}

/* The bytes of a fresh page of this process (made in a side directory). */
static unsigned char *page_bytes(void)
{
    char side[300];
    snprintf(side, sizeof side, "%s/side", dir);
    mkdir(side, 0700);
    char err[512];
    ts_statspage *p = NULL;
    assert_int_equal(ts_statspage_create(side, "cfg", &p, err, sizeof err), 0);
    ts_stats_sink sink;
    assert_int_equal(ts_statspage_claim(p, 0, 0x1000, &sink), 0);
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->num_ops, 5);
    tessera_seq_write_end(sink.seq);
    int fd = open(ts_statspage_path(p), O_RDONLY);
    assert_true(fd >= 0);
    unsigned char *buf = malloc(TOTAL + 8);
    if (!buf)
        abort();
    assert_int_equal(pread(fd, buf, TOTAL, 0), (ssize_t)TOTAL);
    close(fd);
    ts_statspage_close(p, true);
    rmdir(side);
    return buf;
}

static void write_bytes(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    close(fd);
}

/* A history ring's header for pid's slot (what --gc checks before removing a ring). */
static void write_ring(const char *path, int pid, unsigned slot)
{
    tessera_history_header h;
    memset(&h, 0, sizeof h);
    h.magic = TESSERA_HISTORY_MAGIC;
    h.version = TESSERA_HISTORY_VERSION;
    h.header_size = sizeof h;
    h.event_size = sizeof(tessera_history_event);
    h.capacity = 1;
    h.pid = pid;
    h.slot = slot;
    write_bytes(path, &h, sizeof h);
}

static tessera_page_header *hdr_of(unsigned char *buf)
{
    return (tessera_page_header *)(void *)buf;
}

/* ------------------------------------------------------------------------------------------ */

static void test_create_publishes_header(void **state)
{
    (void)state;
    mode_t old = umask(077); /* the page is 0644 whatever the umask */
    ts_statspage *p = must_create();
    umask(old);
    char path[512];
    page_path(path, sizeof path, (int)getpid());
    assert_string_equal(ts_statspage_path(p), path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal((uint64_t)st.st_size, TOTAL);

    ts_page pg;
    ts_page_init(&pg);
    assert_int_equal(ts_page_open(&pg, path), TS_PAGE_OK);
    const tessera_page_header *h = &pg.hdr;
    assert_int_equal(h->magic, TESSERA_PAGE_MAGIC);
    assert_int_equal(h->layout_version, 3);
    assert_int_equal(h->control_secret, 0); /* no channel until the shim names one */
    assert_int_equal(h->header_size, TESSERA_PAGE_HEADER_SIZE);
    assert_int_equal(h->slot_size, TESSERA_PAGE_SLOT_SIZE);
    assert_int_equal(h->slot_count, TESSERA_PAGE_SLOTS);
    assert_int_equal(h->total_size, TOTAL);
    assert_int_equal(h->pid, getpid());
    uint64_t start = 0;
    assert_int_equal(ts_proc_stat(0, NULL, &start), 0);
    assert_int_equal(h->start_time_ticks, start);
    char boot[64];
    assert_int_equal(ts_read_boot_id(boot, sizeof boot), 0);
    assert_string_equal(h->boot_id, boot);
    assert_int_equal(strlen(boot), 36);
    assert_int_equal(h->pid_namespace, ts_pid_namespace("self"));
    assert_int_equal(h->clock_ticks_per_second, sysconf(_SC_CLK_TCK));
    assert_string_equal(h->version, "0.1.0");
    assert_string_equal(h->config, "max_split_size:unlimited");
    assert_non_null(strstr(h->cmdline, "statspage-test-page"));
    assert_int_equal(h->max_segments, TESSERA_PAGE_MAX_SEGMENTS);
    assert_int_equal(h->max_blocks, TESSERA_PAGE_MAX_BLOCKS);
    assert_int_equal(h->stats_words, offsetof(tessera_device_stats, reserved_tail) / 8);
    assert_true(h->created_ns > UINT64_C(1600000000) * 1000000000u);
    char why[256];
    assert_int_equal(ts_page_owner_state(h, why, sizeof why), TS_OWNER_LIVE);

    /* no slot claimed yet: every slot reads as empty */
    tessera_page_slot_head head;
    for (uint32_t i = 0; i < TESSERA_PAGE_SLOTS; i++)
        assert_int_equal(ts_page_snapshot(&pg, i, &head, NULL, NULL), TS_PAGE_EEMPTY);
    assert_int_equal(ts_page_snapshot(&pg, TESSERA_PAGE_SLOTS, &head, NULL, NULL), TS_PAGE_ECORRUPT);
    ts_page_close(&pg);

    ts_statspage_close(p, true);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(errno, ENOENT);
}

static void test_claim_write_snapshot(void **state)
{
    (void)state;
    ts_statspage *p = must_create();
    ts_stats_sink s0, s1;
    assert_int_equal(ts_statspage_claim(p, 0, 0xabc, &s0), 0);
    assert_int_equal(ts_statspage_claim(p, 3, 0xdef, &s1), 1);
    tessera_page_slot *slot1 = ts_statspage_slot(p, 1);
    assert_ptr_equal(s1.stats, &slot1->head.stats);
    assert_ptr_equal(s1.seq, &slot1->head.seq);

    tessera_seq_write_begin(s1.seq);
    tessera_stat_store(&s1.stats->allocated_bytes[TESSERA_POOL_SMALL].current, 1000);
    tessera_stat_store(&s1.stats->allocated_bytes[TESSERA_POOL_LARGE].current, 3 * (int64_t)MiB);
    tessera_stat_store(&s1.stats->allocated_bytes[TESSERA_POOL_ALL].current, 3 * (int64_t)MiB + 1000);
    tessera_stat_store(&s1.stats->num_ooms, 2);
    tessera_stat_store(&s1.stats->max_split_size, -1);
    tessera_seq_write_end(s1.seq);

    ts_page pg;
    ts_page_init(&pg);
    assert_int_equal(ts_page_open_pid(&pg, NULL, (int)getpid()), TS_PAGE_OK);
    tessera_page_slot_head head;
    assert_int_equal(ts_page_snapshot(&pg, 1, &head, NULL, NULL), TS_PAGE_OK);
    assert_int_equal(head.state, TESSERA_SLOT_ACTIVE);
    assert_int_equal(head.device, 3);
    assert_int_equal(head.context_id, 0xdef);
    assert_int_equal(head.seq, 4); /* claim's write section, then ours */
    assert_int_equal(head.stats.allocated_bytes[TESSERA_POOL_ALL].current, 3 * (int64_t)MiB + 1000);
    assert_int_equal(head.stats.num_ooms, 2);
    assert_int_equal(head.stats.max_split_size, -1);
    assert_int_equal(head.map.flags, 0);
    assert_int_equal(ts_page_snapshot(&pg, 0, &head, NULL, NULL), TS_PAGE_OK);
    assert_int_equal(head.device, 0);
    assert_int_equal(head.stats.num_ooms, 0);
    assert_int_equal(ts_page_snapshot(&pg, 2, &head, NULL, NULL), TS_PAGE_EEMPTY);

    /* a writer inside its section: the reader gives up with EBUSY, never a torn copy */
    tessera_seq_write_begin(s1.seq);
    pg.retries = 5;
    assert_int_equal(ts_page_snapshot(&pg, 1, &head, NULL, NULL), TS_PAGE_EBUSY);
    assert_non_null(strstr(pg.error, "sequence lock"));
    tessera_seq_write_end(s1.seq);
    assert_int_equal(ts_page_snapshot(&pg, 1, &head, NULL, NULL), TS_PAGE_OK);
    ts_page_close(&pg);

    /* every slot taken: ENOSPC; a released slot comes back zeroed */
    int got = 2;
    ts_stats_sink s;
    while (ts_statspage_claim(p, 7, (uint64_t)got, &s) >= 0)
        got++;
    assert_int_equal(got, TESSERA_PAGE_SLOTS);
    assert_int_equal(ts_statspage_claim(p, 7, 99, &s), -ENOSPC);
    assert_null(s.stats);
    assert_null(s.seq);
    ts_statspage_release(p, 1);
    assert_int_equal(ts_statspage_claim(p, 5, 0x55, &s), 1);
    assert_int_equal(s.stats->num_ooms, 0);
    assert_int_equal(s.stats->allocated_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(ts_statspage_claim(p, -1, 0, &s), -EINVAL);
    ts_statspage_close(p, true);
}

static void test_create_conflicts(void **state)
{
    (void)state;
    ts_statspage *p = must_create();
    char err[512];
    ts_statspage *q = NULL;
    assert_int_equal(ts_statspage_create(NULL, NULL, &q, err, sizeof err), EEXIST);
    assert_null(q);
    assert_non_null(strstr(err, "already published by this process"));
    ts_statspage_close(p, true);

    /* a directory that does not exist: a clean error */
    assert_int_equal(ts_statspage_create("/nonexistent/tessera", NULL, &q, err, sizeof err), ENOENT);
    assert_non_null(strstr(err, "cannot create /nonexistent/tessera/tessera."));
    assert_null(q);

    char path[512];
    page_path(path, sizeof path, (int)getpid());
    /* a symbolic link at our name is never followed nor removed */
    char target[300];
    snprintf(target, sizeof target, "%s/target", dir);
    write_bytes(target, "keep", 4);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(ts_statspage_create(NULL, NULL, &q, err, sizeof err), EEXIST);
    assert_non_null(strstr(err, "not a regular file"));
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_size, 4);
    unlink(path);

    /* a file that is not a tessera page is left alone */
    write_bytes(path, "something else entirely", 23);
    assert_int_equal(ts_statspage_create(NULL, NULL, &q, err, sizeof err), EEXIST);
    assert_non_null(strstr(err, "not a tessera stats page"));
    unlink(path);
}

static void test_create_replaces_stale(void **state)
{
    (void)state;
    char path[512];
    page_path(path, sizeof path, (int)getpid());
    unsigned char *buf = page_bytes();
    /* an earlier process that had our pid (other start time) */
    hdr_of(buf)->start_time_ticks += 999;
    write_bytes(path, buf, TOTAL);
    ts_statspage *p = must_create();
    ts_page pg;
    ts_page_init(&pg);
    assert_int_equal(ts_page_open(&pg, path), TS_PAGE_OK);
    assert_int_equal(pg.hdr.start_time_ticks + 999, hdr_of(buf)->start_time_ticks);
    ts_page_close(&pg);
    ts_statspage_close(p, true);

    /* a page whose creation never finished (magic 0), and an empty file */
    hdr_of(buf)->magic = 0;
    write_bytes(path, buf, TOTAL);
    p = must_create();
    ts_statspage_close(p, true);
    write_bytes(path, buf, 0);
    p = must_create();
    ts_statspage_close(p, true);

    /* same pid number, but from a process of another pid namespace: not ours to replace */
    hdr_of(buf)->magic = TESSERA_PAGE_MAGIC;
    hdr_of(buf)->pid_namespace = 1;
    write_bytes(path, buf, TOTAL);
    char err[512];
    ts_statspage *q = NULL;
    assert_int_equal(ts_statspage_create(NULL, NULL, &q, err, sizeof err), EEXIST);
    assert_non_null(strstr(err, "another pid namespace"));
    unlink(path);
    free(buf);
}

/* ---- maps ---- */

struct walk_spec {
    uint32_t nsegs;
    uint32_t blocks_per_seg;
};

static void walk_many(void *ctx, const ts_walker *w)
{
    const struct walk_spec *sp = ctx;
    for (uint32_t i = 0; i < sp->nsegs; i++) {
        ts_segment_info si = {.addr = 0x10000000u + (uintptr_t)i * 0x100000u,
                              .size = (size_t)sp->blocks_per_seg * 512, .mapped = 0,
                              .small_pool = (i & 1) != 0, .kind = TS_SEGMENT_PLAIN, .stream = i,
                              .nblocks = sp->blocks_per_seg};
        si.mapped = si.size;
        if (w->segment(w->user, &si))
            return;
        for (uint32_t b = 0; b < sp->blocks_per_seg; b++) {
            ts_block_info bi = {.addr = si.addr + b * 512u, .size = 512,
                                .state = (b % 3 == 1) ? TS_BLOCK_FREE : TS_BLOCK_ALLOCATED};
            if (w->block(w->user, &si, &bi))
                return;
        }
    }
}

/* 3 segments: [A 4M][F 2M][P 1M][F 1M] | [U 8M] expandable | [A 2M] stitched */
static void walk_known(void *ctx, const ts_walker *w)
{
    (void)ctx;
    static const struct {
        size_t size;
        ts_block_state st;
    } b0[] = {{4 * MiB, TS_BLOCK_ALLOCATED}, {2 * MiB, TS_BLOCK_FREE}, {1 * MiB, TS_BLOCK_PENDING},
              {1 * MiB, TS_BLOCK_FREE}};
    ts_segment_info s0 = {.addr = 0x7000000, .size = 8 * MiB, .mapped = 8 * MiB,
                          .kind = TS_SEGMENT_PLAIN, .stream = 1, .nblocks = 4};
    w->segment(w->user, &s0);
    for (int i = 0; i < 4; i++) {
        ts_block_info bi = {.size = b0[i].size, .state = b0[i].st};
        w->block(w->user, &s0, &bi);
    }
    ts_segment_info s1 = {.addr = 0x9000000, .size = 8 * MiB, .mapped = 0,
                          .kind = TS_SEGMENT_EXPANDABLE, .nblocks = 1};
    w->segment(w->user, &s1);
    ts_block_info u = {.size = 8 * MiB, .state = TS_BLOCK_UNMAPPED};
    w->block(w->user, &s1, &u);
    ts_segment_info s2 = {.addr = 0xb000000, .size = 2 * MiB, .mapped = 2 * MiB, .small_pool = true,
                          .kind = TS_SEGMENT_STITCHED, .nblocks = 1};
    w->segment(w->user, &s2);
    ts_block_info a = {.size = 2 * MiB, .state = TS_BLOCK_ALLOCATED};
    w->block(w->user, &s2, &a);
}

struct snap {
    tessera_page_slot_head head;
    tessera_page_segment segs[TESSERA_PAGE_MAX_SEGMENTS];
    tessera_page_block blocks[TESSERA_PAGE_MAX_BLOCKS];
};

static int snap_self(int slot, struct snap *s, char *err, size_t errlen)
{
    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_pid(&pg, NULL, (int)getpid());
    if (st == TS_PAGE_OK)
        st = ts_page_snapshot(&pg, (uint32_t)slot, &s->head, s->segs, s->blocks);
    snprintf(err, errlen, "%s", pg.error);
    ts_page_close(&pg);
    return st;
}

static void test_publish_map(void **state)
{
    (void)state;
    ts_statspage *p = must_create();
    ts_stats_sink sink;
    int slot = ts_statspage_claim(p, 2, 0x22, &sink);
    assert_int_equal(slot, 0);
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->num_ops, 321);
    tessera_seq_write_end(sink.seq);
    uint64_t seq_before = *sink.seq;
    ts_statspage_publish_walk(p, slot, walk_known, NULL);
    assert_int_equal(*sink.seq, seq_before + 2);

    struct snap *s = malloc(sizeof *s);
    char err[320];
    assert_int_equal(snap_self(slot, s, err, sizeof err), TS_PAGE_OK);
    const tessera_page_map *m = &s->head.map;
    assert_int_equal(m->flags, TESSERA_MAP_VALID);
    assert_int_equal(m->ops, 321);
    assert_int_equal(m->nsegments, 3);
    assert_int_equal(m->total_segments, 3);
    assert_int_equal(m->nblocks, 6);
    assert_int_equal(m->total_blocks, 6);
    assert_int_equal(m->largest_free, 2 * MiB);
    assert_int_equal(m->free_bytes, 3 * MiB);
    assert_int_equal(m->free_blocks, 2);
    assert_int_equal(m->pending_bytes, 1 * MiB);
    assert_int_equal(m->allocated_bytes, 6 * MiB);
    assert_int_equal(m->unmapped_bytes, 8 * MiB);
    assert_int_equal(m->segment_bytes, 18 * MiB);
    assert_int_equal(m->mapped_bytes, 10 * MiB);
    assert_int_equal(m->checksum, tessera_page_map_checksum(m, s->segs, s->blocks));
    assert_int_equal(s->head.stats.largest_free_block_bytes, 0); /* the allocator's, untouched */
    assert_int_equal(s->head.stats.num_ops, 321);
    assert_int_equal(s->segs[0].address, 0x7000000);
    assert_int_equal(s->segs[0].pool, TESSERA_POOL_LARGE);
    assert_int_equal(s->segs[0].kind, TESSERA_SEGMENT_PLAIN);
    assert_int_equal(s->segs[0].stream, 1);
    assert_int_equal(s->segs[0].first_block, 0);
    assert_int_equal(s->segs[0].nblocks, 4);
    assert_int_equal(s->segs[1].kind, TESSERA_SEGMENT_EXPANDABLE);
    assert_int_equal(s->segs[1].mapped, 0);
    assert_int_equal(s->segs[1].first_block, 4);
    assert_int_equal(s->segs[2].pool, TESSERA_POOL_SMALL);
    assert_int_equal(s->segs[2].kind, TESSERA_SEGMENT_STITCHED);
    assert_int_equal(s->blocks[2].state, TESSERA_BLOCK_PENDING);
    assert_int_equal(s->blocks[2].size, 1 * MiB);
    assert_int_equal(s->blocks[4].state, TESSERA_BLOCK_UNMAPPED);

    /* called from inside the allocator's own write section: joins it (parity unchanged) */
    tessera_seq_write_begin(sink.seq);
    uint64_t odd = *sink.seq;
    struct walk_spec few = {2, 3};
    ts_statspage_publish_walk(p, slot, walk_many, &few);
    assert_int_equal(*sink.seq, odd);
    tessera_seq_write_end(sink.seq);
    assert_int_equal(snap_self(slot, s, err, sizeof err), TS_PAGE_OK);
    assert_int_equal(s->head.map.nsegments, 2);
    assert_int_equal(s->head.map.nblocks, 6);

    /* too many segments: the first 512 are kept, the totals cover all, flagged truncated */
    struct walk_spec many = {600, 2};
    ts_statspage_publish_walk(p, slot, walk_many, &many);
    assert_int_equal(snap_self(slot, s, err, sizeof err), TS_PAGE_OK);
    assert_int_equal(s->head.map.flags, TESSERA_MAP_VALID | TESSERA_MAP_TRUNCATED);
    assert_int_equal(s->head.map.nsegments, TESSERA_PAGE_MAX_SEGMENTS);
    assert_int_equal(s->head.map.total_segments, 600);
    assert_int_equal(s->head.map.nblocks, 2 * TESSERA_PAGE_MAX_SEGMENTS);
    assert_int_equal(s->head.map.total_blocks, 1200);
    assert_int_equal(s->head.map.free_blocks, 600);

    /* too many blocks in one segment: the segment says how many were recorded */
    struct walk_spec wide = {2, 3000};
    ts_statspage_publish_walk(p, slot, walk_many, &wide);
    assert_int_equal(snap_self(slot, s, err, sizeof err), TS_PAGE_OK);
    assert_true(s->head.map.flags & TESSERA_MAP_TRUNCATED);
    assert_int_equal(s->head.map.nblocks, TESSERA_PAGE_MAX_BLOCKS);
    assert_int_equal(s->head.map.total_blocks, 6000);
    assert_int_equal(s->segs[0].nblocks, 3000);
    assert_int_equal(s->segs[1].nblocks, TESSERA_PAGE_MAX_BLOCKS - 3000);
    assert_int_equal(s->segs[1].nblocks_total, 3000);

    /* the observer argument stands for (page, slot) */
    ts_statspage *tp = NULL;
    assert_int_equal(ts_statspage_observer_target(ts_statspage_observer_user(p, slot), &tp), slot);
    assert_ptr_equal(tp, p);
    assert_null(ts_statspage_observer_user(p, 99));
    free(s);
    ts_statspage_close(p, true);
}

/* ---- validation of damaged pages ---- */

static void expect_parse(const unsigned char *buf, size_t len, int status, const char *msg)
{
    ts_page pg;
    int st = ts_page_parse(&pg, buf, len);
    if (st != status || (msg && !strstr(pg.error, msg)))
        fprintf(stderr, "parse gave %d '%s', expected %d '%s'\n", st, pg.error, status,
                msg ? msg : "");
    assert_int_equal(st, status);
    if (msg)
        assert_non_null(strstr(pg.error, msg));
}

static void test_parse_damaged_headers(void **state)
{
    (void)state;
    unsigned char *good = page_bytes();
    unsigned char *buf = malloc(TOTAL + 8);
    if (!buf)
        abort(); /* (not assert_non_null: gcc would then see a NULL path below) */
#define RESET() memcpy(buf, good, TOTAL)
    RESET();
    expect_parse(buf, TOTAL, TS_PAGE_OK, NULL);
    memmove(buf + 1, buf, TOTAL); /* unaligned buffers are fine */
    expect_parse(buf + 1, TOTAL, TS_PAGE_OK, NULL);
    RESET();
    expect_parse(buf, 0, TS_PAGE_ETRUNCATED, "empty file");
    expect_parse(NULL, 100, TS_PAGE_ETRUNCATED, "empty file");
    expect_parse(buf, 5, TS_PAGE_ETRUNCATED, "truncated");
    expect_parse(buf, 100, TS_PAGE_ETRUNCATED, "identity prefix needs 128");
    expect_parse(buf, 1000, TS_PAGE_ETRUNCATED, "1000 bytes, the header alone needs 4096");
    expect_parse(buf, TOTAL - 1, TS_PAGE_ETRUNCATED, "the header says 1511424");
    memcpy(&hdr_of(buf)->magic, "GGUF\3\0\0\0", 8);
    expect_parse(buf, TOTAL, TS_PAGE_EFOREIGN, "not a tessera stats page (magic 0x");
    RESET();
    hdr_of(buf)->magic = 0;
    expect_parse(buf, TOTAL, TS_PAGE_ENOTREADY, "magic is 0");
    RESET();
    hdr_of(buf)->layout_version = 7;
    expect_parse(buf, 200, TS_PAGE_ENEWER,
                 "written by a newer tessera (layout 7, this reader understands up to 3)");
    {
        ts_page pg;
        assert_int_equal(ts_page_parse(&pg, buf, 200), TS_PAGE_ENEWER);
        assert_int_equal(pg.have_identity, 1); /* staleness can still be judged */
        assert_int_equal(pg.hdr.pid, getpid());
    }
    RESET();
    hdr_of(buf)->layout_version = 1;
    expect_parse(buf, 200, TS_PAGE_EOLDER,
                 "written by an older tessera (layout 1; this reader reads layouts 2 to 3");
    {
        ts_page pg;
        assert_int_equal(ts_page_parse(&pg, buf, 200), TS_PAGE_EOLDER);
        assert_int_equal(pg.have_identity, 1);
    }
    RESET();
    /* layout 2 (no control channel, no device UUIDs) still reads, as a page without them */
    hdr_of(buf)->layout_version = 2;
    expect_parse(buf, TOTAL, TS_PAGE_OK, NULL);
    RESET();
    hdr_of(buf)->layout_version = 0;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "layout version 0");
    RESET();
    hdr_of(buf)->pid = -5;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "pid -5");
    RESET();
    hdr_of(buf)->header_size = 8192;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "header size 8192");
    RESET();
    hdr_of(buf)->slot_size = 4096;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "slot size 4096");
    RESET();
    hdr_of(buf)->slot_count = 0;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "slot count 0");
    RESET();
    hdr_of(buf)->slot_count = 65;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "slot count 65");
    RESET();
    hdr_of(buf)->slot_count = 1; /* fewer slots is fine once total_size agrees */
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "total size");
    hdr_of(buf)->total_size = TESSERA_PAGE_HEADER_SIZE + TESSERA_PAGE_SLOT_SIZE;
    expect_parse(buf, TESSERA_PAGE_HEADER_SIZE + TESSERA_PAGE_SLOT_SIZE, TS_PAGE_OK, NULL);
    RESET();
    hdr_of(buf)->max_blocks = 10;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "map limits");
    RESET();
    hdr_of(buf)->stats_words = 1000;
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "1000 counter words");
    RESET();
    memset(hdr_of(buf)->cmdline, 'A', sizeof hdr_of(buf)->cmdline);
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "not terminated");
    RESET();
    memset(hdr_of(buf)->boot_id, 'b', sizeof hdr_of(buf)->boot_id);
    expect_parse(buf, TOTAL, TS_PAGE_ECORRUPT, "boot id not terminated");

    /* a file name that disagrees with the page */
    RESET();
    char path[512];
    page_path(path, sizeof path, 12345);
    write_bytes(path, buf, TOTAL);
    ts_page pg;
    ts_page_init(&pg);
    assert_int_equal(ts_page_open(&pg, path), TS_PAGE_ECORRUPT);
    assert_non_null(strstr(pg.error, "the file name says pid 12345"));
    ts_page_close(&pg);
    unlink(path);
    /* missing, directory, symlink */
    assert_int_equal(ts_page_open(&pg, path), TS_PAGE_ENOENT);
    assert_int_equal(ts_page_open(&pg, dir), TS_PAGE_EIO);
    assert_non_null(strstr(pg.error, "not a regular file"));
    assert_int_equal(symlink("/etc/passwd", path), 0);
    assert_int_equal(ts_page_open(&pg, path), TS_PAGE_EIO);
    assert_non_null(strstr(pg.error, "symbolic link"));
    unlink(path);
#undef RESET
    free(buf);
    free(good);
}

static void expect_slot(const tessera_page_header *h, const struct snap *s, int status,
                        const char *msg)
{
    char err[320] = "";
    int st = ts_page_validate_slot(h, &s->head, s->segs, s->blocks, err, sizeof err);
    if (st != status || (msg && !strstr(err, msg)))
        fprintf(stderr, "validate gave %d '%s', expected %d '%s'\n", st, err, status, msg ? msg : "");
    assert_int_equal(st, status);
    if (msg)
        assert_non_null(strstr(err, msg));
}

static void test_validate_slots(void **state)
{
    (void)state;
    ts_statspage *p = must_create();
    ts_stats_sink sink;
    int slot = ts_statspage_claim(p, 0, 1, &sink);
    ts_statspage_publish_walk(p, slot, walk_known, NULL);
    struct snap *good = malloc(sizeof *good), *s = malloc(sizeof *s);
    char err[320];
    assert_int_equal(snap_self(slot, good, err, sizeof err), TS_PAGE_OK);
    tessera_page_header h;
    memset(&h, 0, sizeof h);
    h.max_segments = TESSERA_PAGE_MAX_SEGMENTS;
    h.max_blocks = TESSERA_PAGE_MAX_BLOCKS;
#define RESET() memcpy(s, good, sizeof *s)
    RESET();
    expect_slot(&h, s, TS_PAGE_OK, NULL);
    s->head.state = TESSERA_SLOT_CLAIMING;
    expect_slot(&h, s, TS_PAGE_EEMPTY, NULL);
    s->head.state = 77;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "slot state 77");
    RESET();
    s->head.device = -1;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "device -1");
    RESET();
    s->head.map.nsegments = TESSERA_PAGE_MAX_SEGMENTS + 1;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "map holds 513 segments");
    RESET();
    s->head.map.nblocks = 5;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "not marked truncated");
    RESET();
    s->segs[1].first_block = 3;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "segment 1 starts at block 3, expected 4");
    RESET();
    s->segs[0].nblocks = 5;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "segment 0 records more blocks than it has");
    RESET();
    s->segs[2].pool = 0;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "segment 2 pool 0");
    RESET();
    s->segs[2].kind = 3;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "segment 2 kind 3");
    RESET();
    s->segs[0].mapped = s->segs[0].size + 1;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "maps more than its size");
    RESET();
    s->blocks[3].state = TESSERA_BLOCK_STATE_COUNT;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "block 3 state 5");
    RESET();
    s->blocks[3].state = TESSERA_BLOCK_LENT; /* the last known state is valid */
    s->head.map.checksum = 0;
    s->head.map.checksum = tessera_page_map_checksum(&s->head.map, s->segs, s->blocks);
    expect_slot(&h, s, TS_PAGE_OK, NULL);
    RESET();
    s->blocks[3].size ^= 1;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "checksum mismatch");
    RESET();
    s->head.map.largest_free = s->head.map.free_bytes + 1;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "largest free block above the free total");
    RESET();
    s->head.map.flags = 0;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "entries in an unpublished map");
    RESET();
    s->head.map.total_segments = 2;
    s->head.map.flags |= TESSERA_MAP_TRUNCATED;
    expect_slot(&h, s, TS_PAGE_ECORRUPT, "more than its totals");
#undef RESET
    free(s);
    free(good);
    ts_statspage_close(p, true);
}

/* ---- liveness ---- */

static void test_owner_state(void **state)
{
    (void)state;
    unsigned char *buf = page_bytes();
    tessera_page_header *h = hdr_of(buf);
    char why[256];
    assert_int_equal(ts_page_owner_state(h, why, sizeof why), TS_OWNER_LIVE);
    assert_non_null(strstr(why, "is running"));

    tessera_page_header x = *h;
    x.start_time_ticks += 1;
    assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_PID_REUSED);
    assert_non_null(strstr(why, "now belongs to another process"));

    x = *h;
    snprintf(x.boot_id, sizeof x.boot_id, "not-this-boot");
    assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_REBOOTED);
    assert_non_null(strstr(why, "reboot"));

    x = *h;
    x.pid = dead_pid();
    assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_DEAD);
    assert_non_null(strstr(why, "is gone"));

    x = *h;
    x.pid_namespace ^= 1;
    if (ts_pid_namespace_in_use(x.pid_namespace) == 0) {
        /* root in the initial namespace sees that no process is left in it: provably dead */
        assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_DEAD);
        assert_non_null(strstr(why, "no process is left in its pid namespace"));
    } else {
        assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_UNKNOWN);
        assert_non_null(strstr(why, "another pid namespace"));
    }
    x.pid_namespace = ts_pid_namespace("1"); /* init's: alive, whatever this reader's is */
    if (x.pid_namespace && x.pid_namespace != h->pid_namespace)
        assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_UNKNOWN);

    /* a zombie (exited, not reaped) is dead too, whatever its start time */
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t c = fork();
    if (c == 0) {
        close(pfd[0]);
        _exit(0);
    }
    close(pfd[1]);
    char ch;
    assert_int_equal(read(pfd[0], &ch, 1), 0); /* the child has exited */
    close(pfd[0]);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    assert_int_equal(waitid(P_PID, (id_t)c, &si, WEXITED | WNOWAIT), 0); /* zombie, not reaped */
    x = *h;
    x.pid = (int32_t)c;
    assert_int_equal(ts_proc_stat((int)c, NULL, &x.start_time_ticks), 0);
    assert_int_equal(ts_page_owner_state(&x, why, sizeof why), TS_OWNER_DEAD);
    assert_non_null(strstr(why, "not yet reaped"));
    waitpid(c, NULL, 0);
    free(buf);
}

static void test_list_names(void **state)
{
    (void)state;
    const char *names[] = {"tessera.42", "tessera.7", "tessera.0", "tessera.007", "tessera.12x",
                           "tessera.", "tessera.99999999999", "other.5", ".tessera-gc.1.2"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        write_bytes(path, "x", 1);
    }
    int *pids;
    size_t n;
    assert_int_equal(ts_page_list(dir, &pids, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(pids[0], 7);
    assert_int_equal(pids[1], 42);
    free(pids);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    assert_int_equal(ts_page_list("/nonexistent/x", &pids, &n), ENOENT);
}

struct gc_log {
    int removed[16];
    int nremoved;
    int kept;
};

static void gc_cb(void *user, const char *name, int pid, int removed, const char *why)
{
    struct gc_log *g = user;
    (void)why;
    (void)name;
    if (removed && g->nremoved < 16)
        g->removed[g->nremoved++] = pid;
    if (!removed)
        g->kept++;
}

static bool was_removed(const struct gc_log *g, int pid)
{
    for (int i = 0; i < g->nremoved; i++)
        if (g->removed[i] == pid)
            return true;
    return false;
}

static void test_gc(void **state)
{
    (void)state;
    unsigned char *buf = page_bytes();
    tessera_page_header *h = hdr_of(buf);
    char path[512];
    ts_statspage *live = must_create(); /* our own page: live */
    int dead = dead_pid(), dead2 = dead_pid(), dead3 = dead_pid(), dead4 = dead_pid();
    int parent = (int)getppid();

    h->pid = dead; /* owner gone */
    page_path(path, sizeof path, dead);
    write_bytes(path, buf, TOTAL);

    h->pid = parent; /* pid reused: a live pid, another start time */
    uint64_t pstart = 0;
    assert_int_equal(ts_proc_stat(parent, NULL, &pstart), 0);
    h->start_time_ticks = pstart + 1;
    page_path(path, sizeof path, parent);
    write_bytes(path, buf, TOTAL);

    h->magic = 0; /* creation never finished, long ago, owner gone */
    page_path(path, sizeof path, dead2);
    write_bytes(path, buf, TOTAL);
    chmod(path, 0); /* a page has mode 0000 until published */
    struct utimbuf old = {time(NULL) - 60, time(NULL) - 60};
    utime(path, &old);
    page_path(path, sizeof path, dead3); /* ... the same, but just now: maybe being created */
    write_bytes(path, buf, TOTAL);
    chmod(path, 0);
    h->magic = TESSERA_PAGE_MAGIC;

    page_path(path, sizeof path, dead4); /* not a tessera page: never touched */
    write_bytes(path, "hello, not a page", 17);

    /* a page moved aside by a collector that died half-way */
    h->pid = dead;
    char aside[512];
    snprintf(aside, sizeof aside, "%s/.tessera-gc.%d.%d", dir, dead2, dead);
    write_bytes(aside, buf, TOTAL);

    /* history rings: of a page collected now, of a process with no page left, of a half-done
     * collection; kept: of the live page, of a page that stays (dead3, dead4), odd names */
    char ring[512];
    const int rings_gone[] = {dead, dead2}, rings_kept[] = {(int)getpid(), dead3, dead4};
    for (unsigned i = 0; i < 2; i++) {
        snprintf(ring, sizeof ring, "%s/tessera.%d.history.%u", dir, rings_gone[i], i);
        write_ring(ring, rings_gone[i], i);
    }
    for (unsigned i = 0; i < 3; i++) {
        snprintf(ring, sizeof ring, "%s/tessera.%d.history.0", dir, rings_kept[i]);
        write_ring(ring, rings_kept[i], 0);
    }
    snprintf(ring, sizeof ring, "%s/.tessera-gc.%d.%d.history.3", dir, dead4, dead2);
    write_ring(ring, dead2, 3);
    /* a file with a ring's name but not a ring's content, of a gone process: kept */
    snprintf(ring, sizeof ring, "%s/tessera.%d.history.5", dir, dead);
    write_bytes(ring, "ring", 4);
    static const char *const odd[] = {"history.x", "history.01", "history.16", "history.1.bak"};
    for (unsigned i = 0; i < 4; i++) {
        snprintf(ring, sizeof ring, "%s/tessera.%d.%s", dir, dead2, odd[i]);
        write_bytes(ring, "ring", 4);
    }

    struct gc_log g = {{0}, 0, 0};
    int n = ts_page_gc(dir, gc_cb, &g);
    assert_int_equal(n, 7);
    assert_int_equal(g.nremoved, 7);
    for (unsigned i = 0; i < 2; i++) {
        snprintf(ring, sizeof ring, "%s/tessera.%d.history.%u", dir, rings_gone[i], i);
        assert_int_equal(access(ring, F_OK), -1);
    }
    snprintf(ring, sizeof ring, "%s/.tessera-gc.%d.%d.history.3", dir, dead4, dead2);
    assert_int_equal(access(ring, F_OK), -1);
    for (unsigned i = 0; i < 3; i++) {
        snprintf(ring, sizeof ring, "%s/tessera.%d.history.0", dir, rings_kept[i]);
        assert_int_equal(access(ring, F_OK), 0);
        if (i > 0)
            unlink(ring); /* the test's own */
    }
    snprintf(ring, sizeof ring, "%s/tessera.%d.history.5", dir, dead);
    assert_int_equal(access(ring, F_OK), 0);
    unlink(ring);
    for (unsigned i = 0; i < 4; i++) {
        snprintf(ring, sizeof ring, "%s/tessera.%d.%s", dir, dead2, odd[i]);
        assert_int_equal(access(ring, F_OK), 0);
        unlink(ring);
    }
    assert_true(was_removed(&g, dead));
    assert_true(was_removed(&g, parent));
    assert_true(was_removed(&g, dead2));
    assert_int_equal(g.kept, 0);
    page_path(path, sizeof path, (int)getpid());
    assert_int_equal(access(path, F_OK), 0);
    page_path(path, sizeof path, dead3);
    assert_int_equal(access(path, F_OK), 0);
    page_path(path, sizeof path, dead4);
    assert_int_equal(access(path, F_OK), 0);
    page_path(path, sizeof path, dead);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(aside, F_OK), -1);

    /* a second pass finds nothing more */
    memset(&g, 0, sizeof g);
    assert_int_equal(ts_page_gc(dir, gc_cb, &g), 0);
    page_path(path, sizeof path, dead3);
    unlink(path);
    page_path(path, sizeof path, dead4);
    unlink(path);
    snprintf(ring, sizeof ring, "%s/tessera.%d.history.0", dir, (int)getpid());
    unlink(ring);
    ts_statspage_close(live, true);
    assert_int_equal(ts_page_gc("/nonexistent/x", NULL, NULL), -ENOENT);
    free(buf);
}

/* ---- a page that comes alive while being collected ---- */

/* rename(2) as --gc calls it, with a hook run just before the move: the statspage code is a
 * static library, so this definition is the one it links against. The hook fires once, for the
 * move of `gc_watch` aside (the only rename --gc makes of a page). */
static const char *gc_watch;
static void (*gc_before_move)(const char *path);

int rename(const char *from, const char *to)
{
    if (gc_watch && strcmp(from, gc_watch) == 0 && strstr(to, "/.tessera-gc.")) {
        void (*fn)(const char *) = gc_before_move;
        gc_watch = NULL;
        gc_before_move = NULL;
        fn(from);
    }
    return renameat(AT_FDCWD, from, AT_FDCWD, to);
}

static unsigned char *live_bytes; /* the page made live: the right start time */

/* The owner fixes its page in place (same file): it is live from now on. */
static void revive_in_place(const char *path)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, live_bytes, TOTAL, 0), (ssize_t)TOTAL);
    close(fd);
}

/* The pid's owner publishes a new page under the name (another file). */
static void replace_with_live(const char *path)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    write_bytes(tmp, live_bytes, TOTAL);
    assert_int_equal(renameat(AT_FDCWD, tmp, AT_FDCWD, path), 0);
}

/* --gc judges a page stale, then the page comes alive before it is moved aside: the judgement
 * made after the move keeps it (in place, or replaced by a new file). Fails if --gc removes the
 * moved-aside file on the first judgement alone. */
static void test_gc_rejudges_after_move(void **state)
{
    (void)state;
    unsigned char *buf = page_bytes();
    tessera_page_header *h = hdr_of(buf);
    int parent = (int)getppid();
    uint64_t pstart = 0;
    assert_int_equal(ts_proc_stat(parent, NULL, &pstart), 0);
    h->pid = parent;
    h->start_time_ticks = pstart;
    live_bytes = malloc(TOTAL);
    if (!live_bytes)
        abort();
    memcpy(live_bytes, buf, TOTAL);
    h->start_time_ticks = pstart + 1; /* as first seen: the pid belongs to another process */

    char path[512];
    page_path(path, sizeof path, parent);
    void (*const hooks[])(const char *) = {revive_in_place, replace_with_live};
    for (unsigned i = 0; i < 2; i++) {
        write_bytes(path, buf, TOTAL);
        gc_watch = path;
        gc_before_move = hooks[i];
        struct gc_log g = {{0}, 0, 0};
        assert_int_equal(ts_page_gc(dir, gc_cb, &g), 0);
        assert_null(gc_watch); /* the hook ran: --gc did move the page */
        assert_int_equal(g.nremoved, 0);
        assert_int_equal(g.kept, 1);
        /* the live page is back under its name, whole */
        unsigned char *now = malloc(TOTAL);
        if (!now)
            abort();
        int fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, now, TOTAL, 0), (ssize_t)TOTAL);
        close(fd);
        assert_memory_equal(now, live_bytes, TOTAL);
        free(now);
        /* nothing left aside */
        char aside[512];
        snprintf(aside, sizeof aside, "%s/.tessera-gc.%d.%d", dir, (int)getpid(), parent);
        assert_int_equal(access(aside, F_OK), -1);
        unlink(path);
    }
    free(live_bytes);
    live_bytes = NULL;
    free(buf);
}

/* ---- fork and close ---- */

static void test_forget_in_child(void **state)
{
    (void)state;
    ts_statspage *p = must_create();
    ts_stats_sink sink;
    int slot = ts_statspage_claim(p, 0, 1, &sink);
    assert_int_equal(slot, 0);
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->num_ops, 111);
    tessera_seq_write_end(sink.seq);
    char path[512];
    snprintf(path, sizeof path, "%s", ts_statspage_path(p));

    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        ts_statspage_forget(p);
        /* a copy of an allocator still writing through its sink: lands in private memory */
        tessera_seq_write_begin(sink.seq);
        tessera_stat_store(&sink.stats->num_ops, 999);
        tessera_seq_write_end(sink.seq);
        ts_statspage_publish_walk(p, slot, walk_known, NULL); /* a no-op now */
        ts_stats_sink s2;
        int ok = ts_statspage_claim(p, 1, 2, &s2) == -ESTALE && access(path, F_OK) == 0 &&
                 ts_statspage_slot(p, 0) == NULL;
        /* the child may publish its own page */
        char err[256];
        ts_statspage *mine = NULL;
        ok = ok && ts_statspage_create(NULL, NULL, &mine, err, sizeof err) == 0;
        ts_statspage_close(mine, true);
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    struct snap *s = malloc(sizeof *s);
    char err[320];
    assert_int_equal(snap_self(slot, s, err, sizeof err), TS_PAGE_OK);
    assert_int_equal(s->head.stats.num_ops, 111);
    assert_int_equal(s->head.map.flags, 0);
    char child_page[512];
    page_path(child_page, sizeof child_page, (int)c);
    assert_int_equal(access(child_page, F_OK), -1);

    /* close without removing: the file stays, marked closed; late writes are harmless */
    ts_statspage_close(p, false);
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->num_ops, 222);
    tessera_seq_write_end(sink.seq);
    ts_page pg;
    ts_page_init(&pg);
    assert_int_equal(ts_page_open(&pg, path), TS_PAGE_OK);
    assert_int_equal(pg.hdr.flags & TESSERA_PAGE_FLAG_CLOSED, TESSERA_PAGE_FLAG_CLOSED);
    assert_int_equal(ts_page_snapshot(&pg, 0, &s->head, NULL, NULL), TS_PAGE_OK);
    assert_int_equal(s->head.stats.num_ops, 111);
    ts_page_close(&pg);
    unlink(path);
    ts_statspage_close(NULL, true);
    ts_statspage_forget(NULL);
    free(s);
}

/* ---- outputs details the CLI test cannot reach easily ---- */

static char *render(void (*fn)(FILE *, const ts_proc_view *, size_t), const ts_proc_view *v)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    fn(f, v, 1);
    fclose(f);
    return text;
}

static void table_fn(FILE *f, const ts_proc_view *v, size_t n)
{
    ts_render_table(f, v, n, dir);
}

static void test_render_details(void **state)
{
    (void)state;
    char b[48];
    assert_string_equal(ts_format_bytes(b, sizeof b, 0), "0 B");
    assert_string_equal(ts_format_bytes(b, sizeof b, 1023), "1023 B");
    assert_string_equal(ts_format_bytes(b, sizeof b, 1024), "1.00 KiB");
    assert_string_equal(ts_format_bytes(b, sizeof b, 1536 * 1024), "1.50 MiB");
    assert_string_equal(ts_format_bytes(b, sizeof b, UINT64_C(2) << 30), "2.00 GiB");
    assert_string_equal(ts_format_bytes(b, sizeof b, UINT64_MAX), "16.00 EiB");

    /* two contexts on one device: told apart by a context label / key */
    ts_statspage *p = must_create();
    ts_stats_sink s0, s1;
    assert_int_equal(ts_statspage_claim(p, 0, 0x10, &s0), 0);
    assert_int_equal(ts_statspage_claim(p, 0, 0x20, &s1), 1);
    tessera_seq_write_begin(s1.seq);
    tessera_stat_store(&s1.stats->reserved_bytes[TESSERA_POOL_ALL].peak, 4 * (int64_t)MiB);
    tessera_stat_store(&s1.stats->allocated_bytes[TESSERA_POOL_ALL].peak, 1 * (int64_t)MiB);
    tessera_seq_write_end(s1.seq);
    ts_proc_view v;
    ts_proc_view_load(&v, NULL, (int)getpid(), true);
    assert_int_equal(v.status, TS_PAGE_OK);
    assert_int_equal(v.owner, TS_OWNER_LIVE);
    assert_int_equal(v.nslots, 2);
    char *prom = render(ts_render_prometheus, &v);
    char want[128];
    snprintf(want, sizeof want, "tessera_ooms_total{pid=\"%d\",device=\"0\",command=", (int)getpid());
    assert_non_null(strstr(prom, want));
    snprintf(want, sizeof want, "tessera_ooms_total{pid=\"%d\",device=\"0\",context=\"0x20\",command=",
             (int)getpid());
    assert_non_null(strstr(prom, want));
    assert_null(strstr(prom, "context=\"0x10\""));
    snprintf(want, sizeof want, "tessera_utilization_ratio{pid=\"%d\",device=\"0\",context=\"0x20\"",
             (int)getpid());
    assert_non_null(strstr(prom, want)); /* only the slot with a reserved peak */
    assert_non_null(strstr(prom, "} 0.25\n"));
    char *json = render(ts_render_json, &v);
    assert_non_null(strstr(json, "\"0\": {"));
    assert_non_null(strstr(json, "\"0/0x20\": {"));
    char *table = render(table_fn, &v);
    assert_non_null(strstr(table, " statspage-test-page "));  /* the directory is dropped */
    assert_null(strstr(table, "/statspage-test-page"));
    assert_non_null(strstr(table, "0/0x20"));
    free(prom);
    free(json);
    free(table);
    ts_proc_view_free(&v);
    ts_statspage_close(p, true);
}

/* Is path mapped read-only into this process (/proc/self/maps): a reader's mapping, beside the
 * writer's own read-write one? */
static bool mapped_here(const char *path)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4608];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t n = strlen(line), m = strlen(path);
        found = n >= m && strcmp(line + n - m, path) == 0 && strstr(line, " r--s ") != NULL;
    }
    fclose(f);
    return found;
}

/* ts_page_map: the caller's own page is read from a read-only mapping (no descriptor kept, the
 * same consistent copies), unmapped on close; another user's page never is (it could shrink
 * under the reader), and stays readable with pread. */
static void test_map_own_page(void **state)
{
    (void)state;
    ts_statspage *p = must_create();
    ts_stats_sink s0;
    assert_int_equal(ts_statspage_claim(p, 0, 0xabc, &s0), 0);
    tessera_seq_write_begin(s0.seq);
    tessera_stat_store(&s0.stats->num_ooms, 7);
    tessera_seq_write_end(s0.seq);
    char path[512];
    page_path(path, sizeof path, (int)getpid());

    ts_page pg;
    ts_page_init(&pg);
    assert_int_equal(ts_page_open_pid(&pg, NULL, (int)getpid()), TS_PAGE_OK);
    assert_false(mapped_here(path));
    assert_int_equal(ts_page_map(&pg), 0);
    assert_true(pg.mapped && pg.fd < 0);
    assert_true(mapped_here(path));
    tessera_page_slot_head head;
    assert_int_equal(ts_page_snapshot(&pg, 0, &head, NULL, NULL), TS_PAGE_OK);
    assert_int_equal(head.stats.num_ooms, 7);
    tessera_seq_write_begin(s0.seq); /* the mapping sees the writer's next numbers */
    tessera_stat_store(&s0.stats->num_ooms, 8);
    tessera_seq_write_end(s0.seq);
    assert_int_equal(ts_page_snapshot(&pg, 0, &head, NULL, NULL), TS_PAGE_OK);
    assert_int_equal(head.stats.num_ooms, 8);
    assert_int_equal(ts_page_map(&pg), EBADF); /* mapped already: no descriptor left */
    ts_page_close(&pg);
    assert_false(mapped_here(path));

    if (geteuid() == 0) { /* another user's file naming this process: never mapped */
        assert_int_equal(chown(path, 65534, 65534), 0);
        ts_page_init(&pg);
        /* its header validates; the trust check refuses it (not this process's user's) */
        assert_int_equal(ts_page_open_pid(&pg, NULL, (int)getpid()), TS_PAGE_EUNTRUSTED);
        assert_int_equal(ts_page_map(&pg), EPERM);
        assert_true(pg.fd >= 0 && !pg.mapped);
        assert_false(mapped_here(path));
        ts_page_close(&pg);
        assert_int_equal(chown(path, 0, 0), 0);
    }
    ts_statspage_close(p, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_publishes_header, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_claim_write_snapshot, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_create_conflicts, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_create_replaces_stale, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_publish_map, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_parse_damaged_headers, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_validate_slots, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_owner_state, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_list_names, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_gc, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_gc_rejudges_after_move, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_forget_in_child, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_render_details, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_map_own_page, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
