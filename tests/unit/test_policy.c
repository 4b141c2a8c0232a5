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

/* Rule: the live-range bound does not refuse while partly used ranges hold the memory.
 *
 * Fragment (the shape of batch_drift's steps, in miniature): 2N holes of one 2 MiB page each,
 * kept apart by live 2 MiB blocks; then N times: ask for 4 MiB (no free block fits: two holes
 * are stitched), free it, ask for 3 MiB (served from that range, whose last MiB stays free and
 * is no whole page). N ranges end up live and partly used, none entirely free, so none can be
 * given back. With N above the old bound (256) every request must still be stitched: nothing
 * is grown, and the driver calls are those of the holes' pages plus two maps per range. */
static void test_policy_range_bound_does_not_refuse(void **state)
{
    (void)state;
    enum { N = 300 };
    ts_config cfg = conf_of("defragment:True");
    assert_true(cfg.stitch_max_ranges >= N); /* the default bound: what a user gets */
    fixture f;
    fx_open(&f, 4 * GiB, &cfg, true, false);
    static uintptr_t hole[2 * N], sep[2 * N], part[N];
    for (int j = 0; j < 2 * N; j++) {
        hole[j] = fx_alloc(&f, 2 * MiB);
        sep[j] = fx_alloc(&f, 2 * MiB);
    }
    for (int j = 0; j < 2 * N; j++)
        fx_free(&f, hole[j]);
    const size_t filled = 4 * N * 2 * MiB; /* every page the fill mapped */
    for (int i = 0; i < N; i++) {
        uintptr_t r = fx_alloc(&f, 4 * MiB);
        fx_free(&f, r);
        part[i] = fx_alloc(&f, 3 * MiB);
        if (part[i] != r)
            fail_msg("range %d: 3 MiB did not reuse the 4 MiB range", i);
    }
    const tessera_device_stats *st = fx_stats(&f);
    if (st->num_stitches != N || st->reserved_bytes[TESSERA_POOL_ALL].current != (int64_t)filled)
        fail_msg("%lld stitches (want %d), %lld bytes reserved (want %zu): the bound refused",
                 (long long)st->num_stitches, N,
                 (long long)st->reserved_bytes[TESSERA_POOL_ALL].current, filled);
    assert_int_equal(st->stitched_bytes, N * 4 * MiB);
    assert_int_equal(st->num_alloc_retries, 0);
    ts_devmodel_counters dc = fx_counters(&f);
    assert_int_equal(dc.vm_creates, 4 * N);         /* one per 2 MiB page of the fill */
    assert_int_equal(dc.vm_maps, 4 * N + 2 * N);    /* and two aliases per range */
    assert_int_equal(dc.vm_reserves, 1 + N);        /* the segment's, one per range */
    assert_int_equal(dc.vm_unmaps + dc.synchronizes, 0); /* nothing given back */
    for (int i = 0; i < N; i++)
        fx_free(&f, part[i]);
    for (int j = 0; j < 2 * N; j++)
        fx_free(&f, sep[j]);
    ts_empty_cache(f.a);
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
        cmocka_unit_test(test_policy_range_bound_does_not_refuse),
        cmocka_unit_test(test_policy_stitched_range_grows_in_place),
        cmocka_unit_test(test_policy_coarse_handles_cost_like_pytorch_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
