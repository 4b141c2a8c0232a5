/* cmocka tests of the defragmentation policy's rules: each replays a small trace fragment over
 * the device model, configured as a user would configure it (the configuration parser, then the
 * allocator's resolve step), and checks the exact memory reserved and driver calls made. */
#include <stdio.h>

#include "tests/unit/fixture.h"

/* The configuration a user gets from this string (strict parse; the allocator resolves it). */
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

/* Rule: stitching's live-range bound (stitch_max_ranges, 4096 by default) refuses only at the
 * bound, and there gives free ranges back before refusing.
 *
 * Fragment (the shape of batch_drift's steps, in miniature): 2N + 2 holes of one 2 MiB page each,
 * kept apart by live 2 MiB blocks; then N times: ask for 4 MiB (no free block fits: two holes
 * are stitched), free it, ask for 3 MiB (served from that range, whose last MiB stays free and
 * is no whole page). N = 4096 ranges end up live and partly used, none entirely free. Below the
 * bound every request is stitched. At the bound, a 4 MiB request is refused by stitching
 * (nothing to give back) and grows the segment by 4 MiB instead, although two holes are free.
 * Then one range is freed: an 8 MiB request (no range grows to it: 4 MiB + 2 MiB of headroom) gives
 * that range back (one synchronise, its two pages unmapped) and stitches the four free holes. */
static void test_policy_range_bound_refuses_only_at_the_bound(void **state)
{
    (void)state;
    enum { N = 4096, HOLES = 2 * N + 2 };
    ts_config cfg = conf_of("defragment:True");
    assert_int_equal(cfg.stitch_max_ranges, N); /* the default bound: what a user gets */
    fixture f;
    fx_open(&f, 64 * GiB, &cfg, true, false);
    static uintptr_t hole[HOLES], sep[HOLES], part[N];
    uintptr_t p = 0;
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
    for (int i = 0; i < N; i++) {
        uintptr_t r = 0;
        assert_int_equal(ts_malloc(f.a, 4 * MiB, 0, &r), TS_OK);
        assert_int_equal(ts_free(f.a, r), TS_OK);
        assert_int_equal(ts_malloc(f.a, 3 * MiB, 0, &part[i]), TS_OK);
        if (part[i] != r)
            fail_msg("range %d: 3 MiB did not reuse the 4 MiB range", i);
    }
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
    p = fx_alloc(&f, 4 * MiB);
    st = fx_stats(&f);
    assert_int_equal(st->num_stitches, N);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (int64_t)(filled + 4 * MiB));
    assert_int_equal(fx_counters(&f).vm_reserves, 1 + N);

    /* One range free: given back at the bound, and its pages stitched with the two free holes. */
    fx_free(&f, part[0]);
    uintptr_t q = fx_alloc(&f, 8 * MiB);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_int_equal(st->num_stitches, N + 1);
    assert_int_equal(st->stitched_bytes, (int64_t)N * 4 * MiB + 4 * MiB); /* -4 +8 */
    assert_int_equal(dc.synchronizes, 1);
    assert_int_equal(dc.vm_unmaps, 2);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (int64_t)(filled + 4 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, q, 8 * MiB));
    fx_free(&f, q);
    fx_free(&f, p);
    for (int i = 1; i < N; i++)
        assert_int_equal(ts_free(f.a, part[i]), TS_OK);
    for (int j = 0; j < HOLES; j++)
        assert_int_equal(ts_free(f.a, sep[j]), TS_OK);
    ts_empty_cache(f.a);
    fx_check(&f);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(fx_stats(&f)->stitched_bytes, 0);
    fx_close(&f);
}

/* Rule: a freed stitched range that a slightly larger request outgrows grows in place, mapping
 * only the missing pages in the virtual headroom reserved after it (an eighth of the range), and
 * a range whose headroom is used up is not grown: a new range is stitched.
 *
 * Fragment (defragment:True, one handle per 2 MiB page): three 8 MiB holes h0, h1, h2 kept apart
 * by live 2 MiB blocks (15 pages mapped). 14 MiB: no hole fits, so h0 and the first 6 MiB of h1
 * are stitched into a range R of 14 MiB (7 maps), reserved with 2 MiB of headroom. R is freed,
 * then 16 MiB asked for: R grows in place by the one free page left of h1 (1 map, no reserve) and
 * serves the request at R's own address. R is freed again, then 18 MiB asked for: R's headroom is
 * used up, so a new range S takes h2's 4 pages and 5 of R's (9 maps, one reserve). Emptying the
 * cache gives both ranges, every lent page and every reservation back. */
static void test_policy_stitched_range_grows_in_place(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t hole[3], sep[3];
    for (int j = 0; j < 3; j++) {
        hole[j] = fx_alloc(&f, 8 * MiB);
        sep[j] = fx_alloc(&f, 2 * MiB);
    }
    for (int j = 0; j < 3; j++)
        fx_free(&f, hole[j]);
    const int64_t filled = 30 * MiB;

    const uintptr_t r = fx_alloc(&f, 14 * MiB);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(dc.vm_maps, 15 + 7);
    assert_int_equal(dc.vm_reserves, 2); /* the segment's, R's */
    fx_free(&f, r);

    const uintptr_t grown = fx_alloc(&f, 16 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    dc = fx_counters(&f);
    if (grown != r || st->num_stitches != 1 || dc.vm_maps != 15 + 7 + 1 || dc.vm_reserves != 2)
        fail_msg("16 MiB at %#lx (R at %#lx): %lld stitches, %llu maps, %llu reserves; want R "
                 "grown in place: 1 stitch, 23 maps, 2 reserves", (unsigned long)grown,
                 (unsigned long)r, (long long)st->num_stitches, (unsigned long long)dc.vm_maps,
                 (unsigned long long)dc.vm_reserves);
    assert_int_equal(st->stitched_bytes, 16 * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, filled); /* nothing new */
    assert_int_equal(dc.vm_creates, 15);
    assert_true(ts_devmodel_is_backed(f.dev, grown, 16 * MiB));
    fx_free(&f, grown);

    const uintptr_t s = fx_alloc(&f, 18 * MiB);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_true(s != r);
    assert_int_equal(st->num_stitches, 2);
    assert_int_equal(dc.vm_maps, 15 + 7 + 1 + 9);
    assert_int_equal(dc.vm_reserves, 3);
    assert_int_equal(st->stitched_bytes, (16 + 18) * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, filled);
    assert_true(ts_devmodel_is_backed(f.dev, s, 18 * MiB));
    assert_int_equal(dc.vm_unmaps + dc.synchronizes, 0); /* nothing given back yet */

    fx_free(&f, s);
    for (int j = 0; j < 3; j++)
        fx_free(&f, sep[j]);
    ts_empty_cache(f.a);
    fx_check(&f);
    st = fx_stats(&f);
    dc = fx_counters(&f);
    assert_int_equal(st->stitched_bytes, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(dc.bytes_in_use, 0);
    assert_int_equal(dc.vm_unmaps, 15 + 8 + 9); /* every page, every alias */
    assert_int_equal(dc.vm_releases, dc.vm_reserves); /* each range's headroom too */
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

/* Rule (stream order): a stitched range is as recently freed as the latest of its lenders, so
 * handing it out right after its pages were freed makes an order point; so does growing a range
 * in place with a page freed since the last order point, even when the range itself was freed
 * before it.
 *
 * Fragment (defragment:True, several streams, one handle per 2 MiB page): holes h0, h1, h2 of 8
 * MiB apart by live 2 MiB blocks s0, s1, s2, and a live 4 KiB block k in the small pool. 14 MiB:
 * stitched from h0 and three pages of h1, freed just now: order point 1. The range R is freed;
 * k is freed and taken back (order point 2: R is now older than the last order point). s0 is
 * freed, then 16 MiB asked for: R grows in place by s0's page (the smallest run, lowest address),
 * freed after order point 2: order point 3. */
static void test_policy_stitched_range_is_ordered_after_its_lenders(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, true);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    static const int mib[3] = {8, 8, 8};
    uintptr_t hole[3], sep[3];
    holes_of(&f, mib, 3, hole, sep);
    uintptr_t k = fx_alloc(&f, 4 * KiB);
    assert_int_equal(fx_counters(&f).order_points, 0); /* fresh memory only so far */

    const uintptr_t r = fx_alloc(&f, 14 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(fx_counters(&f).order_points, 1);
    fx_free(&f, r);
    fx_free(&f, k);
    assert_int_equal(fx_alloc(&f, 4 * KiB), k);
    assert_int_equal(fx_counters(&f).order_points, 2);

    fx_free(&f, sep[0]);
    const uintptr_t grown = fx_alloc(&f, 16 * MiB);
    assert_int_equal(grown, r);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(fx_counters(&f).order_points, 3);
    fx_free(&f, grown);
    fx_free(&f, k);
    fx_free(&f, sep[1]);
    fx_free(&f, sep[2]);
    ts_empty_cache(f.a);
    fx_close(&f);
}

/* Rule: a range grows in place only by handles that fit its headroom. With handle_policy:coarse
 * the handles are 20 MiB while the headroom is counted in 2 MiB pages.
 *
 * Fragment (defragment:True,handle_policy:coarse): holes A, B, C of 40 MiB (two 20 MiB handles
 * each) apart by live 2 MiB blocks. 60 MiB: stitched from A and B's first handle: a range R of
 * 60 MiB with 8 MiB of headroom (60 / 8, in whole pages). R is freed, then 62 MiB asked for: R's
 * end plus headroom would hold it, but the smallest run, B's last handle, is 20 MiB, more than
 * the headroom: a new range S of 80 MiB (B's last handle, C, R's first handle) serves it. */
static void test_policy_growth_in_place_stays_in_headroom(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,handle_policy:coarse");
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    static const int mib[3] = {40, 40, 40};
    uintptr_t hole[3], sep[3];
    holes_of(&f, mib, 3, hole, sep);
    const uintptr_t r = fx_alloc(&f, 60 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(fx_stats(&f)->stitched_bytes, 60 * MiB);
    fx_free(&f, r);
    const uintptr_t s = fx_alloc(&f, 62 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_true(s != r);
    assert_int_equal(st->num_stitches, 2);
    assert_int_equal(st->stitched_bytes, (60 + 80) * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, s, 62 * MiB));
    fx_free(&f, s);
    holes_close(&f, sep, 3);
}

/* Rule: stitch_min_block_mb: requests below it are never stitched, requests of exactly it are.
 * Fragment (defragment:True,stitch_min_block_mb:8): four 4 MiB holes apart by live 2 MiB blocks.
 * 6 MiB: below the minimum, the segment grows by 6 MiB; 8 MiB: two holes stitched, nothing new. */
static void test_policy_stitch_min_block(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True,stitch_min_block_mb:8");
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
 * Fragment (defragment:True): holes of 6, 4, 4 and 4 MiB in address order. 8 MiB: stitched from
 * the first two 4 MiB holes; then 6 MiB is the 6 MiB hole, and 4 MiB the last 4 MiB hole. */
static void test_policy_stitch_takes_smallest_runs_first(void **state)
{
    (void)state;
    ts_config cfg = conf_of("defragment:True");
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
 * holding the cut at 30 MiB stays. defragment's one handle per 2 MiB page gives back to the
 * page, for eight times the calls. */
static void test_policy_coarse_handles_cost_like_pytorch_pages(void **state)
{
    (void)state;
    const growth_result es = grow_64_keep_30("expandable_segments:True");
    const growth_result coarse = grow_64_keep_30("defragment:True,handle_policy:coarse");
    const growth_result fine = grow_64_keep_30("defragment:True");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_range_bound_refuses_only_at_the_bound),
        cmocka_unit_test(test_policy_stitched_range_grows_in_place),
        cmocka_unit_test(test_policy_coarse_handles_cost_like_pytorch_pages),
        cmocka_unit_test(test_policy_stitched_range_is_ordered_after_its_lenders),
        cmocka_unit_test(test_policy_growth_in_place_stays_in_headroom),
        cmocka_unit_test(test_policy_stitch_min_block),
        cmocka_unit_test(test_policy_stitch_takes_smallest_runs_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
