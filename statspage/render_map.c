/* The ASCII segment map of one slot (statspage/render.h): one bar per segment at one scale set by
 * mapped memory, long unmapped ranges collapsed, and the sentence on what a large request
 * needs. Shares no row model with the other outputs (render.c). */
#include "statspage/render.h"
#include "statspage/render_text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* segment map                                                                                */

enum cell_state { C_ALLOC, C_STITCH, C_PENDING, C_FREE, C_UNMAPPED, C_UNKNOWN, C_COUNT };
static const char CELL_CHAR[C_COUNT] = {'X', 's', 'p', '-', '.', '?'};
/* An unmapped range too long to draw at the map's scale: one character, its size after the bar. */
#define MARKER_CHAR '~'
/* Collapsed ranges whose sizes are listed after a bar; any more are counted and summed. */
#define MARKERS_LISTED 4u

static const char *kind_name(unsigned k)
{
    switch (k) {
    case TESSERA_SEGMENT_PLAIN: return "plain";
    case TESSERA_SEGMENT_EXPANDABLE: return "expandable";
    case TESSERA_SEGMENT_STITCHED: return "stitched";
    default: return "?";
    }
}

static uint64_t next_pow2(uint64_t v)
{
    uint64_t p = 1;
    while (p < v && p <= UINT64_MAX / 2)
        p <<= 1;
    return p;
}

/* Characters that len bytes take at scale bytes per character (scale >= 1). */
static uint64_t cells_for(uint64_t len, uint64_t scale)
{
    return len / scale + (len % scale != 0);
}

static uint64_t sat_add_u64(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* A stretch of one state inside a segment; adjacent runs never share a state. */
struct map_run {
    uint64_t len;
    int state;
};

static int cell_of_block(const tessera_page_segment *s, uint32_t state)
{
    switch (state) {
    case TESSERA_BLOCK_ALLOCATED: return s->kind == TESSERA_SEGMENT_STITCHED ? C_STITCH : C_ALLOC;
    case TESSERA_BLOCK_PENDING: return C_PENDING;
    case TESSERA_BLOCK_FREE: return C_FREE;
    case TESSERA_BLOCK_LENT: return C_ALLOC; /* in use, by the stitched segment it backs */
    default: return C_UNMAPPED;
    }
}

static uint32_t runs_push(struct map_run *runs, uint32_t n, int state, uint64_t len)
{
    if (len == 0)
        return n;
    if (n > 0 && runs[n - 1].state == state) {
        runs[n - 1].len += len; /* no overflow: runs never add up to more than the segment */
        return n;
    }
    runs[n].len = len;
    runs[n].state = state;
    return n + 1;
}

/* The segment as runs, in address order (runs has room for nblocks + 2). Blocks are clipped to
 * the segment's size. Bytes past the recorded blocks (a truncated map) are C_UNKNOWN, except for
 * the unmapped bytes the segment record says are not among the recorded blocks: those follow as
 * one unmapped run, so that a truncated expandable segment is still drawn at the mapped scale
 * (where in the unrecorded part they lie is unknown). */
static uint32_t segment_runs(const tessera_page_segment *s, const tessera_page_block *blocks,
                             struct map_run *runs)
{
    uint32_t n = 0;
    uint64_t off = 0, unmapped_seen = 0;
    for (uint32_t b = 0; b < s->nblocks && off < s->size; b++) {
        const tessera_page_block *blk = &blocks[s->first_block + b];
        uint64_t len = blk->size < s->size - off ? blk->size : s->size - off;
        int st = cell_of_block(s, blk->state);
        if (st == C_UNMAPPED)
            unmapped_seen += len;
        n = runs_push(runs, n, st, len);
        off += len;
    }
    if (off < s->size) {
        uint64_t rest = s->size - off;
        uint64_t unmapped = s->size - (s->mapped < s->size ? s->mapped : s->size);
        unmapped = unmapped > unmapped_seen ? unmapped - unmapped_seen : 0;
        if (unmapped > rest)
            unmapped = rest;
        n = runs_push(runs, n, C_UNKNOWN, rest - unmapped);
        n = runs_push(runs, n, C_UNMAPPED, unmapped);
    }
    return n;
}

/* Bytes of the runs drawn at scale whatever happens: everything but unmapped runs. */
static uint64_t runs_mapped(const struct map_run *runs, uint32_t n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        if (runs[i].state != C_UNMAPPED)
            sum += runs[i].len;
    return sum;
}

static int cmp_u64_desc(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a < b) - (a > b);
}

/* The longest unmapped run still drawn at scale; longer ones collapse into MARKER_CHAR, so that
 * the bar fits width characters: mapped memory always takes its cells at scale, unmapped runs
 * keep theirs while they fit, the largest given up first (runs of equal length go together).
 * UINT64_MAX when every unmapped run can be drawn. scratch has room for n values. */
static uint64_t keep_max_unmapped(const struct map_run *runs, uint32_t n, uint64_t scale,
                                   unsigned width, uint64_t *scratch)
{
    uint64_t mapped_cells = cells_for(runs_mapped(runs, n), scale);
    uint64_t budget = mapped_cells < width ? width - mapped_cells : 0;
    uint32_t nholes = 0;
    uint64_t hole_cells = 0;
    for (uint32_t i = 0; i < n; i++)
        if (runs[i].state == C_UNMAPPED) {
            scratch[nholes++] = runs[i].len;
            hole_cells = sat_add_u64(hole_cells, cells_for(runs[i].len, scale));
        }
    if (hole_cells <= budget)
        return UINT64_MAX;
    qsort(scratch, nholes, sizeof *scratch, cmp_u64_desc);
    uint32_t k = 0;
    while (k < nholes && hole_cells > budget) {
        uint64_t c = cells_for(scratch[k++], scale);
        hole_cells -= c < hole_cells ? c : hole_cells;
    }
    /* k >= 1, as hole_cells > budget needed a hole; runs are never empty, so this is >= 0 */
    return scratch[k - 1] - 1;
}

/* One bar being drawn: bytes accumulate into the current character's per-state counts; a full
 * character prints the state holding most of its bytes (ties go to the earlier, more important
 * state). A collapsed run ends the current character early, so the cells after it start on the
 * byte after the run. */
struct map_bar {
    FILE *f;
    uint64_t scale;
    uint64_t filled;
    uint64_t chars;
    uint64_t cell[C_COUNT];
};

static void bar_flush(struct map_bar *b)
{
    if (b->filled == 0)
        return;
    int best = C_UNKNOWN;
    uint64_t most = 0;
    for (int st = 0; st < C_COUNT; st++)
        if (b->cell[st] > most) {
            most = b->cell[st];
            best = st;
        }
    fputc(CELL_CHAR[best], b->f);
    memset(b->cell, 0, sizeof b->cell);
    b->filled = 0;
    b->chars++;
}

static void bar_add(struct map_bar *b, int state, uint64_t len)
{
    while (len > 0) {
        uint64_t room = b->scale - b->filled;
        uint64_t take = len < room ? len : room;
        b->cell[state] += take;
        b->filled += take;
        len -= take;
        if (b->filled == b->scale)
            bar_flush(b);
    }
}

static void bar_marker(struct map_bar *b)
{
    bar_flush(b);
    fputc(MARKER_CHAR, b->f);
    b->chars++;
}

/* What follows the bar of a segment that has unmapped memory: its mapped bytes, then what each
 * '~' stands for, in bar order (dots need no words: they are drawn at scale), or the unmapped
 * bytes when nothing was collapsed. */
static void put_unmapped_note(FILE *f, const tessera_page_segment *s, const struct map_run *runs,
                              uint32_t n, uint64_t keep_max)
{
    char b1[48];
    uint64_t mapped = s->mapped < s->size ? s->mapped : s->size;
    uint32_t markers = 0;
    for (uint32_t i = 0; i < n; i++)
        markers += runs[i].state == C_UNMAPPED && runs[i].len > keep_max;
    if (mapped == s->size && markers == 0)
        return;
    fprintf(f, "  %s mapped, ", ts_format_bytes(b1, sizeof b1, mapped));
    if (markers == 0) {
        fprintf(f, "%s unmapped", ts_format_bytes(b1, sizeof b1, s->size - mapped));
        return;
    }
    uint32_t listed = 0;
    uint64_t rest = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (runs[i].state != C_UNMAPPED || runs[i].len <= keep_max)
            continue;
        if (listed < MARKERS_LISTED)
            fprintf(f, "%s%c %s", listed ? ", " : "", MARKER_CHAR,
                    ts_format_bytes(b1, sizeof b1, runs[i].len));
        else
            rest += runs[i].len; /* no overflow: runs add up to at most the segment's size */
        listed++;
    }
    if (listed > MARKERS_LISTED)
        fprintf(f, " and %" PRIu32 " more (%s)", listed - MARKERS_LISTED,
                ts_format_bytes(b1, sizeof b1, rest));
    fputs(" unmapped", f);
}

void ts_render_map(FILE *f, const ts_proc_view *v, const tessera_page_slot_head *head,
                   const tessera_page_segment *segs, const tessera_page_block *blocks,
                   unsigned width)
{
    const tessera_page_map *m = &head->map;
    char b1[48], b2[48], b3[48], b4[48], b5[48], b6[48];
    if (width < 8)
        width = 8;
    if (width > 1024)
        width = 1024;
    fprintf(f, "segment map of pid %d (", v->pid);
    ts_render_put_command(f, v->hdr.cmdline, sizeof v->hdr.cmdline, 40, false); /* in parentheses */
    fprintf(f, "), device %" PRId32 ", context 0x%" PRIx64 "\n", head->device, head->context_id);
    if (!(m->flags & TESSERA_MAP_VALID)) {
        fprintf(f, "no segment map published yet (the allocator publishes one after a segment "
                   "change, an out-of-memory, and periodically)\n");
        return;
    }
    /* The runs of any one segment (a run per block, two more past the recorded blocks) fit in
     * runs, and their lengths in scratch. */
    uint32_t most_blocks = 0;
    for (uint32_t i = 0; i < m->nsegments; i++)
        if (segs[i].nblocks > most_blocks)
            most_blocks = segs[i].nblocks;
    struct map_run *runs = calloc((size_t)most_blocks + 2, sizeof *runs);
    uint64_t *scratch = calloc((size_t)most_blocks + 2, sizeof *scratch);
    if (!runs || !scratch) {
        free(runs);
        free(scratch);
        fprintf(f, "(out of memory drawing the map)\n");
        return;
    }

    /* One scale for all segments, set by mapped memory: the segment with the most mapped bytes
     * fills width characters (rounded up to a power of two bytes per character). An expandable
     * segment reserves far more address space than it maps (1 1/8 of the device): scaled to
     * its virtual size, its blocks would share one character. Only when nothing at all is
     * mapped does the largest segment set the scale (then every bar is dots, as it should be). */
    uint64_t largest_mapped = 0, largest_seg = 1;
    for (uint32_t i = 0; i < m->nsegments; i++) {
        uint64_t mapped = runs_mapped(runs, segment_runs(&segs[i], blocks, runs));
        if (mapped > largest_mapped)
            largest_mapped = mapped;
        if (segs[i].size > largest_seg)
            largest_seg = segs[i].size;
    }
    uint64_t basis = largest_mapped ? largest_mapped : largest_seg;
    uint64_t scale = next_pow2(cells_for(basis, width));
    fprintf(f, "taken at op %" PRIu64 "; %" PRIu32 " segments, %" PRIu32 " blocks; scale: 1 character = %s\n",
            m->ops, m->total_segments, m->total_blocks, ts_format_bytes(b1, sizeof b1, scale));
    /* The map is refreshed at segment changes and every few dozen operations: say how far
     * behind the counters it is (tessera-stat snapshot asks the process for a fresh one). */
    uint64_t now_ops = (uint64_t)head->stats.num_ops;
    if (now_ops <= m->ops)
        fprintf(f, "age: current (no allocator operation since it was taken)\n");
    else
        fprintf(f, "age: %" PRIu64 " operation%s since it was taken (the counters are current; "
                   "blocks changed since then are not shown)\n",
                now_ops - m->ops, now_ops - m->ops == 1 ? "" : "s");
    fprintf(f, "legend: X allocated  p pending free  - free  . unmapped (address space, no memory)"
               "  s stitched (allocated)  ? not recorded\n"
               "        %c unmapped range too long to draw at this scale: its size follows the bar\n",
            MARKER_CHAR);
    if (m->flags & TESSERA_MAP_TRUNCATED)
        fprintf(f, "map truncated: %" PRIu32 " of %" PRIu32 " segments and %" PRIu32 " of %" PRIu32
                   " blocks recorded (limits %u and %u); the totals below cover everything\n",
                m->nsegments, m->total_segments, m->nblocks, m->total_blocks,
                TESSERA_PAGE_MAX_SEGMENTS, TESSERA_PAGE_MAX_BLOCKS);
    fputc('\n', f);

    for (uint32_t i = 0; i < m->nsegments; i++) {
        const tessera_page_segment *s = &segs[i];
        uint32_t n = segment_runs(s, blocks, runs);
        uint64_t keep_max = keep_max_unmapped(runs, n, scale, width, scratch);
        fprintf(f, "%4" PRIu32 "  0x%012" PRIx64 " %11s  %-10s %-5s |", i, s->address,
                ts_format_bytes(b1, sizeof b1, s->size), kind_name(s->kind),
                s->pool == TESSERA_POOL_SMALL ? "small" : "large");
        struct map_bar bar = {.f = f, .scale = scale};
        for (uint32_t r = 0; r < n; r++) {
            if (runs[r].state == C_UNMAPPED && runs[r].len > keep_max)
                bar_marker(&bar);
            else
                bar_add(&bar, runs[r].state, runs[r].len);
        }
        bar_flush(&bar);
        if (bar.chars == 0)
            fputc(CELL_CHAR[C_UNKNOWN], f); /* an empty segment: never an empty bar */
        fputs("|", f);
        put_unmapped_note(f, s, runs, n, keep_max);
        if (s->nblocks < s->nblocks_total)
            fprintf(f, " (%" PRIu32 " of %" PRIu32 " blocks recorded)", s->nblocks, s->nblocks_total);
        fputc('\n', f);
    }
    free(runs);
    free(scratch);
    if (m->nsegments < m->total_segments)
        fprintf(f, "   ... %" PRIu32 " more segments not recorded\n", m->total_segments - m->nsegments);

    /* What the counters count, said beside what the map shows: reserved_bytes is memory mapped in
     * plain and expandable segments (a stitched range maps pages those already hold, so it is
     * not reserved again); segment.*.current counts plain segments only, as PyTorch counts its
     * cudaMalloc segments (an expandable segment is one reservation of address space, mostly
     * unmapped). */
    uint32_t kinds[TESSERA_SEGMENT_KIND_COUNT] = {0};
    uint64_t stitched_mapped = 0;
    for (uint32_t i = 0; i < m->nsegments; i++) {
        kinds[segs[i].kind]++;
        if (segs[i].kind == TESSERA_SEGMENT_STITCHED)
            stitched_mapped += segs[i].mapped;
    }
    uint64_t reserved = m->mapped_bytes >= stitched_mapped ? m->mapped_bytes - stitched_mapped : 0;
    fprintf(f, "\nreserved %s (mapped memory: what reserved_bytes counts) in %" PRIu32
               " segments of %s address space: allocated %s, pending free %s, free %s in %" PRIu32
               " blocks, unmapped %s\n",
            ts_format_bytes(b1, sizeof b1, reserved), m->total_segments,
            ts_format_bytes(b2, sizeof b2, m->segment_bytes),
            ts_format_bytes(b3, sizeof b3, m->allocated_bytes),
            ts_format_bytes(b4, sizeof b4, m->pending_bytes),
            ts_format_bytes(b5, sizeof b5, m->free_bytes), m->free_blocks,
            ts_format_bytes(b6, sizeof b6, m->unmapped_bytes));
    fprintf(f, "segments%s: %" PRIu32 " plain, %" PRIu32 " expandable, %" PRIu32
               " stitched; segment.all.current counts the plain ones only (as PyTorch counts its "
               "cudaMalloc segments), and a stitched range maps pages of the others: not reserved "
               "again\n",
            m->nsegments < m->total_segments ? " recorded" : "", kinds[TESSERA_SEGMENT_PLAIN],
            kinds[TESSERA_SEGMENT_EXPANDABLE], kinds[TESSERA_SEGMENT_STITCHED]);
    fprintf(f, "largest free block %s", ts_format_bytes(b1, sizeof b1, m->largest_free));
    if (m->free_blocks == 0)
        fprintf(f, ": nothing is free in the cache, so every new request needs new device memory");
    else if (m->free_blocks == 1)
        fprintf(f, ": it is all the free cached memory; a request above it needs a new segment");
    else if (m->largest_free < m->free_bytes)
        fprintf(f, ": a request above it needs a new segment although %s are free in %" PRIu32 " pieces",
                ts_format_bytes(b2, sizeof b2, m->free_bytes), m->free_blocks);
    if (m->pending_bytes)
        fprintf(f, " (%s more become free when their fences complete)",
                ts_format_bytes(b3, sizeof b3, m->pending_bytes));
    fputc('\n', f);
}
