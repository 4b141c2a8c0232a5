/* The segment map of expandable segments, as tessera-stat draws it: the real allocator core
 * (expandable_segments:True over the device model) publishes into a stats page; a reader takes a
 * snapshot and renders it with ts_render_map. An expandable segment reserves 1 1/8 of the device
 * (here 90 GiB) and maps a few MiB of it: the map must draw the mapped blocks at the scale of
 * mapped memory (1 MiB per character here), draw a short unmapped hole with dots, collapse the
 * long unmapped rest into one '~', and give the sizes in words. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/allocator.h"
#include "statspage/render.h"
#include "statspage/writer.h"
#include "devmodel/devmodel.h"

#include "snap.h"

#define MiB ((uint64_t)1 << 20)
#define WIDTH 64u

/* Snapshot slot of this process's page, saying why when it fails. */
static int take(int slot, struct snap *s)
{
    char err[sizeof ((ts_page *)0)->error];
    int st = snap_take((int)getpid(), slot, s, err, sizeof err);
    if (st != TS_PAGE_OK)
        fprintf(stderr, "snapshot of slot %d: %s\n", slot, err);
    return st;
}

/* The map of slot's snapshot as text (malloc'd), also echoed to stdout for the test log. */
static char *render(const struct snap *s, unsigned width)
{
    ts_proc_view v;
    memset(&v, 0, sizeof v);
    v.pid = (int)getpid();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    ts_render_map(f, &v, &s->head, s->segs, s->blocks, width);
    fclose(f);
    fputs(text, stdout);
    fputc('\n', stdout);
    return text;
}

/* The line of segment index i ("   0  0x..."), copied into line. */
static bool segment_line(const char *text, uint32_t i, char *line, size_t len)
{
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%4" PRIu32 "  0x", i);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, strlen(prefix)) != 0)
            continue;
        size_t n = strcspn(p, "\n");
        if (n >= len)
            n = len - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        return true;
    }
    return false;
}

/* The bar between the two '|' of a segment line, and what follows it. */
static bool split_bar(const char *line, char *bar, size_t len, const char **after)
{
    const char *open = strchr(line, '|');
    const char *close = open ? strchr(open + 1, '|') : NULL;
    if (!close || (size_t)(close - open - 1) >= len)
        return false;
    memcpy(bar, open + 1, (size_t)(close - open - 1));
    bar[close - open - 1] = '\0';
    *after = close + 1;
    return true;
}

/* The bar a segment should have at 1 MiB per character when every block is a whole number of
 * MiB: one character per MiB of each block, dots for an unmapped hole, and one '~' for the
 * unmapped rest of the reservation (the last block). */
static bool expected_bar(const struct snap *s, uint32_t i, char *bar, size_t len)
{
    const tessera_page_segment *seg = &s->segs[i];
    size_t n = 0;
    for (uint32_t b = 0; b < seg->nblocks; b++) {
        const tessera_page_block *blk = &s->blocks[seg->first_block + b];
        bool tail = b + 1 == seg->nblocks;
        if (blk->state == TESSERA_BLOCK_UNMAPPED && tail) {
            if (n + 1 >= len)
                return false;
            bar[n++] = '~';
            continue;
        }
        if (blk->size % MiB != 0 || n + blk->size / MiB >= len)
            return false;
        char c = blk->state == TESSERA_BLOCK_ALLOCATED ? 'X'
                 : blk->state == TESSERA_BLOCK_PENDING ? 'p'
                 : blk->state == TESSERA_BLOCK_FREE    ? '-'
                                                       : '.';
        for (uint64_t k = 0; k < blk->size / MiB; k++)
            bar[n++] = c;
    }
    bar[n] = '\0';
    return true;
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

/* The large pool's expandable segment of a snapshot (the small pool has its own). */
static int large_segment(const struct snap *s)
{
    for (uint32_t i = 0; i < s->head.map.nsegments; i++)
        if (s->segs[i].pool == TESSERA_POOL_LARGE && s->segs[i].kind == TESSERA_SEGMENT_EXPANDABLE)
            return (int)i;
    return -1;
}

/* A fresh allocator for device `device` under conf, publishing into slot. */
static ts_allocator *allocator_with(const char *conf, ts_statspage *page, int device,
                                    ts_devmodel *dev, ts_backend *be, int *slot)
{
    ts_config cfg;
    ts_config_diag diag;
    if (ts_config_parse(&cfg, conf, "TESSERA_ALLOC_CONF", TS_CONFIG_STRICT, &diag, NULL,
                        NULL) != 0) {
        fprintf(stderr, "config: %s\n", diag.message);
        return NULL;
    }
    ts_stats_sink sink;
    *slot = ts_statspage_claim(page, device, 0x100u + (unsigned)device, &sink);
    if (*slot < 0)
        return NULL;
    *be = ts_devmodel_backend(dev, true, false); /* no fences: a free is free at once */
    ts_allocator *a = ts_allocator_create(&cfg, be, device, sink);
    if (a)
        ts_allocator_set_observer(a, ts_statspage_observer, ts_statspage_observer_user(page, *slot),
                                  1);
    return a;
}

static ts_allocator *expandable_allocator(ts_statspage *page, int device, ts_devmodel *dev,
                                          ts_backend *be, int *slot)
{
    return allocator_with("expandable_segments:True", page, device, dev, be, slot);
}

/* The map's totals say the counters' numbers, or what each counts: reserved is the mapped memory
 * reserved_bytes counts (never the address space), and the plain segments are the ones
 * segment.all.current counts. */
static void check_totals(const char *text, const struct snap *s)
{
    char b[48], want[200];
    const tessera_device_stats *st = &s->head.stats;
    snprintf(want, sizeof want, "\nreserved %s (mapped memory: what reserved_bytes counts) in ",
             ts_format_bytes(b, sizeof b, (uint64_t)st->reserved_bytes[TESSERA_POOL_ALL].current));
    CHECK(strstr(text, want) != NULL, "reserved as the counters say (%s):\n%s", want, text);
    snprintf(want, sizeof want, "\nsegments: %" PRId64 " plain, ",
             st->segment[TESSERA_POOL_ALL].current);
    CHECK(strstr(text, want) != NULL, "plain segments as the counters say (%s):\n%s", want, text);
}

/* PyTorch's policy: plain segments, each a cudaMalloc, each counted. */
static void test_plain_totals(ts_statspage *page, struct snap *s)
{
    ts_devmodel *dev = ts_devmodel_create((size_t)80 << 30, 0);
    ts_backend be;
    int slot;
    ts_allocator *a = allocator_with("pytorch", page, 2, dev, &be, &slot);
    CHECK(a != NULL, "allocator");
    if (!a)
        return;
    uintptr_t p[3];
    CHECK(ts_malloc(a, 3 * MiB, 0, &p[0]) == TS_OK && ts_malloc(a, 30 * MiB, 0, &p[1]) == TS_OK &&
              ts_malloc(a, 100 * 1024, 0, &p[2]) == TS_OK,
          "malloc");
    CHECK(take(slot, s) == TS_PAGE_OK, "snapshot");
    CHECK(s->head.stats.segment[TESSERA_POOL_ALL].current == 3, "three segments");
    char *text = render(s, WIDTH);
    CHECK(text && strstr(text, "\nsegments: 3 plain, 0 expandable, 0 stitched;") != NULL,
          "plain:\n%s", text ? text : "");
    if (text)
        check_totals(text, s);
    free(text);
    ts_allocator_destroy(a, true);
    ts_statspage_release(page, slot);
    ts_devmodel_destroy(dev);
}

/* Blocks in the mapped prefix, the unmapped rest collapsed. */
static void test_mapped_prefix(ts_statspage *page, struct snap *s)
{
    ts_devmodel *dev = ts_devmodel_create((size_t)80 << 30, 0);
    ts_backend be;
    int slot;
    ts_allocator *a = expandable_allocator(page, 0, dev, &be, &slot);
    CHECK(a != NULL, "allocator");
    if (!a)
        return;
    uintptr_t p[5];
    CHECK(ts_malloc(a, 3 * MiB, 0, &p[0]) == TS_OK, "malloc");
    CHECK(ts_malloc(a, 5 * MiB, 0, &p[1]) == TS_OK, "malloc");
    CHECK(ts_malloc(a, 100 * 1024, 0, &p[2]) == TS_OK, "malloc small");
    CHECK(ts_malloc(a, 30 * MiB, 0, &p[3]) == TS_OK, "malloc");
    CHECK(ts_malloc(a, 2 * MiB, 0, &p[4]) == TS_OK, "malloc");
    CHECK(ts_free(a, p[1]) == TS_OK && ts_free(a, p[3]) == TS_OK, "free");

    CHECK(take(slot, s) == TS_PAGE_OK, "snapshot");
    int i = large_segment(s);
    CHECK(i >= 0, "a large expandable segment");
    if (i < 0)
        goto out;
    const tessera_page_segment *seg = &s->segs[i];
    /* the situation this test is about: a small mapped prefix of a huge reservation */
    CHECK(seg->mapped >= 40 * MiB && seg->mapped <= 64 * MiB && seg->size >= (uint64_t)80 << 30,
          "segment maps %" PRIu64 " of %" PRIu64, seg->mapped, seg->size);

    char *text = render(s, WIDTH);
    CHECK(text != NULL, "render");
    if (!text)
        goto out;
    /* the scale is set by mapped memory (at most 64 MiB), not by the 90 GiB reservation */
    CHECK(strstr(text, "scale: 1 character = 1.00 MiB\n") != NULL, "scale:\n%s", text);
    CHECK(strstr(text, "\n        ~ unmapped range too long to draw at this scale: its size "
                       "follows the bar\n") != NULL,
          "legend explains ~:\n%s", text);
    CHECK(strstr(text, ". unmapped (address space, no memory)") != NULL, "legend explains .");

    char line[512], bar[256], want[256];
    const char *after = NULL;
    CHECK(segment_line(text, (uint32_t)i, line, sizeof line) &&
              split_bar(line, bar, sizeof bar, &after),
          "segment %d line:\n%s", i, text);
    CHECK(expected_bar(s, (uint32_t)i, want, sizeof want), "blocks in whole MiB");
    /* every mapped MiB one character: 3 MiB allocated, 35 MiB free (5 + 30 merged), 2 MiB
     * allocated, then the unmapped rest of the reservation as one '~' */
    CHECK(strcmp(bar, want) == 0, "bar\n  %s\nwanted\n  %s", bar, want);
    CHECK(count_char(bar, 'X') == 5 && count_char(bar, '-') >= 35 && count_char(bar, '~') == 1 &&
              bar[strlen(bar) - 1] == '~' && strlen(bar) <= WIDTH + 1,
          "bar %s", bar);
    char b1[48], b2[48], note[160];
    snprintf(note, sizeof note, "  %s mapped, ~ %s unmapped", ts_format_bytes(b1, sizeof b1, seg->mapped),
             ts_format_bytes(b2, sizeof b2, seg->size - seg->mapped));
    CHECK(after && strcmp(after, note) == 0, "after the bar: '%s', wanted '%s'", after ? after : "",
          note);

    /* the small pool's segment (2 MiB mapped of 90 GiB) is drawn at the same scale */
    for (uint32_t k = 0; k < s->head.map.nsegments; k++) {
        if ((int)k == i)
            continue;
        CHECK(segment_line(text, k, line, sizeof line) && split_bar(line, bar, sizeof bar, &after),
              "segment %u", k);
        CHECK(strcmp(bar, "--~") == 0, "small pool bar %s", bar);
    }
    free(text);

    /* narrower: the scale follows the width; the bar still fits */
    text = render(s, 16);
    CHECK(text && strstr(text, "scale: 1 character = 4.00 MiB\n") != NULL, "width 16");
    if (text && segment_line(text, (uint32_t)i, line, sizeof line) &&
        split_bar(line, bar, sizeof bar, &after))
        CHECK(strlen(bar) <= 16 + 1 && bar[strlen(bar) - 1] == '~' && strchr(bar, 'X'),
              "width 16 bar %s", bar);
    else
        CHECK(false, "width 16 segment line");
    free(text);
out:
    ts_allocator_destroy(a, true);
    ts_statspage_release(page, slot);
    ts_devmodel_destroy(dev);
}

/* A page given back in the middle (empty_cache) is a hole: short enough to draw with dots at the
 * scale of the mapped memory around it; the rest of the reservation still collapses. */
static void test_hole(ts_statspage *page, struct snap *s)
{
    ts_devmodel *dev = ts_devmodel_create((size_t)80 << 30, 0);
    ts_backend be;
    int slot;
    ts_allocator *a = expandable_allocator(page, 1, dev, &be, &slot);
    CHECK(a != NULL, "allocator");
    if (!a)
        return;
    uintptr_t p[3];
    for (int k = 0; k < 3; k++)
        CHECK(ts_malloc(a, 20 * MiB, 0, &p[k]) == TS_OK, "malloc");
    CHECK(ts_free(a, p[1]) == TS_OK, "free");
    ts_empty_cache(a);

    CHECK(take(slot, s) == TS_PAGE_OK, "snapshot");
    int i = large_segment(s);
    CHECK(i >= 0, "a large expandable segment");
    if (i < 0)
        goto out;
    const tessera_page_segment *seg = &s->segs[i];
    const tessera_page_block *blk = &s->blocks[seg->first_block];
    CHECK(seg->nblocks == 4 && blk[0].state == TESSERA_BLOCK_ALLOCATED &&
              blk[1].state == TESSERA_BLOCK_UNMAPPED && blk[1].size == 20 * MiB &&
              blk[2].state == TESSERA_BLOCK_ALLOCATED && blk[3].state == TESSERA_BLOCK_UNMAPPED,
          "allocated, hole, allocated, unmapped rest (%" PRIu32 " blocks)", seg->nblocks);

    char *text = render(s, WIDTH);
    CHECK(text != NULL, "render");
    if (!text)
        goto out;
    CHECK(strstr(text, "scale: 1 character = 1.00 MiB\n") != NULL, "scale:\n%s", text);
    char line[512], bar[256], want[256];
    const char *after = NULL;
    CHECK(segment_line(text, (uint32_t)i, line, sizeof line) &&
              split_bar(line, bar, sizeof bar, &after),
          "segment line:\n%s", text);
    CHECK(expected_bar(s, (uint32_t)i, want, sizeof want), "blocks in whole MiB");
    CHECK(strcmp(bar, want) == 0 && count_char(bar, '.') == 20 && count_char(bar, '~') == 1,
          "bar\n  %s\nwanted\n  %s", bar, want);
    char b1[48], b2[48], note[200];
    snprintf(note, sizeof note, "  %s mapped, ~ %s unmapped",
             ts_format_bytes(b1, sizeof b1, seg->mapped), ts_format_bytes(b2, sizeof b2, blk[3].size));
    CHECK(after && strcmp(after, note) == 0, "after the bar: '%s', wanted '%s'", after ? after : "",
          note);
    /* a reservation of 80 GiB and more, a few MiB mapped: the map and the counters agree */
    CHECK(strstr(text, "\nsegments: 0 plain, 1 expandable, 0 stitched;") != NULL, "kinds:\n%s",
          text);
    check_totals(text, s);
    free(text);
out:
    ts_allocator_destroy(a, true);
    ts_statspage_release(page, slot);
    ts_devmodel_destroy(dev);
}

int main(void)
{
    char dir[] = "/tmp/tessera-map-page-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    setenv(TESSERA_PAGE_DIR_ENV, dir, 1);
    char err[512];
    ts_statspage *page = NULL;
    if (ts_statspage_create(NULL, "expandable_segments:True", &page, err, sizeof err) != 0) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    struct snap *s = malloc(sizeof *s);
    if (!s)
        return 1;
    test_mapped_prefix(page, s);
    test_hole(page, s);
    test_plain_totals(page, s);
    free(s);
    ts_statspage_close(page, true);
    rmdir(dir);
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("expandable segments are drawn at the scale of their mapped memory\n");
    return failures ? 1 : 0;
}
