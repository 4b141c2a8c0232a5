/* cmocka tests of the allocator core over the device model: PyTorch's rules, exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>


#include "tests/unit/fixture.h"

/* --- sizes -------------------------------------------------------------------------------- */

static void test_size_request_rounds_to_512_bytes_or_divisions(void **state)
{
    (void)state;
    ts_config cfg;
    ts_config_defaults(&cfg);
    assert_int_equal(ts_round_size(&cfg, 1), 512);
    assert_int_equal(ts_round_size(&cfg, 100), 512);
    assert_int_equal(ts_round_size(&cfg, 512), 512);
    assert_int_equal(ts_round_size(&cfg, 513), 1024);
    assert_int_equal(ts_round_size(&cfg, 1000), 1024);
    assert_int_equal(ts_round_size(&cfg, 5000000), 5000192);
    for (int i = 0; i < 16; i++)
        cfg.roundup_power2_divisions[i] = 4;
    /* 1200 B with 4 divisions: not above 512*4, so the plain 512 rule (reference 2.2). */
    assert_int_equal(ts_round_size(&cfg, 1200), 1536);
    /* 5,000,000 B with 4 divisions: floor 4 MiB, step 1 MiB -> 5 MiB. */
    assert_int_equal(ts_round_size(&cfg, 5000000), 5 * MiB);
    assert_int_equal(ts_round_size(&cfg, 4 * MiB), 4 * MiB); /* powers of two stay */
    assert_int_equal(ts_round_size(&cfg, 4 * MiB + 1), 5 * MiB);
    assert_int_equal(ts_round_size(&cfg, 3000), 3072); /* 3000 > 2048: floor 2048, step 512 */
    /* divisions 1 means off */
    for (int i = 0; i < 16; i++)
        cfg.roundup_power2_divisions[i] = 1;
    assert_int_equal(ts_round_size(&cfg, 5000000), 5000192);
}

static void test_size_segment_by_request_class(void **state)
{
    (void)state;
    ts_config cfg;
    ts_config_defaults(&cfg);
    assert_int_equal(ts_allocation_size(&cfg, 1 * KiB), 2 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 1 * MiB), 2 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 1 * MiB + 512), 20 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 3 * MiB / 2), 20 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 10 * MiB - 512), 20 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 10 * MiB), 10 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 12 * MiB + 300 * KiB + 512), 14 * MiB);
    assert_int_equal(ts_allocation_size(&cfg, 100 * MiB + 512), 102 * MiB);
    cfg.large_segment_size = 32 * MiB;
    assert_int_equal(ts_allocation_size(&cfg, 2 * MiB), 32 * MiB);
}

/* --- pools, split, merge -------------------------------------------------------------------- */

static void test_pool_small_holds_requests_up_to_1mib(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    fx_alloc(&f, 1 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->segment[TESSERA_POOL_SMALL].current, 1);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_SMALL].current, 2 * MiB);
    fx_alloc(&f, 1 * MiB + 1);
    st = fx_stats(&f);
    assert_int_equal(st->segment[TESSERA_POOL_LARGE].current, 1);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_LARGE].current, 20 * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 22 * MiB);
    assert_int_equal(st->num_device_alloc, 2);
    fx_close(&f);
}

static void test_split_carves_low_end_and_free_merges_neighbours(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    uintptr_t a = fx_alloc(&f, 1000); /* 1024 */
    uintptr_t b = fx_alloc(&f, 3000); /* 3072 */
    uintptr_t c = fx_alloc(&f, 512);
    assert_int_equal(b, a + 1024);
    assert_int_equal(c, b + 3072);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->segment[TESSERA_POOL_ALL].current, 1);
    assert_int_equal(st->allocated_bytes[TESSERA_POOL_SMALL].current, 1024 + 3072 + 512);
    assert_int_equal(st->requested_bytes[TESSERA_POOL_SMALL].current, 1000 + 3000 + 512);
    assert_int_equal(st->inactive_split[TESSERA_POOL_ALL].current, 1); /* the tail */
    assert_int_equal(st->inactive_split_bytes[TESSERA_POOL_ALL].current,
                     2 * MiB - (1024 + 3072 + 512));
    fx_free(&f, b); /* a hole between two live blocks */
    st = fx_stats(&f);
    assert_int_equal(st->inactive_split[TESSERA_POOL_ALL].current, 2);
    assert_int_equal(st->inactive_split_bytes[TESSERA_POOL_ALL].current,
                     2 * MiB - (1024 + 512));
    /* best fit prefers the 3072 hole to the large tail, even for a smaller request */
    uintptr_t d = fx_alloc(&f, 2048);
    assert_int_equal(d, b);
    fx_free(&f, d);
    fx_free(&f, a);
    fx_free(&f, c); /* everything merges back into one whole block */
    st = fx_stats(&f);
    assert_int_equal(st->inactive_split[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->inactive_split_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->active[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 2 * MiB);
    assert_int_equal(ts_largest_free_block(f.a), 2 * MiB);
    assert_int_equal(ts_empty_cache(f.a), 2 * MiB);
    st = fx_stats(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->num_device_free, 1);
    fx_close(&f);
}

static void test_split_large_block_only_when_over_1mib_remains(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    /* 19 MiB from a 20 MiB segment: the 1 MiB remainder is not > 1 MiB: no split. */
    uintptr_t a = fx_alloc(&f, 2 * MiB); /* 20 MiB segment, 18 MiB remainder split off */
    uintptr_t b = fx_alloc(&f, 17 * MiB); /* takes 17 of the remaining 18: remainder 1 MiB */
    assert_int_equal(b, a + 2 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->allocated_bytes[TESSERA_POOL_LARGE].current, 2 * MiB + 18 * MiB);
    assert_int_equal(st->requested_bytes[TESSERA_POOL_LARGE].current, 2 * MiB + 17 * MiB);
    assert_int_equal(st->segment[TESSERA_POOL_LARGE].current, 1);
    fx_free(&f, a);
    fx_free(&f, b);
    fx_close(&f);
}

static void test_best_fit_ties_take_lowest_address(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    uintptr_t x = fx_alloc(&f, 12 * MiB);
    uintptr_t y = fx_alloc(&f, 12 * MiB);
    uintptr_t z = fx_alloc(&f, 12 * MiB);
    assert_true(x < y && y < z);
    fx_free(&f, z);
    fx_free(&f, x);
    /* two equal free segments: the lower address wins */
    assert_int_equal(fx_alloc(&f, 11 * MiB), x);
    fx_close(&f);
}

/* --- oversize rules and release_available_cached_blocks -------------------------------------- */

/* An allocator with max_split_size_mb:40 over a 1 GiB device, for the oversize rules. */
static void fx_open_max_split_40(fixture *f)
{
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.max_split_size = 40 * MiB;
    fx_open(f, 1 * GiB, &cfg, false, false);
}

/* Oversize rule A: a request below max_split_size never takes an oversize cached block. */
static void test_oversize_rule_a_small_request_skips_oversize_block(void **state)
{
    (void)state;
    fixture f;
    fx_open_max_split_40(&f);
    uintptr_t big = fx_alloc(&f, 50 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->oversize_segments.current, 1);
    assert_int_equal(st->oversize_allocations.current, 1);
    assert_int_equal(st->max_split_size, (int64_t)(40 * MiB));
    fx_free(&f, big);
    uintptr_t p = fx_alloc(&f, 30 * MiB);
    assert_true(p != big);
    st = fx_stats(&f);
    assert_int_equal(st->segment[TESSERA_POOL_ALL].current, 2);
    fx_free(&f, p);
    fx_close(&f);
}

/* Oversize rule B: an oversize request takes a cached oversize block only when the block is less
 * than max_non_split_rounding (default: large_segment_size, 20 MiB) larger, and then whole. */
static void test_oversize_rule_b_takes_block_within_rounding_whole(void **state)
{
    (void)state;
    fixture f;
    fx_open_max_split_40(&f);
    uintptr_t big = fx_alloc(&f, 50 * MiB);
    fx_free(&f, big);
    uintptr_t q = fx_alloc(&f, 45 * MiB); /* 50 < 45 + 20 */
    assert_int_equal(q, big);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->allocated_bytes[TESSERA_POOL_ALL].current, 50 * MiB); /* not split */
    assert_int_equal(st->segment[TESSERA_POOL_ALL].current, 1);
    fx_free(&f, q);
    fx_close(&f);
}

static void test_oversize_rule_b_refuses_block_beyond_rounding(void **state)
{
    (void)state;
    fixture f;
    fx_open_max_split_40(&f);
    uintptr_t big = fx_alloc(&f, 70 * MiB);
    fx_free(&f, big);
    uintptr_t q = fx_alloc(&f, 50 * MiB); /* 70 >= 50 + 20: refused, a new segment */
    assert_true(q != big);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->segment[TESSERA_POOL_ALL].current, 2);
    assert_int_equal(st->allocated_bytes[TESSERA_POOL_ALL].current, 50 * MiB);
    fx_free(&f, q);
    fx_close(&f);
}

/* PyTorch's release_available_cached_blocks, with max_split_size_mb:20 on a 200 MiB device.
 * Cached oversize blocks of 30, 40 and 50 MiB (each its own segment), 70 MiB live: 10 MiB left.
 * A 60 MiB request fits no cached block and no block alone could serve it, so oversize blocks
 * go from the largest down until at least 60 MiB are released: 50, then 40 (90 >= 60), and
 * there it stops: the 30 MiB block stays cached. No release-and-retry (num_alloc_retries 0).
 * Layout after: live 70, 30 (cached), 60 (new); device free 40 MiB. */
static void test_oom_path_releases_oversize_blocks_largest_first(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.max_split_size = 20 * MiB;
    fx_open(&f, 200 * MiB, &cfg, false, false);
    uintptr_t live = fx_alloc(&f, 70 * MiB);
    uintptr_t b30 = fx_alloc(&f, 30 * MiB);
    uintptr_t b40 = fx_alloc(&f, 40 * MiB);
    uintptr_t b50 = fx_alloc(&f, 50 * MiB);
    fx_free(&f, b40);
    fx_free(&f, b30);
    fx_free(&f, b50);
    uintptr_t d = fx_alloc(&f, 60 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_alloc_retries, 0);
    assert_int_equal(st->num_device_free, 2); /* 50 and 40: enough, so 30 stays */
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (70 + 30 + 60) * MiB);
    ts_block_info bi;
    assert_int_equal(ts_lookup(f.a, b30, NULL, &bi), TS_OK);
    assert_int_equal(bi.state, TS_BLOCK_FREE);
    assert_int_equal(bi.size, 30 * MiB);
    assert_int_equal(fx_alloc(&f, 30 * MiB), b30); /* rule B: 30 < 30 + 20, taken whole */
    fx_free(&f, live);
    fx_free(&f, d);
    fx_close(&f);
}

/* The other half of release_available_cached_blocks: when one cached oversize block on the
 * stream is at least as large as the request, that one block (the smallest such) is released
 * and nothing else. max_split_size_mb:20, 200 MiB device: 70 and 80 MiB cached (each too large
 * for a 40 MiB request by rule B: 70 >= 40 + 20), 40 MiB live, 10 MiB left. 40 MiB: the 70 goes,
 * the 80 stays, and the request takes a new segment. */
static void test_oom_path_releases_one_block_when_one_is_enough(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.max_split_size = 20 * MiB;
    fx_open(&f, 200 * MiB, &cfg, false, false);
    uintptr_t live = fx_alloc(&f, 40 * MiB);
    uintptr_t b70 = fx_alloc(&f, 70 * MiB);
    uintptr_t b80 = fx_alloc(&f, 80 * MiB);
    fx_free(&f, b80);
    fx_free(&f, b70);
    uintptr_t d = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_alloc_retries, 0);
    assert_int_equal(st->num_device_free, 1);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (40 + 80 + 40) * MiB);
    ts_block_info bi;
    assert_int_equal(ts_lookup(f.a, b80, NULL, &bi), TS_OK);
    assert_int_equal(bi.state, TS_BLOCK_FREE);
    assert_int_equal(bi.size, 80 * MiB);
    fx_free(&f, live);
    fx_free(&f, d);
    fx_close(&f);
}

/* A block of exactly max_split_size is oversize (PyTorch compares with >=): a smaller request
 * does not take it (rule A), a request of exactly that size is oversize too and takes it whole
 * (rule B), and both count in the oversize stats. max_split_size_mb:40. */
static void test_best_fit_at_exactly_max_split_size(void **state)
{
    (void)state;
    fixture f;
    fx_open_max_split_40(&f);
    uintptr_t b = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->oversize_segments.current, 1);
    assert_int_equal(st->oversize_allocations.current, 1);
    fx_free(&f, b);
    assert_int_equal(fx_stats(&f)->oversize_allocations.current, 0);
    uintptr_t small = fx_alloc(&f, 30 * MiB); /* rule A: a 40 MiB block is oversize */
    assert_true(small != b);
    assert_int_equal(fx_stats(&f)->segment[TESSERA_POOL_ALL].current, 2);
    uintptr_t exact = fx_alloc(&f, 40 * MiB); /* oversize: taken whole, not split */
    assert_int_equal(exact, b);
    st = fx_stats(&f);
    assert_int_equal(st->allocated_bytes[TESSERA_POOL_ALL].current, 70 * MiB);
    assert_int_equal(st->oversize_allocations.current, 1);
    /* a request just below the limit from a cached block just below it: split as usual */
    fx_free(&f, small);
    uintptr_t below = fx_alloc(&f, 20 * MiB);
    assert_int_equal(below, small);
    assert_int_equal(fx_stats(&f)->inactive_split[TESSERA_POOL_ALL].current, 1);
    fx_free(&f, below);
    fx_free(&f, exact);
    fx_close(&f);
}

/* --- retry, OOM ---------------------------------------------------------------------------- */

static void test_oom_path_empties_cache_retries_then_fails(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 100 * MiB, NULL, false, false);
    uintptr_t p[5];
    for (int i = 0; i < 5; i++)
        p[i] = fx_alloc(&f, 20 * MiB);
    fx_free(&f, p[1]);
    fx_free(&f, p[3]);
    /* 40 MiB: nothing cached fits, device is full -> release every free segment and retry */
    uintptr_t q = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_alloc_retries, 1);
    assert_int_equal(st->num_sync_all_streams, 1);
    assert_int_equal(st->num_ooms, 0);
    assert_int_equal(st->num_device_free, 2);
    (void)q;
    /* now nothing can be freed: out of memory, counted once, pool intact */
    uintptr_t r = 0;
    ts_oom_info oom;
    assert_int_equal(ts_malloc_ex(f.a, 40 * MiB, 0, &r, &oom), TS_ENOMEM);
    fx_check(&f);
    st = fx_stats(&f);
    assert_int_equal(st->num_ooms, 1);
    assert_int_equal(st->num_alloc_retries, 2);
    assert_int_equal(oom.requested, 40 * MiB);
    assert_int_equal(oom.segment_size, 40 * MiB);
    assert_int_equal(oom.capacity, 100 * MiB);
    assert_int_equal(oom.reserved, 100 * MiB);
    assert_int_equal(oom.allocated, 100 * MiB);
    char line[512];
    ts_format_oom(&oom, line, sizeof line);
    assert_non_null(strstr(line, "tried to allocate 40.00 MiB"));
    assert_non_null(strstr(line, "capacity 100.00 MiB"));
    fx_close(&f);
}

static void test_huge_request_is_oom_not_overflow(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    uintptr_t p = 0;
    /* Exactly 1 EiB is refused before any rule runs: no retry, no device call. */
    assert_int_equal(ts_malloc(f.a, (size_t)1 << 60, 0, &p), TS_ENOMEM);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.seg_allocs + dc.seg_alloc_failures, 0);
    assert_int_equal(fx_stats(&f)->num_alloc_retries, 0);
    assert_int_equal(ts_malloc(f.a, SIZE_MAX, 0, &p), TS_ENOMEM);
    assert_int_equal(ts_malloc(f.a, SIZE_MAX - 511, 0, &p), TS_ENOMEM);
    assert_int_equal(ts_malloc(f.a, ((size_t)1 << 60) - 1, 0, &p), TS_ENOMEM);
    assert_int_equal(ts_malloc(f.a, 2 * GiB, 0, &p), TS_ENOMEM);
    assert_int_equal(ts_malloc(f.a, 0, 0, &p), TS_EINVAL);
    assert_int_equal(ts_malloc(f.a, 16, 0, NULL), TS_EINVAL);
    fx_check(&f);
    assert_int_equal(fx_stats(&f)->num_ooms, 5);
    fx_free(&f, fx_alloc(&f, 512)); /* still usable */
    fx_close(&f);
}

static void test_cap_bounds_reserved_memory(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.memory_limit = 50 * MiB;
    fx_open(&f, 1 * GiB, &cfg, false, false);
    uintptr_t a = fx_alloc(&f, 20 * MiB);
    uintptr_t b = fx_alloc(&f, 20 * MiB);
    uintptr_t c = 0;
    ts_oom_info oom;
    assert_int_equal(ts_malloc_ex(f.a, 20 * MiB, 0, &c, &oom), TS_ENOMEM);
    assert_true(oom.limit_reached);
    assert_int_equal(oom.limit, 50 * MiB);
    assert_int_equal(fx_stats(&f)->memory_limit_bytes, (int64_t)(50 * MiB));
    fx_free(&f, a);
    fx_free(&f, b);
    fx_close(&f);
}

/* The advice at the end of the out-of-memory line, one case at a time: fragmentation is named
 * before the cap, and the cap only when allocated + request really exceeds it. */
static const char *oom_advice_of(const ts_oom_info *oom, char *line, size_t len)
{
    ts_format_oom(oom, line, len);
    const char *last = strrchr(line, ';');
    assert_non_null(last);
    return last + 2;
}

static void test_oom_advice(void **state)
{
    (void)state;
    char line[512];
    const char *advice;
    ts_oom_info base = {.requested = 12 * MiB, .rounded = 12 * MiB, .segment_size = 12 * MiB,
                        .capacity = 1 * GiB, .device_free = 900 * MiB};

    /* Under a cap: 33 MiB reserved but unallocated, largest piece 11 MiB: fragmentation. */
    ts_oom_info o = base;
    o.limit = 60 * MiB, o.limit_reached = true;
    o.allocated = 27 * MiB, o.reserved = 60 * MiB, o.largest_free_block = 11 * MiB;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "defragment:True"));
    assert_non_null(strstr(advice, "expandable_segments:True"));
    assert_null(strstr(advice, "memory_limit"));
    assert_non_null(strstr(line, "(cap 60.00 MiB)"));

    /* Under a cap, nothing cached, but allocated + request fits: only the segment's rounding
     * (20 MiB for an 11 MiB request) crossed the cap. */
    o = base;
    o.requested = o.rounded = 11 * MiB, o.segment_size = 20 * MiB;
    o.limit = 50 * MiB, o.limit_reached = true;
    o.allocated = 30 * MiB, o.reserved = 40 * MiB, o.largest_free_block = 10 * MiB;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "defragment:True"));
    assert_null(strstr(advice, "memory_limit"));

    /* Under a cap, allocated + request exceeds it: the cap is what refused it. */
    o = base;
    o.limit = 60 * MiB, o.limit_reached = true;
    o.allocated = 50 * MiB, o.reserved = 60 * MiB, o.largest_free_block = 10 * MiB;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "raise memory_limit"));
    assert_null(strstr(advice, "defragment"));

    /* A huge request under a cap must not wrap allocated + request around. */
    o.requested = o.rounded = o.segment_size = SIZE_MAX - 4 * MiB;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "raise memory_limit"));

    /* No cap, fragmentation, expandable segments already on: stitching is what is missing. */
    o = base;
    o.allocated = 500 * MiB, o.reserved = 1 * GiB, o.largest_free_block = 4 * MiB;
    o.expandable_segments = true;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "defragment:True"));
    assert_null(strstr(advice, "expandable_segments:True"));

    /* defragment already on and still fragmented: the pieces are below the stitching minimum. */
    o.stitching = true;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "stitch_min_block_mb"));

    /* No cap, nothing cached: the device is full. */
    o = base;
    o.allocated = o.reserved = 1 * GiB;
    advice = oom_advice_of(&o, line, sizeof line);
    assert_non_null(strstr(advice, "the device is full"));
}

/* End to end: fragmentation under memory_limit advises defragment, not a larger cap. */
static void test_oom_advice_fragmented_cap(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.memory_limit = 60 * MiB;
    fx_open(&f, 1 * GiB, &cfg, false, false);
    /* Three 20 MiB segments, two 9 MiB blocks each; free one block of each. */
    uintptr_t p[6];
    for (int i = 0; i < 6; i++)
        p[i] = fx_alloc(&f, 9 * MiB);
    for (int i = 0; i < 6; i += 2)
        fx_free(&f, p[i]);
    uintptr_t q = 0;
    ts_oom_info oom;
    assert_int_equal(ts_malloc_ex(f.a, 12 * MiB, 0, &q, &oom), TS_ENOMEM);
    assert_true(oom.limit_reached);
    assert_int_equal(oom.allocated, 27 * MiB);
    assert_int_equal(oom.reserved, 60 * MiB);
    char line[512];
    const char *advice = oom_advice_of(&oom, line, sizeof line);
    assert_non_null(strstr(advice, "defragment:True"));
    assert_null(strstr(advice, "memory_limit"));
    for (int i = 1; i < 6; i += 2)
        fx_free(&f, p[i]);
    fx_close(&f);
}

/* --- garbage collection ------------------------------------------------------------------------ */

static void test_gc_frees_oldest_blocks_above_threshold(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.per_process_memory_fraction = 0.5;  /* cap: 100 MiB of 200 */
    cfg.garbage_collection_threshold = 0.4; /* collect above 40 MiB */
    fx_open(&f, 200 * MiB, &cfg, false, false);
    uintptr_t old = fx_alloc(&f, 30 * MiB);
    uintptr_t young = fx_alloc(&f, 14 * MiB);
    fx_free(&f, old); /* cached from now on: it ages with every large-pool search */
    for (int i = 0; i < 5; i++) {
        fx_free(&f, young);
        assert_int_equal(fx_alloc(&f, 14 * MiB), young); /* best fit: 14 before 30 */
    }
    fx_free(&f, young); /* age 0 */
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 44 * MiB);
    assert_int_equal(st->num_device_free, 0);
    /* 40 MiB: no cached fit; reserved 44 MiB > 40 MiB threshold -> GC frees the blocks at least
     * as old as the average age (5 + 0) / 2: the old 30 MiB one only, and that reaches the
     * 4 MiB target. */
    uintptr_t n = fx_alloc(&f, 40 * MiB);
    st = fx_stats(&f);
    assert_int_equal(st->num_device_free, 1);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 14 * MiB + 40 * MiB);
    assert_int_equal(fx_alloc(&f, 14 * MiB), young); /* the young block survived */
    fx_free(&f, n);
    fx_close(&f);
}

/* garbage_collection_threshold without a memory fraction is measured against the device's
 * capacity (tessera's choice, DESIGN "differs on purpose" 1): 0.5 of 200 MiB is 100 MiB, so 44
 * MiB reserved plus a 40 MiB request collect nothing. */
static void test_gc_threshold_measured_against_capacity(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.garbage_collection_threshold = 0.5;
    fx_open(&f, 200 * MiB, &cfg, false, false);
    uintptr_t old = fx_alloc(&f, 30 * MiB);
    uintptr_t young = fx_alloc(&f, 14 * MiB);
    fx_free(&f, old);
    fx_free(&f, young);
    uintptr_t n = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_device_free, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (30 + 14 + 40) * MiB);
    fx_free(&f, n);
    /* 0.2 of 200 MiB is 40 MiB: now 84 MiB reserved is above it and the next miss collects */
    fx_close(&f);
    cfg.garbage_collection_threshold = 0.2;
    fx_open(&f, 200 * MiB, &cfg, false, false);
    old = fx_alloc(&f, 30 * MiB);
    young = fx_alloc(&f, 14 * MiB);
    fx_free(&f, old);
    fx_free(&f, young);
    n = fx_alloc(&f, 40 * MiB);
    assert_int_equal(fx_stats(&f)->num_device_free, 2); /* equal ages: both at the average */
    fx_free(&f, n);
    fx_close(&f);
}

/* The age threshold is inclusive (PyTorch: age >= average). Two blocks freed together have the
 * same age, which is the average: both are collected in the first round, although the first
 * one alone reaches the target (no early stop inside a round). Cap 100 MiB of 200, threshold
 * 0.4 (40 MiB): 44 MiB reserved, target 4 MiB. */
static void test_gc_age_threshold_is_inclusive(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.per_process_memory_fraction = 0.5;
    cfg.garbage_collection_threshold = 0.4;
    fx_open(&f, 200 * MiB, &cfg, false, false);
    uintptr_t x = fx_alloc(&f, 30 * MiB);
    uintptr_t y = fx_alloc(&f, 14 * MiB);
    fx_free(&f, x);
    fx_free(&f, y);
    uintptr_t n = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_device_free, 2);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 40 * MiB);
    fx_free(&f, n);
    fx_close(&f);
}

/* Collection goes round by round until the target is reclaimed, each round against the average
 * age of what is left. Cap 100 MiB of 200, threshold 0.3 (30 MiB). X, Y, Z: 12 MiB each, W: 14
 * MiB, each its own segment (50 MiB reserved, target 20 MiB). X is freed, then five large-pool
 * searches (W freed and taken back), Y freed, one more search, Z freed; the 40 MiB request is one
 * more search: ages X 7, Y 2, Z 1 (W live). Round 1: average 10/3, X goes (12 < 20). Round 2:
 * average (2 + 1) / 2, Y goes (24 >= 20): done, Z stays cached. */
static void test_gc_goes_round_until_target(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.per_process_memory_fraction = 0.5;
    cfg.garbage_collection_threshold = 0.3;
    fx_open(&f, 200 * MiB, &cfg, false, false);
    uintptr_t x = fx_alloc(&f, 12 * MiB);
    uintptr_t y = fx_alloc(&f, 12 * MiB);
    uintptr_t z = fx_alloc(&f, 12 * MiB);
    uintptr_t w = fx_alloc(&f, 14 * MiB);
    fx_free(&f, x);
    for (int i = 0; i < 5; i++) {
        fx_free(&f, w);
        assert_int_equal(fx_alloc(&f, 14 * MiB), w);
    }
    fx_free(&f, y);
    fx_free(&f, w);
    assert_int_equal(fx_alloc(&f, 14 * MiB), w);
    fx_free(&f, z);
    uintptr_t n = fx_alloc(&f, 40 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_device_free, 2);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, (12 + 14 + 40) * MiB);
    ts_block_info bi;
    assert_int_equal(ts_lookup(f.a, z, NULL, &bi), TS_OK);
    assert_int_equal(bi.state, TS_BLOCK_FREE);
    fx_free(&f, n);
    fx_free(&f, w);
    fx_close(&f);
}

/* --- bad input ---------------------------------------------------------------------------------- */

static void test_bad_free_changes_nothing(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    uintptr_t a = fx_alloc(&f, 4096);
    uintptr_t b = fx_alloc(&f, 4096);
    assert_int_equal(ts_free(f.a, a + 512), TS_EINVAL);    /* interior */
    /* the segment's last byte is still inside it: never forwarded to the driver */
    assert_int_equal(ts_free(f.a, a + 2 * MiB - 1), TS_EINVAL);
    assert_int_equal(ts_free(f.a, 0x1000), TS_ENOTFOUND);  /* foreign */
    assert_int_equal(ts_free(f.a, 0), TS_ENOTFOUND);       /* NULL: not ours */
    fx_free(&f, a);
    assert_int_equal(ts_free(f.a, a), TS_EINVAL);          /* double free */
    fx_check(&f);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_invalid_frees, 3);
    assert_int_equal(st->allocation[TESSERA_POOL_ALL].current, 1);
    ts_block_info bi;
    ts_segment_info si;
    assert_int_equal(ts_lookup(f.a, b + 100, &si, &bi), TS_OK);
    assert_int_equal(bi.addr, b);
    assert_int_equal(bi.state, TS_BLOCK_ALLOCATED);
    assert_int_equal(si.size, 2 * MiB);
    assert_int_equal(ts_lookup(f.a, 0x1000, NULL, NULL), TS_ENOTFOUND);
    fx_free(&f, b);
    fx_close(&f);
}

static void test_device_failure_leaves_heap_intact(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    ts_devmodel_fail_seg_alloc_after(f.dev, 1);
    /* the first attempt fails, the final retry succeeds */
    uintptr_t p = fx_alloc(&f, 4 * MiB);
    assert_int_equal(fx_stats(&f)->num_alloc_retries, 1);
    fx_free(&f, p);
    fx_close(&f);
}

/* --- stream-ordered reuse (reuse_fence:order, the default) ----------------------------------------- */

/* One queue: a freed block is reused at once, by the next request of its size, and the device is
 * asked for nothing. */
static void test_reuse_order_one_queue_reuses_at_once(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    assert_int_equal(f.cfg.reuse_fence, TS_FENCE_ORDER);
    for (int i = 0; i < 100; i++) {
        uintptr_t x = fx_alloc(&f, 6 * MiB);
        uintptr_t y = fx_alloc(&f, 3 * MiB);
        fx_free(&f, x);
        fx_free(&f, y);
    }
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_device_alloc, 1); /* one 20 MiB segment served every iteration */
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].peak, 20 * (int64_t)MiB);
    assert_int_equal(st->active[TESSERA_POOL_ALL].current, 0); /* nothing pending */
    assert_int_equal(st->num_fences_recorded, 0);
    assert_int_equal(st->num_fence_waits, 0);
    fx_close(&f);
}

/* Several streams: handing out a block freed since the last order point makes one order point,
 * which covers every block freed before it; fresh memory and blocks freed before the last order
 * point need none. */
static void test_reuse_order_one_point_per_burst_of_frees(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    uintptr_t a = fx_alloc(&f, 6 * MiB);   /* a 20 MiB segment */
    uintptr_t b = fx_alloc(&f, 30 * MiB);  /* its own segment */
    uintptr_t c = fx_alloc(&f, 40 * MiB);  /* its own segment */
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 0); /* fresh memory: nothing to order */
    fx_free(&f, b);
    fx_free(&f, c);
    assert_int_equal(fx_alloc(&f, 30 * MiB), b); /* freed since the last order point: one now */
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.order_points, 1);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 1);
    assert_int_equal(fx_alloc(&f, 40 * MiB), c); /* freed before that point: no new one */
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 1);
    fx_free(&f, a);                             /* a merges with its segment's free tail */
    assert_int_equal(fx_alloc(&f, 16 * MiB), a); /* the merged block carries a's epoch */
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 2);
    assert_int_equal(fx_stats(&f)->num_device_alloc, 3);
    assert_int_equal(fx_stats(&f)->num_fence_waits, 0); /* the host never waited */
    fx_free(&f, a);
    fx_free(&f, b);
    fx_free(&f, c);
    fx_close(&f);
}

/* Stream-ordered frees (cudaFreeAsync): a block freed on the stream it was allocated for is
 * reused by that stream with no order point; freed on another stream, or once its stream is
 * retired (destroyed: its handle may name a new stream), it waits for one like any free. */
static void test_reuse_order_own_stream_needs_no_point(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    const uintptr_t s = 0x5000, s2 = 0x6000;
    uintptr_t a = 0, b = 0;
    assert_int_equal(ts_malloc(f.a, 3 * MiB, s, &a), TS_OK);
    assert_int_equal(ts_free_on_stream(f.a, a, s, NULL), TS_OK);
    assert_int_equal(ts_malloc(f.a, 3 * MiB, s, &b), TS_OK);
    assert_int_equal(b, a);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 0); /* the stream's own order covers it */
    assert_int_equal(ts_free_on_stream(f.a, b, s2, NULL), TS_OK); /* freed on another stream */
    assert_int_equal(ts_malloc(f.a, 3 * MiB, s, &b), TS_OK);
    assert_int_equal(b, a);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 1);
    assert_int_equal(ts_free_on_stream(f.a, b, s, NULL), TS_OK);
    ts_allocator_stream_retire(f.a, s); /* a new stream may get s's handle */
    assert_int_equal(ts_malloc(f.a, 3 * MiB, s, &b), TS_OK);
    assert_int_equal(b, a);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 2);
    /* as a pool reports: used is what was asked for; reserved the memory of the stream's
     * segment (20 MiB for a 3 MiB request), cached blocks included; cudaMalloc's are not */
    uintptr_t plain = fx_alloc(&f, 5 * MiB);
    ts_stream_usage u;
    ts_allocator_stream_usage(f.a, false, false, &u);
    assert_int_equal(u.used, 3 * MiB);
    assert_int_equal(u.used_high, 3 * MiB);
    assert_int_equal(u.reserved, 20 * MiB);
    assert_int_equal(u.reserved_high, 20 * MiB);
    assert_int_equal(ts_free_on_stream(f.a, b, s, NULL), TS_OK);
    ts_allocator_stream_usage(f.a, true, false, &u);
    assert_int_equal(u.used, 0);
    assert_int_equal(u.used_high, 0);
    assert_int_equal(u.reserved, 20 * MiB); /* cached: still the pool's */
    /* a second stream's segment adds its memory, and raises the high mark */
    assert_int_equal(ts_malloc(f.a, 30 * MiB, s2, &b), TS_OK);
    ts_allocator_stream_usage(f.a, false, false, &u);
    assert_int_equal(u.reserved, 50 * MiB);
    assert_int_equal(u.reserved_high, 50 * MiB);
    assert_int_equal(ts_free_on_stream(f.a, b, s2, NULL), TS_OK);
    fx_free(&f, plain);
    ts_empty_cache(f.a); /* the memory goes back: reserved drops, the mark stays until reset */
    ts_allocator_stream_usage(f.a, false, false, &u);
    assert_int_equal(u.reserved, 0);
    assert_int_equal(u.reserved_high, 50 * MiB);
    ts_allocator_stream_usage(f.a, false, true, &u);
    assert_int_equal(u.reserved_high, 0);
    fx_close(&f);
}

/* Memory the driver serves counts under the cap with tessera's own: a reservation past it is
 * refused after the cache was given back, and cudaMemGetInfo's room shrinks by it. */
static void test_driver_bytes_count_under_the_cap(void **state)
{
    (void)state;
    ts_config c;
    ts_config_defaults(&c);
    c.memory_limit = 100 * MiB;
    fixture f;
    fx_open(&f, 1 * GiB, &c, false, false);
    uintptr_t a = fx_alloc(&f, 40 * MiB);
    assert_int_equal(ts_allocator_driver_reserve(f.a, 50 * MiB, true), TS_OK);
    assert_int_equal(ts_allocator_driver_record(f.a, 0x7000000, 50 * MiB), TS_OK);
    assert_int_equal(fx_stats(&f)->driver_bytes, 50 * MiB);
    size_t free_b = 0, total = 0;
    ts_allocator_mem_info(f.a, 1 * GiB, 1 * GiB, &free_b, &total);
    assert_int_equal(free_b, 10 * MiB);
    uintptr_t p = 0;
    assert_int_equal(ts_malloc(f.a, 20 * MiB, 0, &p), TS_ENOMEM); /* 40 + 50 + 20 > 100 */
    assert_int_equal(ts_allocator_driver_reserve(f.a, 20 * MiB, true), TS_ENOMEM);
    fx_free(&f, a); /* cached: given back when the driver's memory needs the room */
    assert_int_equal(ts_allocator_driver_reserve(f.a, 20 * MiB, true), TS_OK);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    ts_allocator_driver_unreserve(f.a, 20 * MiB);
    size_t n = 0;
    assert_int_equal(ts_allocator_driver_forget(f.a, 0x7000000, &n), TS_OK);
    assert_int_equal(n, 50 * MiB);
    assert_int_equal(ts_allocator_driver_forget(f.a, 0x7000000, &n), TS_ENOTFOUND);
    assert_int_equal(fx_stats(&f)->driver_bytes, 0);
    fx_close(&f);
}

/* No order point can be made (a capture is underway): a block freed since the last one stays
 * cached and the request takes new memory; once order points work again it is reused. */
/* --- rounding: the roundup_power2_divisions lookup ---------------------------------------------------------------------- */

static void test_round_divisions(void **state)
{
    (void)state;
    ts_config c;
    ts_config_defaults(&c);
    for (unsigned i = 0; i < TS_ROUNDUP_INTERVALS; i++)
        c.roundup_power2_divisions[i] = 100 + i;
    /* index 0 covers everything below 2 MiB */
    assert_int_equal(ts_round_divisions(&c, 0), 100);
    assert_int_equal(ts_round_divisions(&c, 1), 100);
    assert_int_equal(ts_round_divisions(&c, 512), 100);
    assert_int_equal(ts_round_divisions(&c, MiB), 100);
    /* index k covers [2^k MiB, 2^(k+1) MiB) */
    for (unsigned k = 1; k < TS_ROUNDUP_INTERVALS; k++) {
        size_t lo = ((size_t)1 << k) * MiB;
        assert_int_equal(ts_round_divisions(&c, lo - 1), 100 + k - 1);
        assert_int_equal(ts_round_divisions(&c, lo), 100 + k);
        assert_int_equal(ts_round_divisions(&c, lo + 1), 100 + k);
        assert_int_equal(ts_round_divisions(&c, 2 * lo - 1), 100 + k);
    }
    /* index 15 covers 32 GiB and above */
    assert_int_equal(ts_round_divisions(&c, (size_t)64 << 30), 115);
    assert_int_equal(ts_round_divisions(&c, (size_t)1 << 60), 115);
    assert_int_equal(ts_round_divisions(&c, SIZE_MAX), 115);

    /* with the worked example */
    ts_config_diag diag;
    assert_int_equal(ts_config_parse(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
                                     "T", TS_CONFIG_STRICT, &diag, NULL, NULL), 0);
    assert_int_equal(ts_round_divisions(&c, 100), 1);
    assert_int_equal(ts_round_divisions(&c, 512 * MiB - 1), 1);
    assert_int_equal(ts_round_divisions(&c, 512 * MiB), 2);
    assert_int_equal(ts_round_divisions(&c, 1024 * MiB), 4);
    assert_int_equal(ts_round_divisions(&c, 2048 * MiB - 1), 4);
    assert_int_equal(ts_round_divisions(&c, 2048 * MiB), 8);

    /* PyTorch's own test strings (c10's allocator config test), interval by interval */
    static const struct {
        const char *conf;
        size_t mib[9];
        uint32_t div[9];
    } pytorch[] = {
        {"roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
         {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}, {8, 8, 2, 4, 2, 4, 1, 1, 1}},
        {"roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]",
         {64, 128, 256, 512, 1024, 2048, 4096, 4096, 4096}, {8, 8, 16, 1, 0, 8, 2, 2, 2}},
        {"roundup_power2_divisions:4", {64, 256, 2048, 1, 1, 1, 1, 1, 1},
         {4, 4, 4, 4, 4, 4, 4, 4, 4}},
        /* a leading '>': every interval after the first; sizes below 2 MiB are not rounded */
        {"roundup_power2_divisions:[>:4]", {1, 2, 4, 64, 32768, 65536, 1, 1, 1},
         {0, 4, 4, 4, 4, 4, 0, 0, 0}},
    };
    for (size_t t = 0; t < sizeof pytorch / sizeof pytorch[0]; t++) {
        assert_int_equal(ts_config_parse(&c, pytorch[t].conf, "T", TS_CONFIG_STRICT, &diag, NULL,
                                         NULL), 0);
        for (int i = 0; i < 9; i++)
            assert_int_equal(ts_round_divisions(&c, pytorch[t].mib[i] * MiB), pytorch[t].div[i]);
    }
    /* the rounding table of PyTorch's test_cuda (sizes of float tensors of 21 Mi and 100 Mi
     * elements): 84 MiB in 4 steps -> 96 MiB; in 8 steps -> 88 MiB; 400 MiB in 2 -> 512 MiB */
    assert_int_equal(ts_config_parse(&c, "roundup_power2_divisions:4", "T", TS_CONFIG_STRICT,
                                     &diag, NULL, NULL), 0);
    assert_int_equal(ts_round_size(&c, 84 * MiB), 96 * MiB);
    assert_int_equal(ts_config_parse(&c, "roundup_power2_divisions:[64:8,128:2,256:2,512:2,"
                                     "1024:1,>:1]", "T", TS_CONFIG_STRICT, &diag, NULL, NULL), 0);
    assert_int_equal(ts_round_size(&c, 84 * MiB), 88 * MiB);
    assert_int_equal(ts_round_size(&c, 400 * MiB), 512 * MiB);
    /* [>:4]: 1.5 MiB keeps the 512-byte rounding; 3 MiB takes the steps of [2, 4) MiB */
    assert_int_equal(ts_config_parse(&c, "roundup_power2_divisions:[>:4]", "T", TS_CONFIG_STRICT,
                                     &diag, NULL, NULL), 0);
    assert_int_equal(ts_round_size(&c, 3 * MiB / 2 + 1), 3 * MiB / 2 + 512);
    assert_int_equal(ts_round_size(&c, 5 * MiB / 2 + 1), 3 * MiB);
}

/* handle_policy: page (PyTorch's) backs a growth with one handle per page; geometric with
 * handles halving towards its end (G/2, G/4, ..., page, page). A smaller request reusing the range
 * from its low end leaves the rest in whole handles, which empty_cache gives back. */
static void handles_for_growth(ts_handle_policy policy, uint64_t *creates, uint64_t *destroys,
                               size_t *in_use_after)
{
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.expandable_segments = true;
    cfg.expandable_page = 2 * MiB;
    cfg.handle_policy = policy;
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t p = fx_alloc(&f, 64 * MiB);
    fx_free(&f, p);
    uintptr_t q = fx_alloc(&f, 20 * MiB);
    assert_int_equal(q, p); /* the low end */
    ts_empty_cache(f.a);
    fx_check(&f);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    *creates = dc.vm_creates;
    *destroys = dc.vm_destroys;
    *in_use_after = dc.bytes_in_use;
    fx_free(&f, q);
    fx_close(&f);
}

static void test_handles_geometric_halves_each_growth(void **state)
{
    (void)state;
    uint64_t creates, destroys;
    size_t in_use;
    handles_for_growth(TS_HANDLES_PAGE, &creates, &destroys, &in_use);
    assert_int_equal(creates, 32);   /* 64 MiB in 2 MiB pages */
    assert_int_equal(destroys, 22);  /* every page above the 20 MiB kept */
    assert_int_equal(in_use, 20 * MiB);
    handles_for_growth(TS_HANDLES_GEOMETRIC, &creates, &destroys, &in_use);
    assert_int_equal(creates, 6);    /* 32 + 16 + 8 + 4 + 2 + 2 MiB */
    assert_int_equal(destroys, 5);   /* all but the 32 MiB handle that holds the 20 MiB */
    assert_int_equal(in_use, 32 * MiB);
}

/* What cudaMemGetInfo reports (ts_allocator_mem_info): cached bytes are free for the program;
 * a cap shrinks the device to the cap and free to the cap less what is allocated; a device that
 * misreports cannot make free exceed total. */
static void test_meminfo_policy(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    uintptr_t keep = 0, drop = 0;
    assert_int_equal(ts_malloc(f.a, 40 * MiB, 0, &keep), TS_OK);
    assert_int_equal(ts_malloc(f.a, 60 * MiB, 0, &drop), TS_OK);
    assert_int_equal(ts_free(f.a, drop), TS_OK); /* 60 MiB cached */
    size_t fr = 0, tot = 0;
    ts_allocator_mem_info(f.a, 900 * MiB, 1 * GiB, &fr, &tot);
    assert_int_equal(tot, 1 * GiB);
    assert_int_equal(fr, 960 * MiB);
    ts_allocator_mem_info(f.a, 1000 * MiB, 1 * GiB, &fr, &tot); /* would be 1060 MiB */
    assert_int_equal(fr, 1 * GiB);
    ts_allocator_mem_info(f.a, 900 * MiB, 1 * GiB, NULL, &tot); /* either pointer may be NULL */
    assert_int_equal(tot, 1 * GiB);
    assert_int_equal(ts_free(f.a, keep), TS_OK);
    fx_close(&f);

    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.memory_limit = 256 * MiB;
    fx_open(&f, 1 * GiB, &cfg, false, false);
    assert_int_equal(ts_malloc(f.a, 40 * MiB, 0, &keep), TS_OK);
    assert_int_equal(ts_malloc(f.a, 60 * MiB, 0, &drop), TS_OK);
    assert_int_equal(ts_free(f.a, drop), TS_OK);
    ts_allocator_mem_info(f.a, 900 * MiB, 1 * GiB, &fr, &tot);
    assert_int_equal(tot, 256 * MiB);
    assert_int_equal(fr, 216 * MiB); /* the cap less the 40 MiB allocated */
    ts_allocator_mem_info(f.a, 100 * MiB, 1 * GiB, &fr, &tot); /* the device is the limit */
    assert_int_equal(fr, 160 * MiB);
    ts_allocator_mem_info(f.a, 100 * MiB, 128 * MiB, &fr, &tot); /* a device below the cap */
    assert_int_equal(tot, 128 * MiB);
    assert_int_equal(fr, 128 * MiB);
    assert_int_equal(ts_free(f.a, keep), TS_OK);
    fx_close(&f);
}

/* The configuration in force is the resolved one (ts_config_resolve), and it is what the
 * allocator reports: stitching brings expandable segments; a device without the virtual-memory
 * API turns both off; defragment takes the device's granularity as its page. */
static void test_config_in_force_is_resolved(void **state)
{
    (void)state;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.stitching = true; /* expandable_segments left false, as a caller may pass it */
    fixture f;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    const ts_config *in_force = ts_allocator_config(f.a);
    assert_true(in_force->stitching && in_force->expandable_segments);
    uintptr_t p = 0;
    assert_int_equal(ts_malloc(f.a, 30 * MiB, 0, &p), TS_OK);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.vm_reserves, 1); /* served from an expandable segment */
    assert_int_equal(dc.seg_allocs, 0);
    assert_int_equal(ts_free(f.a, p), TS_OK);
    fx_close(&f);

    fx_open(&f, 1 * GiB, &cfg, false, false); /* no virtual-memory API */
    in_force = ts_allocator_config(f.a);
    assert_false(in_force->stitching || in_force->expandable_segments);
    assert_int_equal(ts_malloc(f.a, 30 * MiB, 0, &p), TS_OK);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.vm_reserves, 0);
    assert_int_equal(dc.seg_allocs, 1);
    assert_int_equal(ts_free(f.a, p), TS_OK);
    fx_close(&f);

    ts_config_defaults(&cfg);
    cfg.defragment = cfg.expandable_segments = cfg.stitching = true;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    assert_int_equal(ts_allocator_config(f.a)->expandable_page, 2 * MiB);
    fx_close(&f);
}

static void test_reuse_order_refused_takes_new_memory(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    uintptr_t a = fx_alloc(&f, 30 * MiB);
    fx_free(&f, a);
    uintptr_t b = fx_alloc(&f, 30 * MiB);
    assert_true(b != a);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_device_alloc, 2);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 60 * (int64_t)MiB);
    assert_int_equal(st->num_ooms, 0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    assert_int_equal(fx_alloc(&f, 30 * MiB), a);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 1);
    fx_free(&f, a);
    fx_free(&f, b);
    fx_close(&f);
}

/* --- fences (reuse_fence:events) ----------------------------------------------------------------- */

static const ts_config *events_cfg(void)
{
    static ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.reuse_fence = TS_FENCE_EVENTS;
    return &cfg;
}

static void test_reuse_events_defer_until_fence(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, events_cfg(), false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    uintptr_t a = fx_alloc(&f, 12 * MiB);
    fx_free(&f, a);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->active[TESSERA_POOL_ALL].current, 1); /* pending free */
    assert_int_equal(st->allocation[TESSERA_POOL_ALL].current, 0);
    /* the device has not passed the fence, and a's 12 MiB could not serve 24 MiB anyway: new
     * memory at once, no wait */
    uintptr_t b = fx_alloc(&f, 24 * MiB);
    assert_true(b != a);
    st = fx_stats(&f);
    assert_int_equal(st->num_fences_recorded, 1);
    assert_int_equal(st->num_fence_waits, 0);
    assert_int_equal(st->num_device_alloc, 2);
    /* 12 MiB again, while a's block waits for its fence: wait for the oldest fence (the device
     * gets there first) rather than reserve 12 MiB more */
    uintptr_t c = fx_alloc(&f, 12 * MiB);
    assert_int_equal(c, a);
    st = fx_stats(&f);
    assert_int_equal(st->num_fence_waits, 1);
    assert_int_equal(st->num_device_alloc, 2);
    fx_free(&f, b);
    fx_free(&f, c);
    /* empty_cache waits for outstanding fences, then releases everything */
    assert_int_equal(ts_empty_cache(f.a), 36 * MiB);
    st = fx_stats(&f);
    assert_int_equal(st->active[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_true(st->num_fence_waits >= 2);
    fx_close(&f);
}

/* Freed blocks waiting for fences do not make the reservation grow by everything in flight: a
 * loop that allocates and frees while the device never catches up on its own reuses its memory,
 * waiting for the oldest fence each time, and reserves no more than one iteration needs. */
static void test_reuse_events_wait_for_oldest_fence_before_growing(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 8 * GiB, events_cfg(), false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    for (int i = 0; i < 200; i++) {
        uintptr_t x = fx_alloc(&f, 64 * MiB);
        uintptr_t y = fx_alloc(&f, 30 * MiB);
        fx_free(&f, x);
        fx_free(&f, y);
    }
    const tessera_device_stats *st = fx_stats(&f);
    /* the first iteration's two segments, and one more while both wait for the first fence */
    assert_true(st->reserved_bytes[TESSERA_POOL_ALL].peak <= 2 * (64 + 30) * (int64_t)MiB);
    assert_true(st->num_fence_waits > 0);
    assert_int_equal(st->num_alloc_retries, 0);
    fx_close(&f);
}

static void test_reuse_events_oom_waits_for_pending_frees(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 40 * MiB, events_cfg(), false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    uintptr_t a = fx_alloc(&f, 20 * MiB);
    uintptr_t b = fx_alloc(&f, 20 * MiB);
    fx_free(&f, a);
    /* device full, a pending: rather than release anything, the allocator waits for the fence
     * and reuses a's segment (no release-and-retry: on one stream PyTorch would have had it) */
    uintptr_t c = fx_alloc(&f, 20 * MiB);
    assert_int_equal(c, a);
    assert_int_equal(fx_stats(&f)->num_alloc_retries, 0);
    assert_int_equal(fx_stats(&f)->num_fence_waits, 1);
    assert_int_equal(fx_stats(&f)->num_device_free, 0);
    fx_free(&f, b);
    fx_free(&f, c);
    fx_close(&f);
}

/* --- randomized model test ----------------------------------------------------------------------- */

typedef struct live {
    uintptr_t addr;
    size_t size;
} live;

static uint64_t rng_next(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t random_size(uint64_t *s)
{
    switch (rng_next(s) % 5) {
    case 0:
        return 1 + rng_next(s) % 4096;
    case 1:
        return 1 + rng_next(s) % MiB;
    case 2:
        return MiB + rng_next(s) % (9 * MiB);
    case 3:
        return 10 * MiB + rng_next(s) % (40 * MiB);
    default:
        return 1 + rng_next(s) % (200 * MiB);
    }
}

static void model_run(uint64_t seed, const ts_config *cfg, bool fences, int steps)
{
    fixture f;
    fx_open(&f, 1 * GiB, cfg, false, fences);
    if (fences)
        ts_devmodel_set_manual_fences(f.dev, true);
    live *lv = calloc(4096, sizeof *lv);
    size_t n = 0;
    uint64_t s = seed;
    for (int step = 0; step < steps; step++) {
        uint64_t r = rng_next(&s) % 100;
        if (fences && r < 5) {
            ts_devmodel_complete_fences(f.dev);
        } else if (r < 55 && n < 4096) {
            size_t size = random_size(&s);
            uintptr_t p = 0;
            int rc = ts_malloc(f.a, size, 0, &p);
            if (rc == TS_OK) {
                /* never overlaps a live allocation, always inside device memory */
                for (size_t i = 0; i < n; i++)
                    if (p < lv[i].addr + lv[i].size && lv[i].addr < p + size)
                        fail_msg("seed %llu step %d: %#lx overlaps %#lx", (unsigned long long)seed,
                                 step, (unsigned long)p, (unsigned long)lv[i].addr);
                assert_true(ts_devmodel_is_backed(f.dev, p, size));
                lv[n++] = (live){p, size};
            } else {
                assert_int_equal(rc, TS_ENOMEM);
            }
        } else if (r < 97 && n > 0) {
            size_t i = rng_next(&s) % n;
            assert_int_equal(ts_free(f.a, lv[i].addr), TS_OK);
            lv[i] = lv[--n];
        } else {
            ts_empty_cache(f.a);
        }
        char why[256];
        if (ts_allocator_check(f.a, why, sizeof why) != 0)
            fail_msg("seed %llu step %d: %s (replay: TESSERA_TEST_SEED=%llu)",
                     (unsigned long long)seed, step, why, (unsigned long long)seed);
    }
    while (n > 0)
        assert_int_equal(ts_free(f.a, lv[--n].addr), TS_OK);
    ts_devmodel_complete_fences(f.dev);
    ts_empty_cache(f.a);
    fx_check(&f);
    const tessera_device_stats *st = fx_stats(&f);
    /* conservation: everything given back */
    assert_int_equal(st->allocated_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->active_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->num_device_alloc, st->num_device_free);
    free(lv);
    fx_close(&f);
}

static uint64_t test_seed(void)
{
    const char *e = getenv("TESSERA_TEST_SEED");
    static uint64_t seed;
    if (!seed) {
        seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
        if (!seed)
            seed = 1;
        fprintf(stderr, "randomized model tests: seed %llu (replay with TESSERA_TEST_SEED=%llu)\n",
                (unsigned long long)seed, (unsigned long long)seed);
    }
    return seed;
}

static void test_model_default(void **state)
{
    (void)state;
    uint64_t seed = test_seed();
    for (int i = 0; i < 8; i++)
        model_run(seed + (uint64_t)i, NULL, false, 2000);
}

static void test_model_tuned(void **state)
{
    (void)state;
    uint64_t seed = test_seed();
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.max_split_size = 64 * MiB;
    cfg.max_non_split_rounding = 32 * MiB;
    for (int i = 0; i < 16; i++)
        cfg.roundup_power2_divisions[i] = (i % 3 == 0) ? 4 : (i % 3 == 1 ? 8 : 0);
    cfg.per_process_memory_fraction = 0.75;
    cfg.garbage_collection_threshold = 0.6;
    for (int i = 0; i < 6; i++)
        model_run(seed * 31 + (uint64_t)i, &cfg, false, 2000);
}

static void test_model_fences(void **state)
{
    (void)state;
    uint64_t seed = test_seed();
    for (int i = 0; i < 6; i++)
        model_run(seed * 17 + (uint64_t)i, events_cfg(), true, 2000);
}

/* Several threads on one allocator (TSan runs this): each keeps its own live set and checks
 * that nothing it holds overlaps anything another thread was handed. */
typedef struct thread_arg {
    ts_allocator *a;
    uint64_t seed;
    int failures;
} thread_arg;

#define THREAD_LIVE 64

static void *thread_body(void *p)
{
    thread_arg *t = p;
    uintptr_t held[THREAD_LIVE] = {0};
    size_t sizes[THREAD_LIVE] = {0};
    uint64_t s = t->seed;
    for (int i = 0; i < 20000; i++) {
        size_t k = rng_next(&s) % THREAD_LIVE;
        if (held[k]) {
            if (ts_free(t->a, held[k]) != TS_OK)
                t->failures++;
            held[k] = 0;
        } else {
            size_t size = 1 + rng_next(&s) % (rng_next(&s) % 4 == 0 ? 24 * MiB : 64 * KiB);
            if (ts_malloc(t->a, size, 0, &held[k]) == TS_OK)
                sizes[k] = size;
            else
                held[k] = 0;
        }
        if (i % 4096 == 0) {
            tessera_device_stats st;
            ts_get_stats(t->a, &st); /* concurrent readers of the counters */
        }
    }
    for (size_t k = 0; k < THREAD_LIVE; k++)
        if (held[k] && ts_free(t->a, held[k]) != TS_OK)
            t->failures++;
    (void)sizes;
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 4 * GiB, NULL, false, true);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){f.a, test_seed() + (uint64_t)i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thread_body, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    fx_check(&f);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->allocation[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(st->num_alloc_calls, st->num_free_calls + st->num_ooms);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_request_rounds_to_512_bytes_or_divisions),
        cmocka_unit_test(test_size_segment_by_request_class),
        cmocka_unit_test(test_pool_small_holds_requests_up_to_1mib),
        cmocka_unit_test(test_split_carves_low_end_and_free_merges_neighbours),
        cmocka_unit_test(test_split_large_block_only_when_over_1mib_remains),
        cmocka_unit_test(test_best_fit_ties_take_lowest_address),
        cmocka_unit_test(test_oversize_rule_a_small_request_skips_oversize_block),
        cmocka_unit_test(test_oversize_rule_b_takes_block_within_rounding_whole),
        cmocka_unit_test(test_oversize_rule_b_refuses_block_beyond_rounding),
        cmocka_unit_test(test_oom_path_releases_oversize_blocks_largest_first),
        cmocka_unit_test(test_oom_path_releases_one_block_when_one_is_enough),
        cmocka_unit_test(test_best_fit_at_exactly_max_split_size),
        cmocka_unit_test(test_oom_path_empties_cache_retries_then_fails),
        cmocka_unit_test(test_huge_request_is_oom_not_overflow),
        cmocka_unit_test(test_cap_bounds_reserved_memory),
        cmocka_unit_test(test_oom_advice),
        cmocka_unit_test(test_oom_advice_fragmented_cap),
        cmocka_unit_test(test_gc_frees_oldest_blocks_above_threshold),
        cmocka_unit_test(test_gc_threshold_measured_against_capacity),
        cmocka_unit_test(test_gc_age_threshold_is_inclusive),
        cmocka_unit_test(test_gc_goes_round_until_target),
        cmocka_unit_test(test_bad_free_changes_nothing),
        cmocka_unit_test(test_device_failure_leaves_heap_intact),
        cmocka_unit_test(test_reuse_order_one_queue_reuses_at_once),
        cmocka_unit_test(test_reuse_order_one_point_per_burst_of_frees),
        cmocka_unit_test(test_reuse_order_refused_takes_new_memory),
        cmocka_unit_test(test_reuse_order_own_stream_needs_no_point),
        cmocka_unit_test(test_driver_bytes_count_under_the_cap),
        cmocka_unit_test(test_config_in_force_is_resolved),
        cmocka_unit_test(test_round_divisions),
        cmocka_unit_test(test_meminfo_policy),
        cmocka_unit_test(test_handles_geometric_halves_each_growth),
        cmocka_unit_test(test_reuse_events_defer_until_fence),
        cmocka_unit_test(test_reuse_events_wait_for_oldest_fence_before_growing),
        cmocka_unit_test(test_reuse_events_oom_waits_for_pending_frees),
        cmocka_unit_test(test_model_default),
        cmocka_unit_test(test_model_tuned),
        cmocka_unit_test(test_model_fences),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
