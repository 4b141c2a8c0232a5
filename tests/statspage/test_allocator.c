/* The real allocator core publishing into a stats page: its counters live in a slot (the sink),
 * its observer refreshes the segment map. Checks that what a reader sees is exactly what the
 * allocator reports, that the map agrees with the counters and with ts_allocator_walk, and,
 * with two threads allocating while another process reads, that no snapshot is ever torn. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/allocator.h"
#include "statspage/render.h"
#include "statspage/writer.h"
#include "devmodel/devmodel.h"

#include "snap.h"

#define MiB ((size_t)1 << 20)


/* Invariants the allocator keeps inside every write window; a torn copy breaks them. */
static int consistent(const struct snap *s, char *why, size_t len, uint64_t *synced)
{
    const tessera_device_stats *st = &s->head.stats;
#define POOLS_ADD_UP(name, unit, help)                                                             \
    for (int sub = 0; sub < 2; sub++) {                                                            \
        const int64_t *all = &st->name[TESSERA_POOL_ALL].current + sub;                            \
        const int64_t *sm = &st->name[TESSERA_POOL_SMALL].current + sub;                           \
        const int64_t *lg = &st->name[TESSERA_POOL_LARGE].current + sub;                           \
        if (sub == 0 && *all != *sm + *lg) {                                                       \
            snprintf(why, len, #name ".all.current %" PRId64 " != %" PRId64 " + %" PRId64, *all,   \
                     *sm, *lg);                                                                    \
            return -1;                                                                             \
        }                                                                                          \
    }
    TESSERA_STAT_ARRAYS(POOLS_ADD_UP)
#undef POOLS_ADD_UP
    const tessera_page_map *m = &s->head.map;
    if (!(m->flags & TESSERA_MAP_VALID))
        return 0;
    /* The map is refreshed at the end of every op (observer every 1), inside that op's last
     * window. The core closes its window around device calls, so a reader may catch an op half
     * way (num_ops already counted): the map and the counters must agree only when no op has
     * started since the map was taken. */
    if (m->ops > (uint64_t)st->num_ops) {
        snprintf(why, len, "map of op %" PRIu64 " newer than the counters (op %" PRId64 ")",
                 m->ops, st->num_ops);
        return -1;
    }
    if (m->ops != (uint64_t)st->num_ops)
        return 0;
    if (synced)
        (*synced)++;
    if ((int64_t)m->segment_bytes != st->reserved_bytes[TESSERA_POOL_ALL].current ||
        (int64_t)m->allocated_bytes != st->allocated_bytes[TESSERA_POOL_ALL].current ||
        (int64_t)m->total_segments != st->segment[TESSERA_POOL_ALL].current) {
        snprintf(why, len,
                 "map says %" PRIu64 " reserved in %" PRIu32 " segments, %" PRIu64
                 " allocated; counters %" PRId64 " in %" PRId64 ", %" PRId64,
                 m->segment_bytes, m->total_segments, m->allocated_bytes,
                 st->reserved_bytes[TESSERA_POOL_ALL].current,
                 st->segment[TESSERA_POOL_ALL].current,
                 st->allocated_bytes[TESSERA_POOL_ALL].current);
        return -1;
    }
    for (uint32_t i = 0; i < m->nsegments; i++) {
        uint64_t sum = 0;
        for (uint32_t b = 0; b < s->segs[i].nblocks; b++)
            sum += s->blocks[s->segs[i].first_block + b].size;
        if (s->segs[i].nblocks == s->segs[i].nblocks_total && sum != s->segs[i].size) {
            snprintf(why, len, "segment %" PRIu32 ": blocks add up to %" PRIu64 " of %" PRIu64, i,
                     sum, s->segs[i].size);
            return -1;
        }
    }
    return 0;
}

/* ---- the walk, for comparison ---- */
struct walked {
    uint64_t addr[64], size[64];
    uint32_t nseg, nblk;
    uint64_t bsize[1024];
    uint32_t bstate[1024];
};
static int w_seg(void *u, const ts_segment_info *s)
{
    struct walked *w = u;
    if (w->nseg < 64) {
        w->addr[w->nseg] = s->addr;
        w->size[w->nseg] = s->size;
    }
    w->nseg++;
    return 0;
}
static int w_blk(void *u, const ts_segment_info *s, const ts_block_info *b)
{
    (void)s;
    struct walked *w = u;
    if (w->nblk < 1024) {
        w->bsize[w->nblk] = b->size;
        w->bstate[w->nblk] = (uint32_t)b->state;
    }
    w->nblk++;
    return 0;
}

struct hammer {
    ts_allocator *a;
    unsigned seed;
    double end;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *hammer_thread(void *arg)
{
    struct hammer *h = arg;
    uintptr_t live[64] = {0};
    unsigned r = h->seed;
    while (now_s() < h->end) {
        r = r * 1103515245u + 12345u;
        unsigned i = (r >> 8) % 64;
        if (live[i]) {
            ts_free(h->a, live[i]);
            live[i] = 0;
        } else {
            size_t size = (r >> 16) % 3 == 0 ? 512 * ((r >> 4) % 64 + 1) : MiB * ((r >> 12) % 9 + 1);
            if (ts_malloc(h->a, size, 0, &live[i]) != TS_OK)
                live[i] = 0;
        }
    }
    for (unsigned i = 0; i < 64; i++)
        if (live[i])
            ts_free(h->a, live[i]);
    return NULL;
}

static int reader_process(int pid, double seconds)
{
    struct snap *s = malloc(sizeof *s);
    uint64_t ok = 0, busy = 0, maps = 0, synced = 0;
    /* Read for the given time, and on until enough evidence was seen (a loaded machine or a
     * sanitizer build is slow): a count must never hinge on the scheduler. */
    double end = now_s() + seconds, hard_end = end + 60.0;
    while (now_s() < end || ((ok < 50 || synced < 10) && now_s() < hard_end)) {
        char err[320], why[256];
        int st = snap_take(pid, 0, s, err, sizeof err);
        if (st == TS_PAGE_EBUSY) {
            busy++;
            continue;
        }
        if (st != TS_PAGE_OK) {
            fprintf(stderr, "reader: %s: %s\n", ts_page_status_name(st), err);
            return 1;
        }
        if (consistent(s, why, sizeof why, &synced) != 0) {
            fprintf(stderr, "reader: torn or inconsistent snapshot: %s\n", why);
            return 1;
        }
        ok++;
        maps += (s->head.map.flags & TESSERA_MAP_VALID) != 0;
    }
    printf("reader: %" PRIu64 " consistent snapshots (%" PRIu64 " with a map, %" PRIu64
           " with the map of their op), %" PRIu64 " busy\n", ok, maps, synced, busy);
    fflush(stdout);
    free(s);
    return ok >= 50 && synced >= 10 ? 0 : 1;
}

/* This process's table row for device, as tessera-stat prints it, squeezed to single spaces. */
static void table_row_of(const char *dir, int device, char *row, size_t len)
{
    ts_proc_view v;
    ts_proc_view_load(&v, dir, (int)getpid(), true);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    ts_render_table(f, &v, 1, dir);
    fclose(f);
    ts_proc_view_free(&v);
    row[0] = '\0';
    char want[32];
    snprintf(want, sizeof want, "%d", device);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* PID COMMAND DEVICE ...: the device is the third word */
        char words[3][64];
        if (sscanf(line, "%63s %63s %63s", words[0], words[1], words[2]) != 3 ||
            strcmp(words[2], want) != 0)
            continue;
        size_t k = 0;
        for (const char *c = line; *c && k + 1 < len; c++)
            if (*c != ' ' || (k > 0 && row[k - 1] != ' '))
                row[k++] = *c;
        row[k] = '\0';
        break;
    }
    free(text);
}

/* The Prometheus text of this process's page, malloc'ed. */
static char *prometheus_of(const char *dir)
{
    ts_proc_view v;
    ts_proc_view_load(&v, dir, (int)getpid(), true);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    ts_render_prometheus(f, &v, 1);
    fclose(f);
    ts_proc_view_free(&v);
    return text;
}

/* Set the slot's peak allocated, as the allocator would under its lock. */
static void set_alloc_peak(ts_stats_sink sink, int64_t bytes)
{
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->allocated_bytes[TESSERA_POOL_ALL].peak, bytes);
    tessera_seq_write_end(sink.seq);
}

/* FRAG in the table is fragmentation where it hurts: a program that freed everything shows 0%,
 * holes that no single request can use show their share of the free memory, and counters that
 * disagree (a damaged page) are clamped and marked, never printed as huge negative numbers. */
static void test_table_frag(ts_statspage *page, const char *dir)
{
    ts_stats_sink sink;
    int slot = ts_statspage_claim(page, 1, 0x78, &sink);
    CHECK(slot >= 0, "slot %d", slot);
    ts_config cfg;
    ts_config_defaults(&cfg);
    ts_devmodel *dev = ts_devmodel_create((size_t)4 << 30, 0);
    ts_backend be = ts_devmodel_backend(dev, false, false); /* no fences: frees free at once */
    ts_allocator *a = ts_allocator_create(&cfg, &be, 1, sink);
    CHECK(a != NULL, "allocator");
    ts_allocator_set_observer(a, ts_statspage_observer, ts_statspage_observer_user(page, slot), 1);
    char row[256];

    /* ten 2 MiB blocks fill one 20 MiB segment; every other one freed: 10 MiB free in five
     * 2 MiB holes, of which one request can use 2 MiB: 80% */
    uintptr_t p[10];
    for (int i = 0; i < 10; i++)
        CHECK(ts_malloc(a, 2 * MiB, 0, &p[i]) == TS_OK, "malloc %d", i);
    for (int i = 0; i < 10; i += 2)
        CHECK(ts_free(a, p[i]) == TS_OK, "free %d", i);
    table_row_of(dir, 1, row, sizeof row);
    CHECK(strstr(row, " 1 10.00 MiB 20.00 MiB 10.00 MiB 80.0% +0.0% 0 0") != NULL, "holes: '%s'",
          row);

    /* everything freed: the segment is whole again and serves any request up to 20 MiB */
    for (int i = 1; i < 10; i += 2)
        CHECK(ts_free(a, p[i]) == TS_OK, "free %d", i);
    table_row_of(dir, 1, row, sizeof row);
    CHECK(strstr(row, " 1 0 B 20.00 MiB 20.00 MiB 0.0% +0.0% 0 0") != NULL, "idle cache: '%s'",
          row);

    /* a damaged page: allocated above reserved */
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->allocated_bytes[TESSERA_POOL_ALL].current, 64 * (int64_t)MiB);
    tessera_seq_write_end(sink.seq);
    table_row_of(dir, 1, row, sizeof row);
    const char *nums = strstr(row, " 1 20.00 MiB? 20.00 MiB? 0 B? ? +0.0% 0 0");
    CHECK(nums != NULL && !strchr(nums, '-'), "inconsistent: '%s'", row);
    tessera_seq_write_begin(sink.seq);
    tessera_stat_store(&sink.stats->allocated_bytes[TESSERA_POOL_ALL].current, 0);
    tessera_seq_write_end(sink.seq);

    /* ABOVE FLOOR: peak reserved over peak allocated, in % of the latter (the floor); a peak
     * reserved below the peak allocated is a damaged page: '?', and the row is marked */
    set_alloc_peak(sink, 16 * (int64_t)MiB);
    table_row_of(dir, 1, row, sizeof row);
    CHECK(strstr(row, " 1 0 B 20.00 MiB 20.00 MiB 0.0% +25.0% 0 0") != NULL, "floor: '%s'", row);
    set_alloc_peak(sink, 21 * (int64_t)MiB);
    table_row_of(dir, 1, row, sizeof row);
    CHECK(strstr(row, " 1 0 B? 20.00 MiB? 20.00 MiB? ? ? 0 0") != NULL, "floor damaged: '%s'", row);
    /* device 1's series of the two families (device 0's slot belongs to another test) */
    char bytes_series[160], ratio_series[160];
    snprintf(bytes_series, sizeof bytes_series,
             "\ntessera_peak_reserved_above_allocated_bytes{pid=\"%d\",device=\"1\"", (int)getpid());
    snprintf(ratio_series, sizeof ratio_series,
             "\ntessera_peak_reserved_above_allocated_ratio{pid=\"%d\",device=\"1\"", (int)getpid());
    char *prom = prometheus_of(dir); /* neither series for a damaged page */
    CHECK(prom && !strstr(prom, bytes_series) && !strstr(prom, ratio_series),
          "damaged floor in Prometheus");
    free(prom);
    set_alloc_peak(sink, 0);
    table_row_of(dir, 1, row, sizeof row);
    CHECK(strstr(row, " 1 0 B 20.00 MiB 20.00 MiB 0.0% - 0 0") != NULL, "no floor yet: '%s'", row);
    prom = prometheus_of(dir); /* bytes, but no ratio of nothing allocated */
    const char *b = prom ? strstr(prom, bytes_series) : NULL;
    CHECK(b && strstr(b, "} 20971520\n") == strchr(b, '}') && !strstr(prom, ratio_series),
          "no floor yet in Prometheus");
    free(prom);
    set_alloc_peak(sink, 20 * (int64_t)MiB);

    ts_allocator_destroy(a, true);
    ts_statspage_release(page, slot);
    ts_devmodel_destroy(dev);
}

int main(void)
{
    char dir[] = "/tmp/tessera-alloc-page-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    setenv(TESSERA_PAGE_DIR_ENV, dir, 1);

    ts_config cfg;
    ts_config_defaults(&cfg);
    char cfgtext[2048];
    ts_config_format(&cfg, cfgtext, sizeof cfgtext);
    char err[512];
    ts_statspage *page = NULL;
    if (ts_statspage_create(NULL, cfgtext, &page, err, sizeof err) != 0) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    ts_stats_sink sink;
    int slot = ts_statspage_claim(page, 0, 0x77, &sink);
    CHECK(slot == 0, "slot %d", slot);
    ts_devmodel *dev = ts_devmodel_create((size_t)4 << 30, 0);
    ts_backend be = ts_devmodel_backend(dev, false, true);
    ts_allocator *a = ts_allocator_create(&cfg, &be, 0, sink);
    if (!a)
        return 1;
    ts_allocator_set_observer(a, ts_statspage_observer, ts_statspage_observer_user(page, slot), 1);

    /* ---- a known sequence ---- */
    uintptr_t p1, p2, p3, p4, p5;
    CHECK(ts_malloc(a, 3 * MiB, 0, &p1) == TS_OK, "malloc");
    CHECK(ts_malloc(a, 5 * MiB, 0, &p2) == TS_OK, "malloc");
    CHECK(ts_malloc(a, 100 * 1024, 0, &p3) == TS_OK, "malloc small");
    CHECK(ts_malloc(a, 30 * MiB, 0, &p4) == TS_OK, "malloc big");
    CHECK(ts_malloc(a, 2 * MiB, 0, &p5) == TS_OK, "malloc");
    CHECK(ts_free(a, p2) == TS_OK, "free");
    CHECK(ts_free(a, p4) == TS_OK, "free");

    tessera_device_stats mine;
    ts_get_stats(a, &mine);
    struct snap *s = malloc(sizeof *s);
    char why[256];
    int st = snap_take((int)getpid(), slot, s, err, sizeof err);
    CHECK(st == TS_PAGE_OK, "snapshot: %s", err);
    CHECK(memcmp(&s->head.stats, &mine, sizeof mine) == 0, "the page holds the allocator's counters");
    CHECK(s->head.stats.num_alloc_calls == 5 && s->head.stats.num_free_calls == 2,
          "calls %" PRId64 "/%" PRId64, s->head.stats.num_alloc_calls, s->head.stats.num_free_calls);
    CHECK(s->head.stats.allocation[TESSERA_POOL_ALL].current == 3, "3 live allocations");
    CHECK(s->head.stats.allocation[TESSERA_POOL_SMALL].current == 1, "1 small");
    CHECK(consistent(s, why, sizeof why, NULL) == 0, "%s", why);
    CHECK(s->head.map.flags == TESSERA_MAP_VALID, "map flags %u", s->head.map.flags);
    CHECK(s->head.map.ops == (uint64_t)mine.num_ops && mine.num_ops == 7, "map taken at op %" PRIu64,
          s->head.map.ops);
    CHECK(s->head.map.largest_free == ts_largest_free_block(a) &&
              (int64_t)s->head.map.largest_free == mine.largest_free_block_bytes,
          "largest free: map %" PRIu64 ", allocator %zu, counter %" PRId64, s->head.map.largest_free,
          ts_largest_free_block(a), mine.largest_free_block_bytes);
    CHECK(s->head.map.free_bytes == ts_cached_bytes(a) - s->head.map.pending_bytes,
          "free bytes %" PRIu64 " vs cached %zu", s->head.map.free_bytes, ts_cached_bytes(a));
    struct walked *w = calloc(1, sizeof *w);
    ts_walker wk = {.user = w, .segment = w_seg, .block = w_blk};
    ts_allocator_walk(a, &wk);
    CHECK(w->nseg == s->head.map.nsegments && w->nblk == s->head.map.nblocks,
          "walk %u/%u, map %u/%u", w->nseg, w->nblk, s->head.map.nsegments, s->head.map.nblocks);
    for (uint32_t i = 0; i < w->nseg && i < s->head.map.nsegments; i++)
        CHECK(s->segs[i].address == w->addr[i] && s->segs[i].size == w->size[i], "segment %u", i);
    for (uint32_t i = 0; i < w->nblk && i < s->head.map.nblocks; i++)
        CHECK(s->blocks[i].size == w->bsize[i] && s->blocks[i].state == w->bstate[i], "block %u", i);

    /* the map as tessera-stat draws it */
    ts_proc_view v;
    memset(&v, 0, sizeof v);
    v.pid = (int)getpid();
    snprintf(v.hdr.cmdline, sizeof v.hdr.cmdline, "/usr/bin/python3 train.py");
    char *text = NULL;
    size_t textlen = 0;
    FILE *mf = open_memstream(&text, &textlen);
    ts_render_map(mf, &v, &s->head, s->segs, s->blocks, 64);
    fclose(mf);
    char want[128];
    char lf[48];
    snprintf(want, sizeof want, "largest free block %s",
             ts_format_bytes(lf, sizeof lf, s->head.map.largest_free));
    CHECK(strstr(text, want) != NULL && strchr(text, 'X') && strchr(text, '-'), "map text:\n%s", text);
    CHECK(strstr(text, "(python3 train.py), device") != NULL, "map header, no padding:\n%s", text);
    free(text);

    test_table_frag(page, dir);

    /* empty_cache shrinks the map too */
    CHECK(ts_free(a, p1) == TS_OK && ts_free(a, p3) == TS_OK && ts_free(a, p5) == TS_OK, "frees");
    ts_empty_cache(a);
    st = snap_take((int)getpid(), slot, s, err, sizeof err);
    CHECK(st == TS_PAGE_OK && s->head.map.total_segments == 0 &&
              s->head.stats.reserved_bytes[TESSERA_POOL_ALL].current == 0,
          "after empty_cache: %u segments", s->head.map.total_segments);

    /* ---- two threads allocating, another process reading ---- */
    const double seconds = 0.6;
    pid_t rd = fork();
    if (rd == 0)
        _exit(reader_process(getppid(), seconds));
    struct hammer h[2] = {{a, 1, now_s() + seconds}, {a, 7, now_s() + seconds}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, hammer_thread, &h[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    int rs;
    waitpid(rd, &rs, 0);
    CHECK(WIFEXITED(rs) && WEXITSTATUS(rs) == 0, "reader process failed");
    char why2[256];
    CHECK(ts_allocator_check(a, why2, sizeof why2) == 0, "heap: %s", why2);
    st = snap_take((int)getpid(), slot, s, err, sizeof err);
    CHECK(st == TS_PAGE_OK && consistent(s, why, sizeof why, NULL) == 0, "final: %s %s", err, why);
    CHECK(s->head.stats.allocation[TESSERA_POOL_ALL].current == 0, "everything freed");

    ts_allocator_destroy(a, true);
    ts_statspage_release(page, slot);
    ts_statspage_close(page, true);
    ts_devmodel_destroy(dev);
    free(w);
    free(s);
    rmdir(dir);
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("the allocator's page agrees with the allocator\n");
    return failures ? 1 : 0;
}
