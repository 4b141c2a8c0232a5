/* cmocka tests of the defragmentation policy's rules: each replays a small trace fragment over
 * the device model, configured as a user would configure it (the configuration parser, then the
 * allocator's resolve step), and checks the exact memory reserved and driver calls made. */
#include <stdio.h>

#include "tests/unit/fixture.h"

/* The configuration a user gets from this string (strict parse; the allocator resolves it).
 * Tests that pin a layout of stitched ranges say growth_batch_mb:0: growth's batch ahead is a rule
 * of its own (test_policy_growth_batches_ahead). */
static ts_config conf_of(const char *text)
{
    ts_config cfg;
    ts_config_diag diag;
    if (ts_config_parse(&cfg, text, "test", TS_CONFIG_STRICT, &diag, NULL, NULL) != 0)
        fail_msg("'%s' does not parse", text);
    return cfg;
}

static ts_devmodel_counters fx_counters(const fixture *f)
{
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f->dev, &dc);
    return dc;
}

/* Rule: stitching's range bound (stitch_max_ranges, 4096 by default) counts live and retired
 * ranges and refuses only at the bound; there it first unmaps the retired ones.
 *
 * Fragment: 2N + 2 holes of one 2 MiB page each, kept apart by live 2 MiB blocks; then N times
 * 4 MiB, kept (no free block fits: two holes are stitched). N = 4096 ranges are live. At the
 * bound a 4 MiB request is refused by stitching (nothing retired) and grows the segment by
 * 4 MiB instead, although two holes are free. One range is freed: it retires at once (its two
 * pages free again, no driver call); an 8 MiB request at the bound unmaps it (one synchronise,
 * its two aliases) and stitches the four free holes. */
static void test_policy_range_bound_refuses_only_at_the_bound(void **state)
{
    (void)state;
    enum { N = 4096, HOLES = 2 * N + 2 };
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:0");
    assert_int_equal(cfg.stitch_max_ranges, N); /* the default bound: what a user gets */
    fixture f;
    fx_open(&f, 64 * GiB, &cfg, true, false);
    static uintptr_t hole[HOLES], sep[HOLES], range[N];
    /* ts_malloc without a heap check per step: the check walks every block, and this layout
     * has tens of thousands (checked once at the end of each phase instead). */
    for (int j = 0; j < HOLES; j++) {
        assert_int_equal(ts_malloc(f.a, 2 * MiB, 0, &hole[j]), TS_OK);
        assert_int_equal(ts_malloc(f.a, 2 * MiB, 0, &sep[j]), TS_OK);
    }
    for (int j = 0; j < HOLES; j++)
        assert_int_equal(ts_free(f.a, hole[j]), TS_OK);
    fx_check(&f);
    const size_t filled = (size_t)2 * HOLES * 2 * MiB; /* every page the fill mapped */
    for (int i = 0; i < N; i++)
        assert_int_equal(ts_malloc(f.a, 4 * MiB, 0, &range[i]), TS_OK);
    fx_check(&f);
    const tessera_device_stats *st = fx_stats(&f);
    if (st->num_stitches != N || st->reserved_bytes[TESSERA_POOL_ALL].current != (int64_t)filled)
        fail_msg("%lld stitches (want %d), %lld bytes reserved (want %zu): refused below the bound",
                 (long long)st->num_stitches, N,
                 (long long)st->reserved_bytes[TESSERA_POOL_ALL].current, filled);
    assert_int_equal(st->stitched_bytes, (int64_t)N * 4 * MiB);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(dc.vm_creates, 2 * HOLES);          /* one per 2 MiB page of the fill */
    assert_int_equal(dc.vm_maps, 2 * HOLES + 2 * N);     /* and two aliases per range */
    assert_int_equal(dc.vm_reserves, 1 + N);             /* the segment's, one per range */
    assert_int_equal(dc.vm_unmaps + dc.synchronizes, 0); /* nothing given back */

    /* At the bound, every range in use: refused, the segment grows instead. */
    uintptr_t p = fx_alloc(&f, 4 * MiB);
    st = fx_stats(&f);
    assert_int_equal(st->num_stitches, N);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (int64_t)(filled + 4 * MiB));
    assert_int_equal(fx_counters(&f).vm_reserves, 1 + N);

    /* One range freed: retired at once, no call; at the bound it is unmapped, and its pages are
     * stitched with the two free holes. */
    fx_free(&f, range[0]);
    assert_int_equal(fx_stats(&f)->stitched_bytes, (int64_t)(N - 1) * 4 * MiB);
    assert_int_equal(fx_counters(&f).vm_unmaps + fx_counters(&f).synchronizes, 0);
    uintptr_t q = fx_alloc(&f, 8 * MiB);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_int_equal(st->num_stitches, N + 1);
    assert_int_equal(st->stitched_bytes, (int64_t)(N - 1) * 4 * MiB + 8 * MiB);
    assert_int_equal(dc.synchronizes, 1);
    assert_int_equal(dc.vm_unmaps, 2);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (int64_t)(filled + 4 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, q, 8 * MiB));
    fx_free(&f, q);
    fx_free(&f, p);
    for (int i = 1; i < N; i++)
        assert_int_equal(ts_free(f.a, range[i]), TS_OK);
    for (int j = 0; j < HOLES; j++)
        assert_int_equal(ts_free(f.a, sep[j]), TS_OK);
    ts_empty_cache(f.a);
    fx_check(&f);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(fx_stats(&f)->stitched_bytes, 0);
    fx_close(&f);
}

/* Holes of the given sizes (MiB), each followed by a live 2 MiB block, in address order, in one
 * expandable segment: the holes are free, the separators are returned in sep. */
static void holes_of(fixture *f, const int *mib, int n, uintptr_t *hole, uintptr_t *sep)
{
    for (int j = 0; j < n; j++) {
        hole[j] = fx_alloc(f, (size_t)mib[j] * MiB);
        sep[j] = fx_alloc(f, 2 * MiB);
    }
    for (int j = 0; j < n; j++)
        fx_free(f, hole[j]);
}

static void holes_close(fixture *f, const uintptr_t *sep, int n)
{
    for (int j = 0; j < n; j++)
        fx_free(f, sep[j]);
    ts_empty_cache(f->a);
    fx_check(f);
    fx_close(f);
}

/* Rule: a stitched range whose last block is free, and that a request outgrows, grows in place:
 * only the missing pages are mapped, in the virtual headroom reserved after it (an eighth of the
 * range); a range whose headroom is used up is not grown (a new range is stitched). A range
 * whose blocks are all free retires, and so does, in turn, a range it lent its pages to.
 *
 * Fragment (defragment:True, one handle per 2 MiB page): two 8 MiB holes h0, h1 kept apart by
 * live 2 MiB blocks (10 pages mapped). A = 13 MiB: no hole fits, so h0 and the first three pages
 * of h1 are stitched into a range R of 14 MiB (7 maps), A at its start, 1 MiB free at its end,
 * 2 MiB of headroom. B = 3 MiB: no free block holds it; R's free end and headroom do: R grows by
 * h1's last page (1 map, no reserve) and B lands at R + 13 MiB. B is freed: R's end [13, 16) is
 * free again, its last page whole. The first separator is freed too; D = 4 MiB: R's headroom is
 * used up, so a new range S takes the separator's page and R's last page (2 maps, one reserve).
 * Freeing A leaves R lent to S; freeing D retires S, which gives R its page back and retires R:
 * no driver call until the cache is emptied, which unmaps both ranges' aliases. */
static void test_policy_stitched_range_grows_in_place(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:0");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    static const int mib[2] = {8, 8};
    uintptr_t hole[2], sep[2];
    for (int j = 0; j < 2; j++) {
        hole[j] = fx_alloc(&f, (size_t)mib[j] * MiB);
        sep[j] = fx_alloc(&f, 2 * MiB);
    }
    for (int j = 0; j < 2; j++)
        fx_free(&f, hole[j]);
    const int64_t filled = 20 * MiB;

    const uintptr_t r = fx_alloc(&f, 13 * MiB);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(dc.vm_maps, 10 + 7);
    assert_int_equal(dc.vm_reserves, 2); /* the segment's, R's */

    const uintptr_t b = fx_alloc(&f, 3 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    dc = fx_counters(&f);
    if (b != r + 13 * MiB || st->num_stitches != 1 || dc.vm_maps != 10 + 7 + 1 ||
        dc.vm_reserves != 2)
        fail_msg("3 MiB at %#lx (R at %#lx): %lld stitches, %llu maps, %llu reserves; want R "
                 "grown in place: 1 stitch, 18 maps, 2 reserves", (unsigned long)b,
                 (unsigned long)r, (long long)st->num_stitches, (unsigned long long)dc.vm_maps,
                 (unsigned long long)dc.vm_reserves);
    assert_int_equal(st->stitched_bytes, 16 * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, filled); /* nothing new */
    assert_int_equal(dc.vm_creates, 10);
    assert_true(ts_devmodel_is_backed(f.dev, r, 16 * MiB));
    fx_free(&f, b);
    fx_free(&f, sep[0]);

    const uintptr_t d = fx_alloc(&f, 4 * MiB);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_true(d < r || d >= r + 16 * MiB);
    assert_int_equal(st->num_stitches, 2);
    assert_int_equal(dc.vm_maps, 10 + 7 + 1 + 2);
    assert_int_equal(dc.vm_reserves, 3);
    assert_int_equal(st->stitched_bytes, (16 + 4) * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, filled);
    assert_true(ts_devmodel_is_backed(f.dev, d, 4 * MiB));

    fx_free(&f, r);
    assert_int_equal(fx_stats(&f)->stitched_bytes, (16 + 4) * MiB); /* R still lends to S */
    fx_free(&f, d);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_int_equal(st->stitched_bytes, 0); /* both retired, in a cascade */
    assert_int_equal(dc.vm_unmaps + dc.synchronizes, 0);
    /* every page is free where it was made: an 8 MiB request is h0 itself, without a stitch */
    const uintptr_t again = fx_alloc(&f, 8 * MiB);
    assert_int_equal(again, hole[0]);
    assert_int_equal(fx_stats(&f)->num_stitches, 2);
    fx_free(&f, again);
    fx_free(&f, sep[1]);
    ts_empty_cache(f.a);
    fx_check(&f);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(dc.bytes_in_use, 0);
    assert_int_equal(dc.vm_unmaps, 10 + 8 + 2); /* every page, every alias */
    assert_int_equal(dc.vm_releases, dc.vm_reserves); /* each range's headroom too */
    assert_int_equal(dc.synchronizes, 1);
    fx_close(&f);
}

/* Rule: a stitched range serves its blocks only: once they are all free it retires, its pages
 * free again in the segments they came from (no driver call: the aliases stay mapped until the
 * cache is released), so a step that repeats finds the same free pages at its start each time.
 *
 * Fragment (defragment:True): three 8 MiB holes apart by live 2 MiB blocks; a step of 14 MiB
 * (stitched: no hole holds it) and 6 MiB (a hole), both freed, done three times. Each step stitches
 * a range of its own at a new address and the 6 MiB lands at the same hole each time; the free
 * pages are the same after every step. Emptying the cache unmaps the three retired ranges. */
static void test_policy_freed_range_retires(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:0");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    static const int mib[3] = {8, 8, 8};
    uintptr_t hole[3], sep[3];
    holes_of(&f, mib, 3, hole, sep);
    uintptr_t six0 = 0;
    for (int step = 0; step < 3; step++) {
        const uintptr_t big = fx_alloc(&f, 14 * MiB);
        const uintptr_t six = fx_alloc(&f, 6 * MiB);
        if (step == 0)
            six0 = six;
        assert_int_equal(six, six0);
        assert_int_equal(fx_stats(&f)->num_stitches, step + 1);
        fx_free(&f, big);
        fx_free(&f, six);
        const tessera_device_stats *st = fx_stats(&f);
        assert_int_equal(st->stitched_bytes, 0);
        ts_devmodel_counters dc = fx_counters(&f);
        assert_int_equal(dc.vm_unmaps + dc.synchronizes, 0);
        assert_int_equal(dc.vm_maps, 15 + 7 * (step + 1)); /* a new range's aliases each step */
        /* the three holes are whole free blocks again */
        for (int j = 0; j < 3; j++) {
            const uintptr_t h = fx_alloc(&f, 8 * MiB);
            assert_int_equal(h, hole[j]);
        }
        for (int j = 0; j < 3; j++)
            fx_free(&f, hole[j]);
    }
    ts_empty_cache(f.a);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(dc.synchronizes, 1);
    assert_int_equal(dc.vm_unmaps, 12 + 3 * 7); /* the holes' pages and the aliases */
    assert_int_equal(dc.vm_releases, 3);        /* each range's reservation */
    holes_close(&f, sep, 3);
}

/* Rule (stream order): a stitched range is as recently freed as the latest of its lenders, so
 * handing it out right after its pages were freed makes an order point; so does growing a range
 * in place with a page freed since the last order point, even when the range's own free end was
 * freed before it.
 *
 * Fragment (defragment:True, several streams, one handle per 2 MiB page): holes h0, h1 of 8 MiB
 * apart by live 2 MiB blocks s0, s1, and a live 4 KiB block k in the small pool. 13 MiB:
 * stitched from h0 and three pages of h1, freed just now: order point 1 (the range R keeps 1 MiB
 * free at its end). k is freed and taken back: order point 2. s0 is freed, then 3 MiB asked
 * for: R grows in place by s0's page (the smallest run, lowest address), freed after order point
 * 2: order point 3. */
static void test_policy_stitched_range_is_ordered_after_its_lenders(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:0");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, true);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    static const int mib[2] = {8, 8};
    uintptr_t hole[2], sep[2];
    holes_of(&f, mib, 2, hole, sep);
    uintptr_t k = fx_alloc(&f, 4 * KiB);
    assert_int_equal(fx_counters(&f).order_points, 0); /* fresh memory only so far */

    const uintptr_t r = fx_alloc(&f, 13 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(fx_counters(&f).order_points, 1);
    fx_free(&f, k);
    assert_int_equal(fx_alloc(&f, 4 * KiB), k);
    assert_int_equal(fx_counters(&f).order_points, 2);

    fx_free(&f, sep[0]);
    const uintptr_t grown = fx_alloc(&f, 3 * MiB);
    assert_int_equal(grown, r + 13 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(fx_counters(&f).order_points, 3);
    fx_free(&f, grown);
    fx_free(&f, r);
    fx_free(&f, k);
    fx_free(&f, sep[1]);
    ts_empty_cache(f.a);
    fx_close(&f);
}

/* Fragment for the two rules below (defragment:True,handle_policy:coarse): twelve 20 MiB holes (a
 * handle each) apart by live 2 MiB blocks. 199 MiB: stitched from ten of them into a range R of
 * 200 MiB with 26 MiB of headroom (200 / 8, in whole pages) and 1 MiB free at its end. Returns
 * R. */
static uintptr_t coarse_range_of(fixture *f, uintptr_t *hole, uintptr_t *sep)
{
    /* (growth_batch_mb:0: each hole and separator a growth of its own, none mapped ahead) */
    ts_config cfg = conf_of("defragment:True,handle_policy:coarse,growth_batch_mb:0");
    fx_open(f, 1 * GiB, &cfg, true, false);
    static const int mib[12] = {20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20};
    holes_of(f, mib, 12, hole, sep);
    const uintptr_t r = fx_alloc(f, 199 * MiB);
    assert_int_equal(fx_stats(f)->num_stitches, 1);
    assert_int_equal(fx_stats(f)->stitched_bytes, 200 * MiB);
    return r;
}

/* Rule: a block's backing (what CUDA IPC exports) is exactly the mappings that cover it, each
 * with its place in its handle: a stitched block of pages of one handle lists each piece at its
 * offset, and a block that ends where the next handle starts lists only its own.
 * Fragment (defragment:True, 1 GiB device): 16 MiB freed, 8 blocks of 2 MiB carved from its
 * handle, every other one freed; 6 MiB is stitched from the first three holes, at 0, 4 and
 * 8 MiB into that handle. Then A and B of 20 MiB, a handle each, back to back: A's backing is
 * A's handle alone. */
static void test_policy_backing_is_the_mappings_of_the_block(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    fx_free(&f, fx_alloc(&f, 16 * MiB));
    uintptr_t two[8];
    for (int i = 0; i < 8; i++)
        two[i] = fx_alloc(&f, 2 * MiB);
    for (int i = 0; i < 8; i += 2)
        fx_free(&f, two[i]);
    const uintptr_t six = fx_alloc(&f, 6 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    ts_backing_piece pc[4];
    size_t n = 0;
    assert_int_equal(ts_lookup_backing(f.a, six + 3 * MiB, NULL, NULL, pc, 4, &n), TS_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_true(pc[i].addr == six + i * 2 * MiB);
        assert_int_equal(pc[i].size, 2 * MiB);
        assert_int_equal(pc[i].offset, i * 4 * MiB);
        assert_true(pc[i].handle == pc[0].handle);
    }
    const uintptr_t A = fx_alloc(&f, 20 * MiB), B = fx_alloc(&f, 20 * MiB);
    assert_true(B == A + 20 * MiB);
    assert_int_equal(ts_lookup_backing(f.a, A, NULL, NULL, pc, 4, &n), TS_OK);
    assert_int_equal(n, 1);
    assert_true(pc[0].addr == A && pc[0].size == 20 * MiB && pc[0].offset == 0);
    fx_free(&f, A);
    fx_free(&f, B);
    fx_free(&f, six);
    for (int i = 1; i < 8; i += 2)
        fx_free(&f, two[i]);
    fx_close(&f);
}

/* Rule: a range grows in place only by pages that fit its headroom. 28 MiB: no free block holds
 * it, and R's end plus headroom (27 MiB) would not: a new range S of 28 MiB from the last two
 * holes (all of one, 8 MiB of the other) serves it. */
static void test_policy_growth_in_place_stays_in_headroom(void **state)
{
    (void)state;
    fixture f;
    uintptr_t hole[12], sep[12];
    const uintptr_t r = coarse_range_of(&f, hole, sep);
    const uintptr_t s = fx_alloc(&f, 28 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_true(s < r || s >= r + 226 * MiB);
    assert_int_equal(st->num_stitches, 2);
    assert_int_equal(st->stitched_bytes, (200 + 28) * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, s, 28 * MiB));
    fx_free(&f, s);
    fx_free(&f, r);
    holes_close(&f, sep, 12);
}

/* Rule: a stitch lends whole pages, also the pages of a larger handle (mapped from their place
 * in it), so coarse handles stitch as finely as a handle per page. 22 MiB: R's end plus headroom
 * holds it; the missing 21 MiB are 22 MiB of pages, all of one 20 MiB handle and the first 2 MiB
 * of another, mapped at R's end: R grows in place, with no second range. */
static void test_policy_stitch_lends_pages_of_handles(void **state)
{
    (void)state;
    fixture f;
    uintptr_t hole[12], sep[12];
    const uintptr_t r = coarse_range_of(&f, hole, sep);
    const uintptr_t s = fx_alloc(&f, 22 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_true(s == r + 199 * MiB);
    assert_int_equal(st->num_stitches, 1);
    assert_int_equal(st->stitched_bytes, (200 + 22) * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (12 * 20 + 12 * 2) * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, s, 22 * MiB));
    /* the grown pages are the last two holes' bytes: the eleventh whole, the twelfth's first
     * 2 MiB (read through both mappings of each byte) */
    uint64_t at, in;
    for (size_t off = 0; off < 22 * MiB; off += 2 * MiB) {
        const uintptr_t lent = off < 20 * MiB ? hole[10] + off : hole[11] + (off - 20 * MiB);
        assert_true(ts_devmodel_content(f.dev, r + 200 * MiB + off, &at));
        assert_true(ts_devmodel_content(f.dev, lent, &in));
        assert_true(at == in);
    }
    assert_true(ts_devmodel_content(f.dev, hole[11] + 2 * MiB, &in));
    assert_true(ts_devmodel_content(f.dev, r + 220 * MiB, &at));
    assert_true(at + 2 * MiB == in);
    fx_free(&f, s);
    fx_free(&f, r);
    holes_close(&f, sep, 12);
}

/* Rule (the default: coarse handles, stitching under pressure): a request that the free pages
 * nearly hold, on a device that cannot serve it whole, gets only what the pages lack mapped new,
 * in the lowest unmapped range that holds it, and is stitched over both, before any retry gives
 * memory back.
 *
 * Fragment (46 MiB device; stitch_min_block_mb:40, so the request is exactly the minimum, which
 * stitches): a 40 MiB block (handles of 20 and 20 MiB), a 4 MiB one (its own handle) and a
 * 2 MiB one after them; the 4 MiB block freed and the cache emptied (an unmapped hole of 4 MiB
 * at [40, 44)); the 40 MiB block freed, then 8 MiB, 2 MiB, 8 MiB and 2 MiB carved from it and
 * both 8 MiB blocks freed: 36 MiB of whole free pages ([0, 8), [10, 18) and [20, 40)), 4 MiB left
 * on the device. 40 MiB: no free block holds it, the segment cannot grow by 40 MiB, the free
 * pages hold 36: the 4 MiB hole is mapped again (it merges with [20, 40)) and the three runs are
 * stitched, with no retry and no handle given back. */
static void test_policy_stitch_tops_up_what_pages_lack(void **state)
{
    (void)state;
    ts_config cfg = conf_of("stitch_min_block_mb:40");
    fixture f;
    fx_open(&f, 46 * MiB, &cfg, true, false);
    const uintptr_t x = fx_alloc(&f, 40 * MiB), y = fx_alloc(&f, 4 * MiB);
    const uintptr_t z = fx_alloc(&f, 2 * MiB);
    assert_true(y == x + 40 * MiB && z == x + 44 * MiB);
    fx_free(&f, y);
    ts_empty_cache(f.a);
    assert_false(ts_devmodel_is_backed(f.dev, y, 4 * MiB));
    fx_free(&f, x);
    const uintptr_t a1 = fx_alloc(&f, 8 * MiB), s1 = fx_alloc(&f, 2 * MiB);
    const uintptr_t a2 = fx_alloc(&f, 8 * MiB), s2 = fx_alloc(&f, 2 * MiB);
    assert_true(a1 == x && s1 == x + 8 * MiB && a2 == x + 10 * MiB && s2 == x + 18 * MiB);
    fx_free(&f, a1);
    fx_free(&f, a2);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 42 * MiB);
    ts_devmodel_counters before = fx_counters(&f);
    const uintptr_t r = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_stitches, 1);
    assert_int_equal(st->num_alloc_retries, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 46 * MiB);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(dc.vm_destroys, before.vm_destroys);
    assert_int_equal(dc.vm_creates, before.vm_creates + 1); /* the 4 MiB lacking */
    assert_true(ts_devmodel_is_backed(f.dev, r, 40 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, y, 4 * MiB)); /* the hole, mapped again */
    /* the range's last 24 MiB are [20, 44): the hole's pages at its end */
    uint64_t at, grown;
    assert_true(ts_devmodel_content(f.dev, r + 36 * MiB, &at));
    assert_true(ts_devmodel_content(f.dev, y, &grown));
    assert_true(at == grown);
    fx_free(&f, r);
    fx_free(&f, s1);
    fx_free(&f, s2);
    fx_free(&f, z);
    ts_empty_cache(f.a);
    fx_check(&f);
    fx_close(&f);
}

/* Rule: stitch_min_block_mb: requests below it are never stitched, requests of exactly it are.
 * Fragment (defragment:True,stitch_min_block_mb:8): four 4 MiB holes apart by live 2 MiB blocks.
 * 6 MiB: below the minimum, the segment grows by 6 MiB; 8 MiB: two holes stitched, nothing new. */
static void test_policy_stitch_min_block(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,stitch_min_block_mb:8,growth_batch_mb:0");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    static const int mib[4] = {4, 4, 4, 4};
    uintptr_t hole[4], sep[4];
    holes_of(&f, mib, 4, hole, sep);
    const int64_t filled = 4 * 6 * MiB;
    uintptr_t below = fx_alloc(&f, 6 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_stitches, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, filled + 6 * MiB);
    uintptr_t at = fx_alloc(&f, 8 * MiB);
    st = fx_stats(&f);
    assert_int_equal(st->num_stitches, 1);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, filled + 6 * MiB);
    fx_free(&f, below);
    fx_free(&f, at);
    holes_close(&f, sep, 4);
}

/* Rule: a stitch takes the smallest runs of free handles first, lowest address first among equal
 * sizes, so the larger free blocks stay whole for the requests that fit them.
 * Fragment (defragment:True,growth_batch_mb:0): holes of 6, 4, 4 and 4 MiB in address order.
 * 8 MiB: stitched from the first two 4 MiB holes; then 6 MiB is the 6 MiB hole, and 4 MiB the
 * last 4 MiB hole. */
static void test_policy_stitch_takes_smallest_runs_first(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,growth_batch_mb:0");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    static const int mib[4] = {6, 4, 4, 4};
    uintptr_t hole[4], sep[4];
    holes_of(&f, mib, 4, hole, sep);
    uintptr_t r = fx_alloc(&f, 8 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    uintptr_t six = fx_alloc(&f, 6 * MiB);
    uintptr_t four = fx_alloc(&f, 4 * MiB);
    if (six != hole[0] || four != hole[3])
        fail_msg("after the stitch, 6 MiB at hole %d and 4 MiB at hole %d (want 0 and 3)",
                 six == hole[0] ? 0 : six == hole[1] ? 1 : six == hole[2] ? 2 : -1,
                 four == hole[3] ? 3 : four == hole[2] ? 2 : four == hole[1] ? 1 : -1);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 26 * MiB);
    fx_free(&f, r);
    fx_free(&f, six);
    fx_free(&f, four);
    holes_close(&f, sep, 4);
}

/* What one 64 MiB growth costs and keeps, then 30 MiB reused from its low end and the cache
 * emptied (the free remainder is [30, 64) MiB of the growth). */
typedef struct growth_result {
    size_t reserved_after_growth, in_use_after_release;
    uint64_t reserves, creates, maps, destroys;
} growth_result;

static growth_result grow_64_keep_30(const char *conf)
{
    ts_config cfg = conf_of(conf);
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    growth_result r;
    uintptr_t p = fx_alloc(&f, 64 * MiB);
    r.reserved_after_growth = (size_t)fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current;
    fx_free(&f, p);
    uintptr_t q = fx_alloc(&f, 30 * MiB);
    assert_int_equal(q, p); /* the low end */
    ts_empty_cache(f.a);
    fx_check(&f);
    ts_devmodel_counters dc = fx_counters(&f);
    r.in_use_after_release = dc.bytes_in_use;
    r.reserves = dc.vm_reserves;
    r.creates = dc.vm_creates;
    r.maps = dc.vm_maps;
    r.destroys = dc.vm_destroys;
    fx_free(&f, q);
    fx_close(&f);
    return r;
}

/* Rule: handle_policy:coarse grows in 2 MiB pages but creates handles of the large segment size
 * (20 MiB), the rest of a growth in one handle: the driver calls of PyTorch's expandable
 * segments (four handles for 64 MiB), without rounding the growth up to a 20 MiB page (64 MiB
 * reserved, not 80). Give-back is by whole handles: [40, 60) and [60, 64) go back, the handle
 * holding the cut at 30 MiB stays. defragment grows so by default; with handle_policy:page (one
 * handle per 2 MiB page) it gives back to the page, for eight times the calls. */
static void test_policy_coarse_handles_cost_like_pytorch_pages(void **state)
{
    (void)state;
    const growth_result es = grow_64_keep_30("expandable_segments:True");
    const growth_result coarse = grow_64_keep_30("defragment:True,handle_policy:coarse");
    const growth_result fine = grow_64_keep_30("defragment:True,handle_policy:page");
    const growth_result dflt = grow_64_keep_30("defragment:True");
    assert_int_equal(dflt.creates, 4);
    assert_int_equal(dflt.in_use_after_release, 40 * MiB);
    assert_int_equal(es.reserved_after_growth, 80 * MiB); /* four 20 MiB pages */
    assert_int_equal(es.creates, 4);
    assert_int_equal(es.destroys, 2);
    assert_int_equal(es.in_use_after_release, 40 * MiB);

    assert_int_equal(coarse.reserved_after_growth, 64 * MiB);
    assert_int_equal(coarse.creates, es.creates); /* 20 + 20 + 20 + 4 MiB */
    assert_int_equal(coarse.maps, es.maps);
    assert_int_equal(coarse.reserves, es.reserves);
    assert_int_equal(coarse.destroys, 2);
    assert_int_equal(coarse.in_use_after_release, 40 * MiB);

    assert_int_equal(fine.reserved_after_growth, 64 * MiB);
    assert_int_equal(fine.creates, 32);
    assert_int_equal(fine.destroys, 17);
    assert_int_equal(fine.in_use_after_release, 30 * MiB);
}

/* Reserved bytes and access grants so far. */
static int64_t reserved(fixture *f)
{
    return fx_stats(f)->reserved_bytes[TESSERA_POOL_ALL].current;
}

static uint64_t grants(const fixture *f)
{
    ts_devmodel_counters dc = fx_counters(f);
    return dc.calls[TS_CALL_SET_ACCESS];
}

/* n allocations of 2 MiB (large pool requests of exactly a page). */
static void alloc_2mib(fixture *f, uintptr_t *p, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = fx_alloc(f, 2 * MiB);
}

/* Rule: with defragment's page handles, a growth at a segment's unmapped tail, right where the
 * last growth ended, maps ahead to whole batches of growth_batch_mb (20 MiB): one grant per batch,
 * and the next requests served with no driver call. The first growth of a segment maps what it
 * needs (nothing says more will follow); the cache's release gives the pages ahead back.
 * Fragment (defragment:True,handle_policy:page,growth_batch_mb:20, 1 GiB device): 2 MiB requests
 * one after another: the first maps 2 MiB, the second 20 MiB (its page and 9 ahead, one grant),
 * the next nine no call, the twelfth 20 MiB again. Larger requests grow by what the free tail
 * lacks, rounded up to whole batches: 27 MiB with 16 MiB free grows 20 MiB, 47 MiB with 9 free
 * grows 40 (one grant each). */
static void test_policy_growth_batches_ahead(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:20");
    assert_int_equal(cfg.growth_batch, 20 * MiB);
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t p[13];
    alloc_2mib(&f, p, 1);
    assert_int_equal(reserved(&f), 2 * MiB);
    assert_int_equal(grants(&f), 1);
    alloc_2mib(&f, p + 1, 1);
    assert_int_equal(reserved(&f), 22 * MiB);
    assert_int_equal(grants(&f), 2);
    assert_int_equal(fx_counters(&f).vm_creates, 11); /* a handle a page all the same */
    alloc_2mib(&f, p + 2, 9);
    assert_int_equal(reserved(&f), 22 * MiB);
    assert_int_equal(grants(&f), 2);
    alloc_2mib(&f, p + 11, 2);
    assert_int_equal(reserved(&f), 42 * MiB);
    assert_int_equal(grants(&f), 3);
    uintptr_t big = fx_alloc(&f, 27 * MiB); /* 16 MiB free ahead + 11 more: grows 20 */
    assert_int_equal(reserved(&f), 62 * MiB);
    assert_int_equal(grants(&f), 4);
    uintptr_t bigger = fx_alloc(&f, 47 * MiB); /* 9 free + 38 more: grows 40, one grant */
    assert_int_equal(reserved(&f), 102 * MiB);
    assert_int_equal(grants(&f), 5);
    fx_check(&f);
    fx_free(&f, big);
    fx_free(&f, bigger);
    for (int i = 0; i < 13; i++)
        fx_free(&f, p[i]);
    ts_empty_cache(f.a); /* the pages ahead go back with the rest */
    assert_int_equal(reserved(&f), 0);
    assert_int_equal(fx_counters(&f).bytes_in_use, 0);
    fx_close(&f);
}

/* Rule: the batch ahead is only taken while what the allocator holds stays within 15/16 of the
 * cap (or of the device), and is dropped, never the growth, when the device cannot create it.
 * Fragment: 2 MiB requests on a 64 MiB device, then under memory_limit:64M on a large one: the
 * third growth (held 22 + 2 + 18 = 42 MiB <= 60) batches, the fourth (42 + 2 + 18 = 62 > 60)
 * maps its one page. Then, with the device refusing the first handle ahead, the second growth
 * maps its own page only and serves the request. */
static void test_policy_growth_batch_bounded(void **state)
{
    (void)state;
    static const struct {
        const char *conf;
        size_t device;
    } cases[] = {{"defragment:True,handle_policy:page,growth_batch_mb:20", 64 * MiB},
                 {"defragment:True,handle_policy:page,growth_batch_mb:20,memory_limit:64M",
                  1 * GiB}};
    for (int c = 0; c < 2; c++) {
        ts_config cfg = conf_of(cases[c].conf);
        fixture f;
        fx_open(&f, cases[c].device, &cfg, true, false);
        uintptr_t p[23];
        alloc_2mib(&f, p, 21);
        assert_int_equal(reserved(&f), 42 * MiB);
        alloc_2mib(&f, p + 21, 2);
        assert_int_equal(reserved(&f), 46 * MiB); /* two pages, no batch */
        for (int i = 0; i < 23; i++)
            fx_free(&f, p[i]);
        fx_close(&f);
    }
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:20");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t p[2];
    alloc_2mib(&f, p, 1);
    ts_devmodel_fail_vm_create_after(f.dev, 2); /* its own page, then the first ahead */
    alloc_2mib(&f, p + 1, 1);
    assert_int_equal(reserved(&f), 4 * MiB);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(dc.bytes_in_use, 4 * MiB); /* the handle that was made is given back */
    assert_int_equal(dc.vm_creates, 2);
    assert_true(ts_devmodel_is_backed(f.dev, p[1], 2 * MiB));
    fx_free(&f, p[0]);
    fx_free(&f, p[1]);
    fx_close(&f);
}

/* Rule: the batch ahead also leaves the device a sixteenth of itself free, counting what other
 * processes hold there (the driver's free memory), so that a neighbour never has to ask back
 * (lending) the pages a batch took ahead of need.
 * Fragment: a 64 MiB device where another process holds 40 MiB (a segment made on the device
 * model outside this allocator): the second 2 MiB growth would batch to 22 MiB by this
 * allocator's own count (24 of 60 MiB), but would leave the device 2 MiB free, under its
 * sixteenth (4 MiB): it maps its own page. With 38 MiB held it leaves exactly the sixteenth and
 * batches; with the other process gone, the same growth batches. */
static void test_policy_growth_batch_leaves_the_device_room(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:20");
    static const struct {
        size_t theirs, reserved;
    } cases[] = {{40 * MiB, 4 * MiB}, {38 * MiB, 22 * MiB}, {0, 22 * MiB}};
    for (int c = 0; c < 3; c++) {
        fixture f;
        fx_open(&f, 64 * MiB, &cfg, true, false);
        ts_backend be = ts_devmodel_backend(f.dev, true, false);
        uintptr_t theirs = 0;
        if (cases[c].theirs)
            assert_int_equal(be.seg_alloc(be.ctx, cases[c].theirs, &theirs), TS_OK);
        uintptr_t p[2];
        alloc_2mib(&f, p, 2);
        assert_int_equal(reserved(&f), cases[c].reserved);
        fx_free(&f, p[0]);
        fx_free(&f, p[1]);
        if (cases[c].theirs)
            assert_int_equal(be.seg_free(be.ctx, theirs, cases[c].theirs), TS_OK);
        fx_close(&f);
    }
}

/* Rule: a growth that is a whole number of batches maps no batch more, and a growth that
 * continues into a hole between mapped pages batches only up to the hole's end.
 * Fragment (defragment:True,growth_batch_mb:20): 2 MiB, then 20 MiB (sequential, exactly a batch:
 * 22 MiB reserved).
 * Then a hole: A 2 MiB [0, 2), B 2 MiB [2, 4) with the batch to 22, C 18 MiB [4, 22), D 2 MiB
 * [22, 24) with the batch to 42; B and C freed and the cache emptied leaves [2, 22) unmapped
 * between A and D. E 4 MiB maps [2, 6) of it (not where the last growth ended: no batch), and
 * F 2 MiB, right after E, batches to the hole's end: [6, 22), 16 MiB. */
static void test_policy_growth_batch_whole_and_holes(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:20");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t p = fx_alloc(&f, 2 * MiB), q = fx_alloc(&f, 20 * MiB);
    assert_int_equal(reserved(&f), 22 * MiB);
    fx_free(&f, p);
    fx_free(&f, q);
    ts_empty_cache(f.a);
    fx_close(&f);

    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t A = fx_alloc(&f, 2 * MiB), B = fx_alloc(&f, 2 * MiB), C = fx_alloc(&f, 18 * MiB);
    uintptr_t D = fx_alloc(&f, 2 * MiB);
    assert_int_equal(reserved(&f), 42 * MiB);
    assert_true(B == A + 2 * MiB && C == A + 4 * MiB && D == A + 22 * MiB);
    fx_free(&f, B);
    fx_free(&f, C);
    ts_empty_cache(f.a);
    assert_int_equal(reserved(&f), 4 * MiB);
    uintptr_t E = fx_alloc(&f, 4 * MiB);
    assert_int_equal(E, A + 2 * MiB);
    assert_int_equal(reserved(&f), 8 * MiB);
    uintptr_t F = fx_alloc(&f, 2 * MiB);
    assert_int_equal(F, A + 6 * MiB);
    assert_int_equal(reserved(&f), 24 * MiB); /* up to D, not 20 MiB past E */
    assert_true(ts_devmodel_is_backed(f.dev, A, 24 * MiB));
    fx_free(&f, A);
    fx_free(&f, D);
    fx_free(&f, E);
    fx_free(&f, F);
    fx_close(&f);
}

/* Rule: the default's coarse handles grow sequentially by whole handles: a growth that
 * continues where the segment's last one ended maps up to a whole 20 MiB handle (one create, map
 * and grant), and the next requests are served with no driver call; at most a quarter of what
 * the segment maps is held ahead, never leaving the device or the cap less than a quarter free
 * (those pages go back only with their handle); a device that cannot create the batch serves
 * the growth alone.
 * Fragment (the default, 1 GiB device): 100 MiB (a first growth: five handles), then 2 MiB maps
 * one 20 MiB handle, nine more 2 MiB no call, the eleventh 20 MiB again. 2 MiB requests on a
 * fresh segment map 2, 2, 2 MiB, then 4 (a quarter of 8). growth_batch_mb:0 maps what each
 * growth needs. */
static void test_policy_coarse_growth_maps_whole_handles(void **state)
{
    (void)state;
    ts_config cfg = conf_of("stats:True");
    assert_int_equal(cfg.growth_batch, 20 * MiB);
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t big = fx_alloc(&f, 100 * MiB), p[11];
    assert_int_equal(fx_counters(&f).vm_creates, 5);
    alloc_2mib(&f, p, 1);
    assert_int_equal(reserved(&f), 120 * MiB);
    assert_int_equal(fx_counters(&f).vm_creates, 6);
    assert_int_equal(grants(&f), 2);
    alloc_2mib(&f, p + 1, 9);
    assert_int_equal(reserved(&f), 120 * MiB);
    assert_int_equal(fx_counters(&f).vm_creates, 6);
    alloc_2mib(&f, p + 10, 1);
    assert_int_equal(reserved(&f), 140 * MiB);
    assert_int_equal(fx_counters(&f).vm_creates, 7);
    fx_check(&f);
    fx_free(&f, big);
    for (int i = 0; i < 11; i++)
        fx_free(&f, p[i]);
    ts_empty_cache(f.a); /* the handles ahead go back with the rest */
    assert_int_equal(reserved(&f), 0);
    assert_int_equal(fx_counters(&f).bytes_in_use, 0);
    fx_close(&f);

    /* a small segment: the quarter bound */
    fx_open(&f, 1 * GiB, &cfg, true, false);
    static const int64_t after[5] = {2, 4, 6, 10, 10};
    for (int i = 0; i < 5; i++) {
        const uint64_t queries = fx_counters(&f).mem_info_queries;
        alloc_2mib(&f, p + i, 1);
        assert_int_equal(reserved(&f), after[i] * MiB);
        /* the device's free memory is asked only for a batch the bounds allow (the fourth) */
        assert_int_equal(fx_counters(&f).mem_info_queries - queries, i == 3);
    }
    assert_int_equal(fx_counters(&f).vm_creates, 4);
    for (int i = 0; i < 5; i++)
        fx_free(&f, p[i]);
    fx_close(&f);

    /* the device refuses the batch's handle: the growth alone, nothing left behind */
    fx_open(&f, 1 * GiB, &cfg, true, false);
    big = fx_alloc(&f, 100 * MiB);
    ts_devmodel_fail_vm_create_after(f.dev, 1);
    alloc_2mib(&f, p, 1);
    assert_int_equal(reserved(&f), 102 * MiB);
    assert_int_equal(fx_counters(&f).bytes_in_use, 102 * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, p[0], 2 * MiB));
    fx_check(&f);
    fx_free(&f, p[0]);
    fx_free(&f, big);
    fx_close(&f);

    /* room: no batch that would leave less than a quarter of the cap or of the device's free
     * memory (a sixteenth would allow each): after 180 MiB under a 256 MiB cap, or of a 256 MiB
     * device, or with another process holding 700 MiB of 1 GiB; exactly a quarter left (after
     * 172 MiB, or with 648 MiB held by another) is room enough */
    static const struct {
        const char *conf;
        size_t device, theirs, first, reserved;
    } tight[] = {{"memory_limit:256M", 1 * GiB, 0, 180 * MiB, 182 * MiB},
                 {"stats:True", 256 * MiB, 0, 180 * MiB, 182 * MiB},
                 {"stats:True", 1 * GiB, 700 * MiB, 100 * MiB, 102 * MiB},
                 {"memory_limit:256M", 1 * GiB, 0, 172 * MiB, 192 * MiB},
                 {"stats:True", 1 * GiB, 648 * MiB, 100 * MiB, 120 * MiB}};
    for (int c = 0; c < 5; c++) {
        ts_config tc = conf_of(tight[c].conf);
        fx_open(&f, tight[c].device, &tc, true, false);
        ts_backend be = ts_devmodel_backend(f.dev, true, false);
        uintptr_t theirs = 0;
        if (tight[c].theirs)
            assert_int_equal(be.seg_alloc(be.ctx, tight[c].theirs, &theirs), TS_OK);
        big = fx_alloc(&f, tight[c].first);
        alloc_2mib(&f, p, 1);
        assert_int_equal(reserved(&f), tight[c].reserved);
        fx_free(&f, p[0]);
        fx_free(&f, big);
        if (tight[c].theirs)
            assert_int_equal(be.seg_free(be.ctx, theirs, tight[c].theirs), TS_OK);
        fx_close(&f);
    }

    ts_config none = conf_of("growth_batch_mb:0");
    fx_open(&f, 1 * GiB, &none, true, false);
    big = fx_alloc(&f, 100 * MiB);
    alloc_2mib(&f, p, 2);
    assert_int_equal(reserved(&f), 104 * MiB);
    assert_int_equal(fx_counters(&f).vm_creates, 7);
    fx_free(&f, p[0]);
    fx_free(&f, p[1]);
    fx_free(&f, big);
    fx_close(&f);
}

/* Rule: PyTorch's expandable segments, geometric handles, growth_batch_mb:0, page handles
 * unless a batch is asked for, and the small pool grow by what each request needs: with 2 MiB
 * pages (the small pool's, or expandable_page_mb:2) and 2 MiB requests (1 MiB in the small
 * pool), each growth is a page. */
static void test_policy_growth_without_batches(void **state)
{
    (void)state;
    static const char *const confs[] = {
        "defragment:True,growth_batch_mb:0", "defragment:True,handle_policy:page",
        "expandable_segments:True,expandable_page_mb:2",
        "defragment:True,handle_policy:geometric,growth_batch_mb:20"};
    for (int c = 0; c < 4; c++) {
        ts_config cfg = conf_of(confs[c]);
        fixture f;
        fx_open(&f, 1 * GiB, &cfg, true, false);
        uintptr_t p[3];
        alloc_2mib(&f, p, 3);
        assert_int_equal(reserved(&f), 6 * MiB);
        assert_int_equal(grants(&f), 3);
        for (int i = 0; i < 3; i++)
            fx_free(&f, p[i]);
        fx_close(&f);
    }
    /* the small pool: a page holds hundreds of blocks, its growth is never batched */
    ts_config cfg = conf_of("defragment:True,handle_policy:page,growth_batch_mb:20");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t p[5];
    for (int i = 0; i < 5; i++)
        p[i] = fx_alloc(&f, 1 * MiB);
    assert_int_equal(reserved(&f), 6 * MiB); /* three pages, each its own growth */
    for (int i = 0; i < 5; i++)
        fx_free(&f, p[i]);
    fx_close(&f);
}

/* Rule (defragment, memory short): a small request that neither the small pool nor growth can
 * serve takes a free piece of the large pool before anything is released; PyTorch's expandable
 * segments keep their pools apart.
 * Fragment (8 MiB device): the small pool's page full (two 1 MiB blocks), a 5 MiB block in the
 * large pool (three pages, 1 MiB free at its end): the device is full. 512 KiB: no small block,
 * no growth, no stitch (below 2 MiB): the default serves it from the large pool's free MiB, with
 * no retry and no driver call; with expandable_segments:True (2 MiB pages) it runs out of
 * memory. */
static void test_policy_small_request_takes_a_large_piece(void **state)
{
    (void)state;
    static const struct {
        const char *conf;
        bool served;
    } cases[] = {{"defragment:True,stitch_when:pressure", true},
                 {"expandable_segments:True,expandable_page_mb:2", false}};
    for (int c = 0; c < 2; c++) {
        ts_config cfg = conf_of(cases[c].conf);
        fixture f;
        fx_open(&f, 8 * MiB, &cfg, true, false);
        const uintptr_t s1 = fx_alloc(&f, 1 * MiB), s2 = fx_alloc(&f, 1 * MiB);
        const uintptr_t big = fx_alloc(&f, 5 * MiB);
        assert_int_equal(reserved(&f), 8 * MiB);
        const uint64_t creates = fx_counters(&f).vm_creates;
        uintptr_t q = 0;
        const int rc = ts_malloc(f.a, 512 * KiB, 0, &q);
        if (cases[c].served) {
            assert_int_equal(rc, TS_OK);
            assert_int_equal(q, big + 5 * MiB); /* the large pool's free end */
            assert_int_equal(fx_stats(&f)->num_alloc_retries, 0);
            assert_int_equal(fx_counters(&f).vm_creates, creates); /* no new memory */
            assert_int_equal(reserved(&f), 8 * MiB);
            assert_int_equal(fx_counters(&f).vm_unmaps, 0);
            fx_free(&f, q);
        } else {
            assert_int_equal(rc, TS_ENOMEM);
        }
        fx_free(&f, s1);
        fx_free(&f, s2);
        fx_free(&f, big);
        fx_close(&f);
    }
}

/* Rule (defragment): a request of whole pages does not take a hole where it would leave a rest
 * smaller than a page, when a cached block leaves it at least a page; a segment's growing tail is
 * never taken instead. PyTorch's expandable segments keep the plain best fit.
 *
 * Fragment (the default policy, growth_batch_mb:0 so that the segment maps what its blocks
 * need): x 5 MiB, h3 3 MiB, s1 2 MiB, h5 5 MiB, s2 2 MiB and t 4 MiB back to back; h3, h5 and t
 * freed. Free: a 3 MiB hole that begins half a page in, a 5 MiB hole, and the segment's free end.
 * - 2.5 MiB is not whole pages: it takes the best fit, h3, though h5 would leave it a page.
 * - 2 MiB in h3 would strand [7, 8) MiB between live blocks: it takes h5, whose rest is 3 MiB.
 *   Under expandable_segments:True with 2 MiB pages it takes h3.
 * - Once 5 MiB fills h5, 2 MiB takes h3: the only block that leaves a page is the free end. */
static void test_policy_whole_pages_leave_no_sub_page_rest(void **state)
{
    (void)state;
    static const struct {
        const char *conf;
        bool rule;
    } cases[] = {{"growth_batch_mb:0", true},
                 {"expandable_segments:True,expandable_page_mb:2", false}};
    for (int c = 0; c < 2; c++) {
        ts_config cfg = conf_of(cases[c].conf);
        fixture f;
        fx_open(&f, 64 * MiB, &cfg, true, false);
        const uintptr_t x = fx_alloc(&f, 5 * MiB), h3 = fx_alloc(&f, 3 * MiB);
        const uintptr_t s1 = fx_alloc(&f, 2 * MiB), h5 = fx_alloc(&f, 5 * MiB);
        const uintptr_t s2 = fx_alloc(&f, 2 * MiB), t = fx_alloc(&f, 4 * MiB);
        assert_int_equal(h5, x + 10 * MiB);
        assert_int_equal(t, x + 17 * MiB);
        fx_free(&f, h3);
        fx_free(&f, h5);
        fx_free(&f, t);
        const uint64_t maps = fx_counters(&f).vm_maps;

        uintptr_t q = fx_alloc(&f, 2 * MiB + 512 * KiB);
        assert_int_equal(q, h3);
        fx_free(&f, q);

        q = fx_alloc(&f, 2 * MiB);
        assert_int_equal(q, cases[c].rule ? h5 : h3);
        fx_free(&f, q);

        const uintptr_t fill = fx_alloc(&f, 5 * MiB);
        assert_int_equal(fill, h5);
        q = fx_alloc(&f, 2 * MiB);
        assert_int_equal(q, h3);
        assert_int_equal(fx_counters(&f).vm_maps, maps); /* cached blocks only */

        fx_free(&f, q);
        fx_free(&f, fill);
        fx_free(&f, x);
        fx_free(&f, s1);
        fx_free(&f, s2);
        fx_close(&f);
    }
}

/* Rule (defragment): a whole-page request whose best fit leaves exactly a page keeps it, even
 * when that best fit is a growing tail and a block that is not a tail would serve it too.
 *
 * Fragment (34 MiB device, a handle per page, so that the retry can give back part of a hole):
 * eight 1 MiB blocks in the small pool, the last six freed (three free pages); large blocks a
 * 4 MiB, h 8 MiB, c 2 MiB, e 8 MiB, g 2 MiB and d 2 MiB back to back, h and d freed. 12 MiB: no
 * block holds it, the free pages (10 MiB) are too few to stitch, and the device is full: the
 * retry gives back the small pool's three pages and h's last two, and the request grows from the
 * free end. h's first 4 MiB stay mapped and free before the 4 MiB given back: a growing tail that
 * could grow to 8 MiB. With e freed (8 MiB between live blocks), best fit for 2 MiB keeps the
 * tail (e could not grow further than it), and so does the whole-page rule: its rest is a page. */
static void test_policy_whole_pages_keep_a_rest_of_a_page(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,stitch_when:pressure");
    fixture f;
    fx_open(&f, 34 * MiB, &cfg, true, false);
    uintptr_t s[8];
    for (int i = 0; i < 8; i++)
        s[i] = fx_alloc(&f, 1 * MiB);
    const uintptr_t a = fx_alloc(&f, 4 * MiB), h = fx_alloc(&f, 8 * MiB);
    const uintptr_t c = fx_alloc(&f, 2 * MiB), e = fx_alloc(&f, 8 * MiB);
    const uintptr_t g = fx_alloc(&f, 2 * MiB), d = fx_alloc(&f, 2 * MiB);
    assert_int_equal(reserved(&f), 34 * MiB);
    assert_int_equal(d, a + 24 * MiB);
    for (int i = 2; i < 8; i++)
        fx_free(&f, s[i]);
    fx_free(&f, h);
    fx_free(&f, d);
    const uintptr_t r = fx_alloc(&f, 12 * MiB);
    assert_int_equal(r, d); /* grown from the free end */
    assert_int_equal(fx_stats(&f)->num_stitches, 0);
    assert_true(ts_devmodel_is_backed(f.dev, h, 4 * MiB));
    assert_false(ts_devmodel_is_backed(f.dev, h + 4 * MiB, 4 * MiB));
    fx_free(&f, e);

    const uintptr_t q = fx_alloc(&f, 2 * MiB);
    assert_int_equal(q, h);

    fx_free(&f, q);
    fx_free(&f, r);
    fx_free(&f, a);
    fx_free(&f, c);
    fx_free(&f, g);
    fx_free(&f, s[0]);
    fx_free(&f, s[1]);
    fx_close(&f);
}

/* Rule (defragment, memory short): the retry gives back only what the request lacks, from
 * other pools' free memory first and from the request's own segment last, never the free end
 * that its growth maps again.
 * Fragment (22 MiB device, the default policy): eight 1 MiB blocks in the small pool (four
 * pages), the last four freed (two whole pages free at its end); large blocks a 4 MiB, h 6 MiB,
 * c 2 MiB, d 2 MiB, with h and d freed: a 6 MiB hole between a and c, and a free 2 MiB end. The
 * device is full, and the large pool's free pages (8 MiB) are too few to stitch 10 MiB. 10 MiB:
 * the free end holds 2 of it, 8 MiB are missing: the retry unmaps the small pool's two free pages
 * (4 MiB) before the hole, then the hole's last two pages, keeps h's first page mapped and the
 * free end in place, and the request grows from the free end: one synchronise, four unmaps, no
 * full release. */
/* The fragment of the retry tests: eight 1 MiB blocks in the small pool (four 2 MiB pages),
 * then 4, 6, 2 and 2 MiB in the large pool's segment, back to back: 22 MiB, the whole
 * device. */
static void retry_fragment(fixture *f, uintptr_t s[8], uintptr_t *a, uintptr_t *h, uintptr_t *c,
                           uintptr_t *d)
{
    for (int i = 0; i < 8; i++)
        s[i] = fx_alloc(f, 1 * MiB);
    *a = fx_alloc(f, 4 * MiB);
    *h = fx_alloc(f, 6 * MiB);
    *c = fx_alloc(f, 2 * MiB);
    *d = fx_alloc(f, 2 * MiB);
    assert_int_equal(reserved(f), 22 * MiB);
    assert_true(*h == *a + 4 * MiB && *c == *a + 10 * MiB && *d == *a + 12 * MiB);
}

/* The fragment's blocks still held, and the request r, freed; the device closed. */
static void retry_fragment_close(fixture *f, const uintptr_t s[8], uintptr_t a, uintptr_t c,
                                 uintptr_t r)
{
    fx_check(f);
    fx_free(f, r);
    fx_free(f, a);
    fx_free(f, c);
    for (int i = 0; i < 4; i++)
        fx_free(f, s[i]);
    fx_close(f);
}

static void test_policy_retry_gives_back_only_what_lacks(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,stitch_when:pressure");
    fixture f;
    fx_open(&f, 22 * MiB, &cfg, true, false);
    uintptr_t s[8], a, h, c, d;
    retry_fragment(&f, s, &a, &h, &c, &d);
    for (int i = 4; i < 8; i++)
        fx_free(&f, s[i]);
    fx_free(&f, h);
    fx_free(&f, d);
    const uintptr_t r = fx_alloc(&f, 10 * MiB);
    assert_int_equal(r, d); /* grown from the free end */
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(dc.synchronizes, 1);
    assert_int_equal(dc.vm_unmaps, 4); /* the small pool's two free pages, the hole's last two */
    assert_int_equal(fx_stats(&f)->num_stitches, 0);
    assert_int_equal(fx_stats(&f)->num_alloc_retries, 1);
    assert_true(ts_devmodel_is_backed(f.dev, h, 2 * MiB));
    assert_false(ts_devmodel_is_backed(f.dev, h + 2 * MiB, 4 * MiB));
    assert_false(ts_devmodel_is_backed(f.dev, s[4], 4 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, r, 10 * MiB));
    retry_fragment_close(&f, s, a, c, r);
}

/* Rule (release and retry): frees still waiting for their fence (the small pool's, here) count
 * among what the retry can give back, and it still gives back only what lacks; the retry
 * synchronises once, and num_sync_all_streams counts it as it counts every synchronisation
 * (the wait for pending frees just before has retired them: the count is what shows it). The
 * fragment above, with the small pool's frees waiting when the 10 MiB request comes. */
static void test_policy_retry_retires_passed_fences_first(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:page,stitch_when:pressure");
    cfg.reuse_fence = TS_FENCE_EVENTS;
    fixture f;
    fx_open(&f, 22 * MiB, &cfg, true, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    uintptr_t s[8], a, h, c, d;
    retry_fragment(&f, s, &a, &h, &c, &d);
    for (int i = 4; i < 8; i++)
        fx_free(&f, s[i]);
    assert_int_equal(fx_stats(&f)->active[TESSERA_POOL_SMALL].current, 8); /* 4 waiting */
    fx_free(&f, h);
    fx_free(&f, d);
    const uint64_t syncs = (uint64_t)fx_stats(&f)->num_sync_all_streams;
    const uintptr_t r = fx_alloc(&f, 10 * MiB);
    assert_int_equal(r, d);
    assert_int_equal(fx_stats(&f)->num_sync_all_streams, syncs + 1); /* the retry's, once */
    assert_int_equal(fx_stats(&f)->num_alloc_retries, 1);
    assert_int_equal(fx_stats(&f)->active[TESSERA_POOL_SMALL].current, 4);
    /* the small pool's two free pages and the hole's last two went; a and c's pages stayed */
    assert_false(ts_devmodel_is_backed(f.dev, s[4], 4 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, h, 2 * MiB));
    assert_false(ts_devmodel_is_backed(f.dev, h + 2 * MiB, 4 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, a, 4 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, c, 2 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, r, 10 * MiB));
    retry_fragment_close(&f, s, a, c, r);
}

/* Rule: at the edge a step that repeats reaches a steady state: a retry under pressure gives
 * pages back from between the step's blocks and maps them at the segment's end, leaving a hole
 * in the free top of the segment once the step's blocks are freed; before the next request the
 * free top gives its whole handles back, so every step grows from the layout the first one grew
 * from.
 *
 * Fragment: a training-like step (tests/bench/edge.py's loop 11: twelve layers, parameters and
 * biases once; per step a workspace, an activation and a temporary per layer forward, then a
 * workspace and two gradients per layer backward, a read-back, every gradient freed) on a
 * 188 MiB device. The first step's last activation is served by the retry (a hole in the middle
 * of the step's memory); without the rule the second step runs around that hole and leaves
 * another one, and the third step's first gradient finds no memory. With it, every step ends
 * with the same memory reserved and in the same number of blocks, and eight steps run. */
static const size_t step_param[12] = {5417632, 6205896, 8880884, 5515036, 5824720, 6408572,
                                      3452564, 5854576, 6720508, 7917624, 2788020, 4324124};
static const size_t step_bias[12] = {27864,  145308, 185876, 170412, 15072,  160184,
                                     107944, 122844, 175516, 197796, 165460, 174508};
static const size_t step_act[12] = {7224612, 5431632, 11891452, 5992204, 7636252,  8287224,
                                    5621404, 11080524, 10786044, 15843064, 11774972, 13299612};
static const size_t step_work[12] = {6813124, 8689488,  6323572, 4257000, 12555876, 12533216,
                                     10739904, 9212688, 4685088, 3697616, 4382456,  1858556};

/* One step; false at the first request the device cannot serve (what it holds is freed). */
static bool repeat_step(fixture *f)
{
    uintptr_t act[12] = {0}, grad[24] = {0}, ws, tmp, loss;
    bool ok = true;
    for (int i = 0; ok && i < 12; i++) {
        ok = ts_malloc(f->a, step_work[i], 0, &ws) == TS_OK;
        ok = ok && ts_malloc(f->a, step_act[i], 0, &act[i]) == TS_OK;
        ok = ok && ts_malloc(f->a, step_bias[i], 0, &tmp) == TS_OK;
        if (ok) {
            fx_free(f, ws);
            fx_free(f, tmp);
        }
    }
    for (int i = 11, g = 0; ok && i >= 0; i--) {
        ok = ts_malloc(f->a, step_work[i], 0, &ws) == TS_OK;
        ok = ok && ts_malloc(f->a, step_param[i], 0, &grad[g++]) == TS_OK;
        ok = ok && ts_malloc(f->a, step_bias[i], 0, &grad[g++]) == TS_OK;
        if (ok) {
            fx_free(f, act[i]);
            act[i] = 0;
            fx_free(f, ws);
        }
    }
    if (ok && (ok = ts_malloc(f->a, 4, 0, &loss) == TS_OK))
        fx_free(f, loss);
    for (int i = 0; i < 24; i++)
        if (grad[i])
            fx_free(f, grad[i]);
    for (int i = 0; i < 12; i++)
        if (act[i])
            fx_free(f, act[i]);
    return ok;
}

/* The loop above for eight steps on a device of mib MiB under conf: every step ends with the
 * same memory reserved (mib MiB: the edge), a request during a capture unmaps nothing, and the
 * first request after it gives the step's pages back, leaving kept_mib MiB reserved. At the
 * edge, memory short: the retry ran. */
static void repeated_step_steady(const char *conf, int64_t mib, int64_t kept_mib)
{
    ts_config cfg = conf_of(conf);
    fixture f;
    fx_open(&f, (size_t)mib * MiB, &cfg, true, false);
    uintptr_t kept[24];
    for (int i = 0; i < 12; i++) {
        kept[i] = fx_alloc(&f, step_param[i]);
        kept[12 + i] = fx_alloc(&f, step_bias[i]);
    }
    int64_t reserved_after[9] = {0};
    for (int step = 1; step <= 8; step++) {
        if (!repeat_step(&f))
            fail_msg("%s: step %d ran out of memory after %d steps ran", conf, step, step - 1);
        fx_check(&f);
        reserved_after[step] = fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current;
        if (step > 1 && reserved_after[step] != reserved_after[step - 1])
            fail_msg("%s: step %d ended with %lld bytes reserved, step %d with %lld", conf, step,
                     (long long)reserved_after[step], step - 1,
                     (long long)reserved_after[step - 1]);
    }
    /* each step's retry left a hole, so before the next request the step's pages went back */
    assert_int_equal(reserved_after[8], mib * (int64_t)MiB);
    /* not during a capture: nothing is unmapped then (the capture would record work on pages
     * about to go), and the pages go with the first request after it */
    ts_devmodel_counters c0, c1;
    ts_devmodel_counters_get(f.dev, &c0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    const uintptr_t during = fx_alloc(&f, 4);
    ts_devmodel_counters_get(f.dev, &c1);
    assert_int_equal(c1.vm_unmaps, c0.vm_unmaps);
    assert_int_equal(c1.synchronizes, c0.synchronizes);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, mib * (int64_t)MiB);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    fx_free(&f, fx_alloc(&f, 4));
    fx_free(&f, during);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current,
                     kept_mib * (int64_t)MiB);
    assert_true(fx_stats(&f)->num_alloc_retries > 0); /* at the edge: the retry ran */
    for (int i = 0; i < 24; i++)
        fx_free(&f, kept[i]);
    fx_close(&f);
}

/* With a handle per page, on 188 MiB: what stays reserved is the parameters' pages (68 MiB) and
 * a small-pool page. */
static void test_policy_repeated_step_reaches_a_steady_state(void **state)
{
    (void)state;
    repeated_step_steady("defragment:True,handle_policy:page,stitch_when:pressure", 188, 70);
}

/* How many of eight steps of the loop above run on a device of mib MiB under the default (the
 * parameters allocated first); every step that runs after the first ends with the memory
 * reserved that the first left. */
static int default_steps_run(size_t mib)
{
    ts_config cfg = conf_of("");
    fixture f;
    fx_open(&f, mib * MiB, &cfg, true, false);
    uintptr_t kept[24];
    for (int i = 0; i < 12; i++) {
        kept[i] = fx_alloc(&f, step_param[i]);
        kept[12 + i] = fx_alloc(&f, step_bias[i]);
    }
    int steps = 0;
    int64_t first = 0;
    while (steps < 8 && repeat_step(&f)) {
        fx_check(&f);
        const int64_t r = fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current;
        if (steps++ == 0)
            first = r;
        else if (r != first)
            fail_msg("%zu MiB: step %d ended with %lld bytes reserved, step 1 with %lld", mib,
                     steps, (long long)r, (long long)first);
    }
    for (int i = 0; i < 24; i++)
        fx_free(&f, kept[i]);
    fx_close(&f);
    return steps;
}

/* The default (coarse handles, stitched by pages) needs 4 MiB more for this loop: a handle that
 * holds a live block cannot go back in part. Steady and monotone at its edge all the same: on
 * 190 MiB the first step runs out of memory, on every size from 192 MiB all eight steps run, each
 * ending with what the first kept. */
static void test_policy_repeated_step_steady_by_default(void **state)
{
    (void)state;
    assert_int_equal(default_steps_run(190), 0);
    for (size_t mib = 192; mib <= 200; mib += 2)
        assert_int_equal(default_steps_run(mib), 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_range_bound_refuses_only_at_the_bound),
        cmocka_unit_test(test_policy_stitched_range_grows_in_place),
        cmocka_unit_test(test_policy_freed_range_retires),
        cmocka_unit_test(test_policy_coarse_handles_cost_like_pytorch_pages),
        cmocka_unit_test(test_policy_stitched_range_is_ordered_after_its_lenders),
        cmocka_unit_test(test_policy_growth_in_place_stays_in_headroom),
        cmocka_unit_test(test_policy_stitch_lends_pages_of_handles),
        cmocka_unit_test(test_policy_backing_is_the_mappings_of_the_block),
        cmocka_unit_test(test_policy_stitch_tops_up_what_pages_lack),
        cmocka_unit_test(test_policy_stitch_min_block),
        cmocka_unit_test(test_policy_stitch_takes_smallest_runs_first),
        cmocka_unit_test(test_policy_growth_batches_ahead),
        cmocka_unit_test(test_policy_growth_batch_bounded),
        cmocka_unit_test(test_policy_growth_batch_leaves_the_device_room),
        cmocka_unit_test(test_policy_growth_batch_whole_and_holes),
        cmocka_unit_test(test_policy_coarse_growth_maps_whole_handles),
        cmocka_unit_test(test_policy_growth_without_batches),
        cmocka_unit_test(test_policy_small_request_takes_a_large_piece),
        cmocka_unit_test(test_policy_whole_pages_leave_no_sub_page_rest),
        cmocka_unit_test(test_policy_whole_pages_keep_a_rest_of_a_page),
        cmocka_unit_test(test_policy_retry_gives_back_only_what_lacks),
        cmocka_unit_test(test_policy_retry_retires_passed_fences_first),
        cmocka_unit_test(test_policy_repeated_step_reaches_a_steady_state),
        cmocka_unit_test(test_policy_repeated_step_steady_by_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
