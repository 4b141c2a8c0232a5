/* The memory snapshot model (statspage/snapshot.h): one segment per mapped run, frames linked to
 * the history event that made each segment and block, the byte bound cutting links with their
 * events, and snapshot files that never replace a file unasked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "statspage/snapshot.h"

#define MiB (1ull << 20)
#define A0 0x7f0000000000ull

enum { ALLOC = TESSERA_BLOCK_ALLOCATED, PENDING = TESSERA_BLOCK_PENDING,
       FREE = TESSERA_BLOCK_FREE, UNMAPPED = TESSERA_BLOCK_UNMAPPED, LENT = TESSERA_BLOCK_LENT };

static void expect_segment(const ts_snap *s, size_t i, uint64_t addr, uint64_t size,
                           size_t nblocks)
{
    assert_true(i < s->nsegs);
    assert_int_equal(s->segs[i].addr, addr);
    assert_int_equal(s->segs[i].size, size);
    assert_int_equal(s->segs[i].nblocks, nblocks);
    /* the blocks tile it from its address */
    uint64_t at = addr;
    for (size_t k = 0; k < nblocks; k++) {
        assert_int_equal(s->blocks[s->segs[i].first_block + k].addr, at);
        at += s->blocks[s->segs[i].first_block + k].size;
    }
    assert_int_equal(at, addr + size);
}

/* An expandable segment with a hole and a lent run: three snapshot segments. */
static void test_snapshot_runs(void **state)
{
    (void)state;
    ts_snap s;
    ts_snap_init(&s);
    assert_int_equal(ts_snap_add_block(&s, A0, MiB, MiB, ALLOC), EINVAL); /* no segment yet */
    assert_int_equal(ts_snap_add_segment(&s, 0, 7, false, true), 0);
    uint64_t a = A0;
    const struct { uint64_t size; uint32_t state; } b[] = {
        {20 * MiB, ALLOC}, {20 * MiB, FREE},  {80 * MiB, UNMAPPED}, {10 * MiB, PENDING},
        {10 * MiB, FREE},  {20 * MiB, LENT},  {20 * MiB, ALLOC},   {20 * MiB, UNMAPPED},
        {20 * MiB, UNMAPPED}};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        assert_int_equal(ts_snap_add_block(&s, a, b[i].size, b[i].size - 512, b[i].state), 0);
        a += b[i].size;
    }
    assert_int_equal(s.nsegs, 3);
    expect_segment(&s, 0, A0, 40 * MiB, 2);
    expect_segment(&s, 1, A0 + 120 * MiB, 20 * MiB, 2);
    expect_segment(&s, 2, A0 + 160 * MiB, 20 * MiB, 1);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(s.segs[i].stream, 7);
        assert_true(s.segs[i].expandable);
        assert_int_equal(s.segs[i].device, 0);
    }
    /* a segment with nothing mapped is not listed; a new tessera segment starts a new run even
     * right after the last one's end */
    assert_int_equal(ts_snap_add_segment(&s, 0, 0, true, true), 0);
    assert_int_equal(ts_snap_add_block(&s, a, 2 * MiB, 0, UNMAPPED), 0);
    assert_int_equal(s.nsegs, 3);
    assert_int_equal(ts_snap_add_segment(&s, 1, 0, true, false), 0);
    assert_int_equal(ts_snap_add_block(&s, A0 + 180 * MiB, 2 * MiB, 4 * MiB, ALLOC), 0);
    expect_segment(&s, 3, A0 + 180 * MiB, 2 * MiB, 1);
    assert_true(s.segs[3].small_pool);
    assert_false(s.segs[3].expandable);
    assert_int_equal(s.segs[3].device, 1);
    assert_int_equal(s.blocks[s.segs[3].first_block].requested, 2 * MiB); /* at most its size */
    /* a block that does not continue the run (a truncated map) starts its own segment */
    assert_int_equal(ts_snap_add_block(&s, A0 + 190 * MiB, 2 * MiB, 0, FREE), 0);
    expect_segment(&s, 4, A0 + 190 * MiB, 2 * MiB, 1);
    /* an unknown state is a hole, as unmapped */
    assert_int_equal(ts_snap_add_block(&s, A0 + 192 * MiB, 2 * MiB, 0, 9), 0);
    assert_int_equal(ts_snap_add_block(&s, A0 + 194 * MiB, 2 * MiB, 0, FREE), 0);
    expect_segment(&s, 5, A0 + 194 * MiB, 2 * MiB, 1);
    assert_int_equal(s.nsegs, 6);
    ts_snap_free(&s);
}

static tessera_history_event ev(uint32_t action, uint64_t addr, uint64_t size, uint64_t time)
{
    tessera_history_event e;
    memset(&e, 0, sizeof e);
    e.action = action;
    e.addr = addr;
    e.size = size;
    e.time_us = time;
    e.nframes = 2;
    e.frames[0] = 0x1000 + time;
    e.frames[1] = 0x2000 + time;
    return e;
}

static tessera_history_event *events(const tessera_history_event *e, size_t n)
{
    tessera_history_event *c = malloc(n * sizeof *c);
    assert_non_null(c);
    memcpy(c, e, n * sizeof *c);
    return c;
}

/* Which event each segment's and block's frames come from. */
static void test_snapshot_links(void **state)
{
    (void)state;
    ts_snap s;
    ts_snap_init(&s);
    assert_int_equal(ts_snap_add_segment(&s, 0, 0, false, true), 0);
    assert_int_equal(ts_snap_add_block(&s, A0, 4 * MiB, 4 * MiB, ALLOC), 0);          /* b0 */
    assert_int_equal(ts_snap_add_block(&s, A0 + 4 * MiB, 4 * MiB, 4 * MiB, PENDING), 0); /* b1 */
    assert_int_equal(ts_snap_add_block(&s, A0 + 8 * MiB, 12 * MiB, 0, FREE), 0);      /* b2 */
    assert_int_equal(ts_snap_add_block(&s, A0 + 20 * MiB, 20 * MiB, 0, UNMAPPED), 0);
    assert_int_equal(ts_snap_add_block(&s, A0 + 40 * MiB, 20 * MiB, 20 * MiB, ALLOC), 0); /* b3 */
    /* a segment of device 1 at the same addresses: device 0's events are not its own */
    assert_int_equal(ts_snap_add_segment(&s, 1, 0, false, false), 0);
    assert_int_equal(ts_snap_add_block(&s, A0, 2 * MiB, MiB, ALLOC), 0);              /* b4 */
    const tessera_history_event t0[] = {
        ev(TESSERA_EV_SEGMENT_MAP, A0, 40 * MiB, 1),        /* 0: maps both runs' starts */
        ev(TESSERA_EV_ALLOC, A0, 4 * MiB, 2),               /* 1: b0, then freed */
        ev(TESSERA_EV_FREE_REQUESTED, A0, 4 * MiB, 3),
        ev(TESSERA_EV_SEGMENT_UNMAP, A0 + 20 * MiB, 20 * MiB, 4),
        ev(TESSERA_EV_ALLOC, A0, 4 * MiB, 5),               /* 4: b0's own allocation */
        ev(TESSERA_EV_ALLOC, A0 + 4 * MiB, 4 * MiB, 6),     /* 5: b1 */
        ev(TESSERA_EV_ALLOC, A0 + 8 * MiB, 4 * MiB, 7),     /* 6: at b2 (free now): no link */
        ev(TESSERA_EV_SEGMENT_MAP, A0 + 40 * MiB, 20 * MiB, 8), /* 7: the second run's start */
        ev(TESSERA_EV_ALLOC, A0 + 40 * MiB - 512, 512, 9),  /* 8: no block starts there */
        ev(TESSERA_EV_SEGMENT_MAP, A0 + 41 * MiB, UINT64_MAX, 10), /* 9: a forged size */
    };
    assert_int_equal(ts_snap_add_trace(&s, 0, events(t0, 10), 10), 0);
    const tessera_history_event t1[] = {ev(TESSERA_EV_SEGMENT_ALLOC, A0, 2 * MiB, 1),
                                        ev(TESSERA_EV_ALLOC, A0, MiB, 2)};
    assert_int_equal(ts_snap_add_trace(&s, 1, events(t1, 2), 2), 0);
    ts_snap_link(&s);
    assert_true(s.linked);
    assert_int_equal(s.nsegs, 3);
#define ORIGIN(o, t, k) do { assert_int_equal((o).trace, (t)); assert_int_equal((o).index, (k)); } while (0)
    ORIGIN(s.segs[0].origin, 0, 0);
    ORIGIN(s.segs[1].origin, 0, 7); /* the newest map holding its first byte */
    ORIGIN(s.segs[2].origin, 1, 0);
    ORIGIN(s.blocks[0].origin, 0, 4); /* the newest alloc at its address */
    ORIGIN(s.blocks[1].origin, 0, 5); /* pending: still its allocation's */
    assert_int_equal(s.blocks[2].origin.trace, -1); /* free: none */
    assert_int_equal(s.blocks[3].origin.trace, -1); /* no alloc there in the ring */
    ORIGIN(s.blocks[4].origin, 1, 1);

    /* the bound: cutting events takes the links to them away and moves the others. The
     * estimate: 12288 fixed, 400 a segment, 160 a block, and per event 200 plus its 2 frames
     * (82 each) once, and again for each link: 19640 in all; cut oldest first (trace 0 first
     * on a tie) down to 15580: events of time 1 .. 7 of trace 0 and both of trace 1 */
    assert_int_equal(ts_snap_bound(&s, 12288 + 3 * 400 + 5 * 160 + 4 * 200 + 6 * 82), 9);
    assert_int_equal(s.traces[0].nevents, 3);
    assert_int_equal(s.traces[1].nevents, 0);
    assert_int_equal(s.traces[0].events[0].time_us, 8);
    ORIGIN(s.segs[1].origin, 0, 0); /* moved with its event */
    assert_int_equal(s.segs[0].origin.trace, -1); /* gone with theirs */
    assert_int_equal(s.segs[2].origin.trace, -1);
    assert_int_equal(s.blocks[0].origin.trace, -1);
    assert_int_equal(s.blocks[1].origin.trace, -1);
    assert_int_equal(s.blocks[4].origin.trace, -1);
    ts_snap_free(&s);
}

/* Segments added out of address order (a page read slot by slot, say) are linked alike. */
static void test_snapshot_links_out_of_order(void **state)
{
    (void)state;
    ts_snap s;
    ts_snap_init(&s);
    for (int k = 4; k >= 0; k--) {
        assert_int_equal(ts_snap_add_segment(&s, 0, 0, false, false), 0);
        assert_int_equal(ts_snap_add_block(&s, A0 + (uint64_t)k * 20 * MiB, 20 * MiB, MiB, ALLOC),
                         0);
    }
    /* an older map over the first four (its end: the fifth's start), then each of them made */
    tessera_history_event t[9];
    t[0] = ev(TESSERA_EV_SEGMENT_MAP, A0, 80 * MiB, 1);
    for (int k = 0; k < 4; k++) {
        t[1 + 2 * k] = ev(TESSERA_EV_SEGMENT_ALLOC, A0 + (uint64_t)k * 20 * MiB, 20 * MiB, 2);
        t[2 + 2 * k] = ev(TESSERA_EV_ALLOC, A0 + (uint64_t)k * 20 * MiB, MiB, 3);
    }
    assert_int_equal(ts_snap_add_trace(&s, 0, events(t, 9), 9), 0);
    ts_snap_link(&s);
    for (int k = 0; k < 4; k++) { /* segment and block 4 - k are at A0 + k * 20 MiB */
        ORIGIN(s.segs[4 - k].origin, 0, (size_t)(1 + 2 * k)); /* the newest, not the older map */
        ORIGIN(s.blocks[4 - k].origin, 0, (size_t)(2 + 2 * k));
    }
    /* the fifth starts where the older map ends: not made by it */
    assert_int_equal(s.segs[0].origin.trace, -1);
    assert_int_equal(s.blocks[0].origin.trace, -1);
    ts_snap_free(&s);
}

/* The bound keeps the newest events and counts each linked block's frames. */
static void test_snapshot_bound_counts_links(void **state)
{
    (void)state;
    ts_snap s;
    ts_snap_init(&s);
    assert_int_equal(ts_snap_add_segment(&s, 0, 0, false, false), 0);
    tessera_history_event t[64];
    for (int i = 0; i < 64; i++) {
        assert_int_equal(ts_snap_add_block(&s, A0 + (uint64_t)i * MiB, MiB, MiB, ALLOC), 0);
        t[i] = ev(TESSERA_EV_ALLOC, A0 + (uint64_t)i * MiB, MiB, (uint64_t)i + 1);
    }
    assert_int_equal(ts_snap_add_trace(&s, 0, events(t, 64), 64), 0);
    /* each event: 200 + 2 frames of 82, twice (its own and its block's) */
    const uint64_t layout = 12288 + 400 + 64 * 160, per = 200 + 2 * 2 * 82;
    assert_int_equal(ts_snap_bound(&s, layout + 64 * per), 0);
    assert_int_equal(ts_snap_bound(&s, layout + 64 * per - 1), 1);
    assert_int_equal(s.traces[0].nevents, 63);
    assert_int_equal(s.traces[0].events[0].time_us, 2);
    assert_int_equal(s.blocks[0].origin.trace, -1);
    ORIGIN(s.blocks[1].origin, 0, 0);
    ORIGIN(s.blocks[63].origin, 0, 62);
    assert_int_equal(ts_snap_bound(&s, layout + 10 * per), 53);
    assert_int_equal(s.traces[0].nevents, 10);
    ORIGIN(s.blocks[63].origin, 0, 9);
    assert_int_equal(s.blocks[53].origin.trace, -1);
    /* the layout alone over the bound: every event goes, the layout stays whole */
    assert_int_equal(ts_snap_bound(&s, 1), 10);
    assert_int_equal(s.nblocks, 64);
    ts_snap_free(&s);
}

/* allocator_settings: the configuration's values, PyTorch's defaults without one. */
static void test_snapshot_settings(void **state)
{
    (void)state;
    ts_snap s;
    ts_snap_init(&s);
    assert_int_equal(s.settings.max_split_size, -1);
    ts_config cfg;
    assert_int_equal(ts_config_parse(&cfg, "max_split_size_mb:40,garbage_collection_threshold:0.5,"
                                     "roundup_power2_divisions:[64:8,>:2],expandable_segments:True",
                                     "T", TS_CONFIG_STRICT, NULL, NULL, NULL), 0);
    ts_snap_set_settings(&s, &cfg, "max_split_size_mb:40,\x01\xff");
    assert_int_equal(s.settings.max_split_size, 40 * MiB);
    assert_true(s.settings.garbage_collection_threshold == 0.5);
    assert_true(s.settings.expandable_segments);
    for (int k = 0; k < 16; k++)
        assert_int_equal(s.settings.divisions[k], k <= 6 ? 8 : 2);
    assert_string_equal(s.conf, "max_split_size_mb:40,??"); /* printable ASCII only */
    /* unlimited is -1, as PyTorch writes SIZE_MAX */
    assert_int_equal(ts_config_parse(&cfg, "", "T", TS_CONFIG_STRICT, NULL, NULL, NULL), 0);
    ts_snap_set_settings(&s, &cfg, "");
    assert_int_equal(s.settings.max_split_size, -1);
    assert_int_equal(s.settings.expandable_segments, cfg.expandable_segments);
    /* a text that did not parse (a forged page): PyTorch's defaults, the text still shown */
    ts_snap_set_settings(&s, NULL, "nonsense");
    assert_int_equal(s.settings.max_split_size, -1);
    assert_false(s.settings.expandable_segments);
    assert_int_equal(s.settings.divisions[3], 0);
    assert_string_equal(s.conf, "nonsense");
    ts_snap_set_settings(&s, NULL, NULL);
    assert_string_equal(s.conf, "");
    ts_snap_free(&s);
}

/* The pickle of a snapshot, read back as bytes. */
static char *pickle_of(ts_snap *s, size_t *n)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    if (!s->linked)
        ts_snap_link(s);
    assert_int_equal(ts_snap_write_pickle(s, fileno(f)), 0);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static bool has(const char *buf, size_t n, const char *what)
{
    return memmem(buf, n, what, strlen(what)) != NULL;
}

/* Frames are named by the mapping they fall in, and only by one of the snapshot's mappings; an
 * out of memory entry has device_free where others have addr; sizes are what was asked for. */
static void test_snapshot_pickle(void **state)
{
    (void)state;
    ts_snap s;
    ts_snap_init(&s);
    assert_int_equal(ts_snap_add_segment(&s, 0, 0, false, false), 0);
    assert_int_equal(ts_snap_add_block(&s, A0, 4 * MiB, 2 * MiB, ALLOC), 0);
    /* one mapping in the snapshot; the slot after it holds one that must never be read */
    s.maps = calloc(2, sizeof *s.maps);
    assert_non_null(s.maps);
    s.nmaps = 1;
    s.maps[0] = (ts_snap_mapping){0x1000, 0x2000, 0x500, "/opt/app/bin"};
    s.maps[1] = (ts_snap_mapping){0x3000, 0x4000, 0, "/WRONG"};
    tessera_history_event t[3] = {ev(TESSERA_EV_SEGMENT_ALLOC, A0, 4 * MiB, 1),
                                  ev(TESSERA_EV_ALLOC, A0, 4 * MiB, 2),
                                  ev(TESSERA_EV_OOM, 123456789, 64 * MiB, 3)};
    t[1].requested = 3 * MiB;
    t[1].frames[0] = 0x1010; /* in /opt/app/bin at offset 0x510 */
    t[1].frames[1] = 0x3010; /* in no mapping of the snapshot */
    t[1].frames[2] = 0x1000; /* a mapping's first byte: in it, offset 0x500 */
    t[1].frames[3] = 0x2000; /* its end: not in it */
    t[1].nframes = 4;
    /* a forged count of frames: only the 16 an event holds are read (the next event's first
     * word, right after them, is a pc that must not be named) */
    t[0].nframes = TESSERA_HISTORY_MAX_FRAMES + 1;
    for (unsigned i = 0; i < TESSERA_HISTORY_MAX_FRAMES; i++)
        t[0].frames[i] = 0x1800;
    t[1].seq = 0x1abc;
    /* one event more in memory than in the trace, which nothing may read */
    tessera_history_event *e = malloc(4 * sizeof *e);
    assert_non_null(e);
    memcpy(e, t, 3 * sizeof *e);
    e[3] = ev(TESSERA_EV_ALLOC, A0, 4 * MiB, 4);
    e[3].frames[0] = 0x1abc;
    assert_int_equal(ts_snap_add_trace(&s, 0, e, 3), 0);
    ts_snap_link(&s);
    s.blocks[0].origin = (ts_snap_origin){0, 3}; /* an origin past the trace: no frames */
    size_t n;
    char *buf = pickle_of(&s, &n);
    assert_true(has(buf, n, "/opt/app/bin"));
    assert_true(has(buf, n, "0x510"));
    assert_true(has(buf, n, "0x500"));
    assert_true(has(buf, n, "0x2000")); /* unnamed: its address, file "??" */
    assert_false(has(buf, n, "0x1500"));
    assert_false(has(buf, n, "WRONG"));
    assert_false(has(buf, n, "0xfbc"));
    assert_true(has(buf, n, "device_free"));
    assert_true(has(buf, n, "pinned_num_register_threads"));
    /* the alloc's size is the request (3 MiB: BININT 'J' 00 00 30 00), never the block's 4;
     * nothing else in it is 3 MiB */
    const char want[] = {'s', 'i', 'z', 'e', 'J', 0, 0, 0x30, 0};
    assert_non_null(memmem(buf, n, want, sizeof want));
    free(buf);
    ts_snap_free(&s);
}

static char dir[64];

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void write_text(const char *name, const char *text)
{
    char p[128];
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_text(const char *name, const char *text)
{
    char p[128], buf[64] = "";
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_string_equal(buf, text);
}

/* New files never replace one: a taken name gets the next free number. */
static void test_snapshot_file_names(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ts-snapfile-XXXXXX");
    assert_non_null(mkdtemp(dir));
    ts_snap s;
    ts_snap_init(&s);
    char path[128], chosen[256], err[512];
    write_text("oom.pickle", "keep");
    write_text("oom-2.pickle", "keep 2");
    path_in(path, sizeof path, "oom.pickle");
    assert_int_equal(ts_snap_write_new_file(&s, path, 100, chosen, sizeof chosen, err, sizeof err),
                     0);
    char want[128];
    path_in(want, sizeof want, "oom-3.pickle");
    assert_string_equal(chosen, want);
    expect_text("oom.pickle", "keep");
    expect_text("oom-2.pickle", "keep 2");
    struct stat st;
    assert_int_equal(stat(want, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* out of tries: refused, nothing left behind */
    assert_int_equal(ts_snap_write_new_file(&s, path, 3, chosen, sizeof chosen, err, sizeof err),
                     EEXIST);
    assert_non_null(strstr(err, "oom-3.pickle"));
    /* without an extension the number goes at the end; a dot in a directory is no extension */
    char sub[128];
    path_in(sub, sizeof sub, "a.d");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_text("a.d/oom", "keep");
    path_in(path, sizeof path, "a.d/oom");
    assert_int_equal(ts_snap_write_new_file(&s, path, 100, chosen, sizeof chosen, err, sizeof err),
                     0);
    path_in(want, sizeof want, "a.d/oom-2");
    assert_string_equal(chosen, want);
    /* a name that starts with its only dot has no extension either */
    write_text("a.d/.oom", "keep");
    path_in(path, sizeof path, "a.d/.oom");
    assert_int_equal(ts_snap_write_new_file(&s, path, 100, chosen, sizeof chosen, err, sizeof err),
                     0);
    path_in(want, sizeof want, "a.d/.oom-2");
    assert_string_equal(chosen, want);
    /* replacing: only when asked */
    path_in(path, sizeof path, "oom.pickle");
    assert_int_equal(ts_snap_replace_file(&s, path, err, sizeof err), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 4);
    assert_int_equal(ts_snap_write_file(&s, path, false, err, sizeof err), EEXIST);
    /* no temporary file is left */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ls %s %s/a.d | grep -c '[.]tmp[.]'", dir, dir);
    FILE *ls = popen(cmd, "r");
    char count[16] = "";
    assert_non_null(fgets(count, sizeof count, ls));
    pclose(ls);
    assert_string_equal(count, "0\n");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    ts_snap_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_runs),
        cmocka_unit_test(test_snapshot_links),
        cmocka_unit_test(test_snapshot_links_out_of_order),
        cmocka_unit_test(test_snapshot_bound_counts_links),
        cmocka_unit_test(test_snapshot_file_names),
        cmocka_unit_test(test_snapshot_settings),
        cmocka_unit_test(test_snapshot_pickle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
