/* cmocka tests of expandable segments over the device model's virtual memory. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "core/pool.h"
#include "tests/unit/fixture.h"

static ts_config es_config(void)
{
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.expandable_segments = true;
    return cfg;
}

/* The validator (ts_allocator_check, run after every fixture call) refuses two unmapped blocks
 * side by side: unmapping merges them, and a growth maps from the first one's start, so an
 * unmerged pair would leave the second's pages out of a growth that should reach them. The
 * reservation's unmapped rest, cut in two by hand, is refused; merged back, accepted. */
static void test_es_check_refuses_unmerged_unmapped_blocks(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    const uintptr_t p = fx_alloc(&f, 8 * MiB);
    ts_segment *seg = segment_of_node(ts_tree_first(&f.a->segments));
    ts_block *u = seg->first;
    while (u && u->state != TS_BLOCK_UNMAPPED)
        u = u->next;
    assert_non_null(u);
    assert_true(u->size >= 2 * seg->page_size && !u->next);

    ts_block *v = block_new(f.a);
    assert_non_null(v);
    *v = (ts_block){.addr = u->addr + seg->page_size, .size = u->size - seg->page_size,
                    .seg = seg, .stream = u->stream, .prev = u};
    u->size = seg->page_size;
    u->next = v;
    seg->nblocks++;
    pool_insert_unmapped(seg->pool, v);
    char why[256];
    assert_int_not_equal(ts_allocator_check(f.a, why, sizeof why), 0);
    assert_non_null(strstr(why, "not merged"));

    pool_remove_unmapped(seg->pool, v);
    u->size += v->size;
    u->next = NULL;
    seg->nblocks--;
    block_delete(f.a, v);
    assert_int_equal(ts_allocator_check(f.a, why, sizeof why), 0);
    fx_free(&f, p);
    fx_close(&f);
}

static void test_es_tiles_one_reservation(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t a = fx_alloc(&f, 8 * MiB);
    uintptr_t b = fx_alloc(&f, 8 * MiB);
    uintptr_t c = fx_alloc(&f, 8 * MiB); /* grows the segment by one 20 MiB page, in place */
    assert_int_equal(b, a + 8 * MiB);
    assert_int_equal(c, b + 8 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_LARGE].current, 40 * MiB);
    assert_int_equal(st->segment[TESSERA_POOL_ALL].current, 0); /* maps are not segments */
    assert_int_equal(st->num_device_alloc, 2);                 /* two map operations */
    assert_int_equal(st->inactive_split[TESSERA_POOL_ALL].current, 0); /* excluded for ES */
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.vm_reserves, 1);
    assert_int_equal(dc.vm_maps, 2);
    assert_int_equal(dc.bytes_in_use, 40 * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, a, 24 * MiB));
    /* small requests get their own 2 MiB-page reservation */
    uintptr_t s = fx_alloc(&f, 4096);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.vm_reserves, 2);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_SMALL].current, 2 * MiB);
    fx_free(&f, s);
    fx_free(&f, a);
    fx_free(&f, b);
    fx_free(&f, c);
    /* empty_cache unmaps every page and gives both reservations back */
    assert_int_equal(ts_empty_cache(f.a), 42 * MiB);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.bytes_in_use, 0);
    assert_int_equal(dc.vm_releases, 2);
    assert_true(dc.synchronizes >= 1); /* the device was waited for before unmapping */
    fx_check(&f);
    fx_close(&f);
}

static void test_es_partial_pages_stay_mapped(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t a = fx_alloc(&f, 30 * MiB); /* pages 0-1 */
    uintptr_t b = fx_alloc(&f, 30 * MiB); /* pages 1-3: shares page 1 with a */
    uintptr_t c = fx_alloc(&f, 1 * MiB + 512);
    (void)c;
    fx_free(&f, a);
    /* a's free range holds page 0 whole and part of page 1 (shared with b) */
    ts_empty_cache(f.a);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_LARGE].current, 60 * MiB);
    assert_false(ts_devmodel_is_backed(f.dev, a, 20 * MiB));
    assert_true(ts_devmodel_is_backed(f.dev, b, 30 * MiB));
    fx_free(&f, b);
    fx_close(&f);
}

/* PyTorch's find_expandable_block counts a free block right before an unmapped range. 20 MiB
 * pages: A 8 MiB and A2 12 MiB fill page 0, B page 1, C page 2. A2 and B are freed and the cache
 * emptied: page 1 is unmapped, [8, 20) stays mapped and free (page 0 is partly used). 30 MiB: the
 * free 12 MiB plus the unmapped 20 MiB after it hold it, so it starts at 8 MiB and maps page 1
 * again; without counting the free block, the unmapped page alone is too small and the request
 * would go to the segment's end (two more pages). */
static void test_es_counts_free_block_before_unmapped_range(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t a = fx_alloc(&f, 8 * MiB);
    uintptr_t a2 = fx_alloc(&f, 12 * MiB);
    uintptr_t b = fx_alloc(&f, 20 * MiB);
    uintptr_t c = fx_alloc(&f, 20 * MiB);
    fx_free(&f, a2);
    fx_free(&f, b);
    ts_empty_cache(f.a);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_LARGE].current, 40 * MiB);
    uintptr_t d = fx_alloc(&f, 30 * MiB);
    assert_int_equal(d, a + 8 * MiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_LARGE].current, 60 * MiB);
    fx_free(&f, a);
    fx_free(&f, c);
    fx_free(&f, d);
    fx_close(&f);
}

/* Stream order across a growth: a free block that a growth merges into the newly mapped range
 * keeps its epoch (the merged block is as recent as its latest part). Several streams, 20 MiB
 * pages: 8 + 8 MiB, the second freed: [8, 20) is free since the last order point. 30 MiB starts
 * there and maps one more page: handing it out makes an order point, though most of it is new. */
static void test_es_growth_keeps_the_latest_free_epoch(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, true);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    uintptr_t a = fx_alloc(&f, 8 * MiB);
    uintptr_t b = fx_alloc(&f, 8 * MiB);
    fx_free(&f, b);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.order_points, 0);
    uintptr_t c = fx_alloc(&f, 30 * MiB);
    assert_int_equal(c, b);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.order_points, 1);
    fx_free(&f, a);
    fx_free(&f, c);
    fx_close(&f);
}

/* Best fit counts an expandable block as what it could grow to, so a segment's free tail is kept
 * for requests that need it: with 2 MiB pages, a 10 MiB hole H at [0, 10) and a free tail T of
 * 8 MiB at [12, 20) before the unmapped rest, 8 MiB takes H, not the exact-sized T. */
static void test_es_best_fit_keeps_the_growing_tail(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    cfg.expandable_page = 2 * MiB;
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t h = fx_alloc(&f, 10 * MiB);
    uintptr_t s = fx_alloc(&f, 2 * MiB);
    uintptr_t t = fx_alloc(&f, 8 * MiB);
    assert_int_equal(t, h + 12 * MiB);
    fx_free(&f, h);
    fx_free(&f, t);
    assert_int_equal(fx_alloc(&f, 8 * MiB), h);
    assert_int_equal(fx_alloc(&f, 8 * MiB), t); /* and the tail for the next */
    fx_free(&f, h);
    fx_free(&f, t);
    fx_free(&f, s);
    fx_close(&f);
}

/* The page is rounded up to the device's granularity (tessera's choice, DESIGN "differs on
 * purpose" 4): on a device of 8 MiB granularity, the large pool's 20 MiB page is 24 MiB and the
 * small pool's 2 MiB page is 8 MiB. */
static void test_es_page_rounded_to_granularity(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open_page(&f, 1 * GiB, 8 * MiB, &cfg, true, false);
    uintptr_t big = fx_alloc(&f, 12 * MiB);
    uintptr_t small = fx_alloc(&f, 4 * KiB);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_LARGE].current, 24 * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_SMALL].current, 8 * MiB);
    fx_free(&f, big);
    fx_free(&f, small);
    fx_close(&f);
}

/* A reservation spans 1 1/8 of the device's memory in whole pages (PyTorch): on a 1 GiB device,
 * 1152 MiB, which is 58 pages of 20 MiB (1160 MiB) and 576 of 2 MiB. */
static void test_es_reservation_size(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t big = fx_alloc(&f, 12 * MiB);
    uintptr_t small = fx_alloc(&f, 4 * KiB);
    ts_segment_info si;
    assert_int_equal(ts_lookup(f.a, big, &si, NULL), TS_OK);
    assert_int_equal(si.size, 1160 * MiB);
    assert_int_equal(si.mapped, 20 * MiB);
    assert_int_equal(ts_lookup(f.a, small, &si, NULL), TS_OK);
    assert_int_equal(si.size, 1152 * MiB);
    fx_free(&f, big);
    fx_free(&f, small);
    fx_close(&f);
}

/* Three ways to run the seed cases: PyTorch's plain segments, expandable segments with PyTorch's
 * pages (20 MiB in the large pool), and with pages at the driver's granularity (2 MiB). */
enum { MODE_PLAIN, MODE_ES_20M, MODE_ES_2M };

static void open_mode(fixture *f, size_t capacity, int mode)
{
    ts_config cfg = es_config();
    cfg.expandable_segments = mode != MODE_PLAIN;
    cfg.expandable_page = mode == MODE_ES_2M ? 2 * MiB : 0;
    fx_open(f, capacity, &cfg, true, false);
}

/* "1, 2, 1 GiB; free the middle; ask for 3 GiB", at 1/32 scale on a 5-unit device. Plain
 * segments succeed after one retry (the middle segment is freed whole, the driver places the
 * new one anywhere). 20 MiB pages waste partial pages at every boundary and run out; 2 MiB
 * pages unmap the middle and map 3 units at the end. */
static void test_es_seed_middle(void **state)
{
    (void)state;
    const size_t unit = 32 * MiB;
    const int expect[] = {TS_OK, TS_ENOMEM, TS_OK};
    for (int mode = MODE_PLAIN; mode <= MODE_ES_2M; mode++) {
        fixture f;
        open_mode(&f, 5 * unit, mode);
        uintptr_t a = fx_alloc(&f, 1 * unit);
        uintptr_t b = fx_alloc(&f, 2 * unit);
        uintptr_t c = fx_alloc(&f, 1 * unit);
        fx_free(&f, b);
        uintptr_t d = 0;
        int rc = ts_malloc(f.a, 3 * unit, 0, &d);
        fx_check(&f);
        if (rc != expect[mode])
            fail_msg("mode %d: got %d, expected %d", mode, rc, expect[mode]);
        assert_int_equal(fx_stats(&f)->num_alloc_retries, 1);
        if (rc == TS_OK) {
            assert_true(ts_devmodel_is_backed(f.dev, d, 3 * unit));
            fx_free(&f, d);
        }
        fx_free(&f, a);
        fx_free(&f, c);
        fx_close(&f);
    }
}

/* "100 x 4 MiB, free the even ones, ask for 100 MiB" on a device that holds 420 MiB: 200 MiB
 * are free but in 4 MiB holes. Plain segments cannot free a split segment; 20 MiB pages are
 * never entirely free; 2 MiB pages are (two per hole), so the retry unmaps them and maps the
 * 100 MiB at the end. */
static void test_es_seed_even(void **state)
{
    (void)state;
    uintptr_t p[100];
    const int expect[] = {TS_ENOMEM, TS_ENOMEM, TS_OK};
    for (int mode = MODE_PLAIN; mode <= MODE_ES_2M; mode++) {
        fixture f;
        open_mode(&f, 420 * MiB, mode);
        for (int i = 0; i < 100; i++)
            p[i] = fx_alloc(&f, 4 * MiB);
        for (int i = 0; i < 100; i += 2)
            fx_free(&f, p[i]);
        uintptr_t q = 0;
        int rc = ts_malloc(f.a, 100 * MiB, 0, &q);
        fx_check(&f);
        if (rc != expect[mode])
            fail_msg("mode %d: got %d, expected %d", mode, rc, expect[mode]);
        const tessera_device_stats *st = fx_stats(&f);
        assert_int_equal(st->num_ooms, rc == TS_OK ? 0 : 1);
        if (rc == TS_OK) {
            assert_true(ts_devmodel_is_backed(f.dev, q, 100 * MiB));
            /* the holes' pages went back to the device: 200 MiB held + 100 MiB new */
            assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 300 * MiB);
            fx_free(&f, q);
        }
        for (int i = 1; i < 100; i += 2)
            fx_free(&f, p[i]);
        fx_close(&f);
    }
}

static void test_es_map_failure_rolls_back(void **state)
{
    (void)state;
    fixture f;
    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    uintptr_t a = fx_alloc(&f, 10 * MiB);
    /* 100 MiB needs five more pages; the third map fails: the call is undone, then the final
     * retry (after releasing what is free) maps them all */
    ts_devmodel_fail_vm_map_after(f.dev, 3);
    uintptr_t b = fx_alloc(&f, 100 * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, b, 100 * MiB));
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    const tessera_device_stats *st = fx_stats(&f);
    /* nothing is mapped that the allocator does not account for */
    assert_int_equal(dc.bytes_in_use, (size_t)st->reserved_bytes[TESSERA_POOL_ALL].current);
    assert_int_equal(st->num_alloc_retries, 1);
    /* a create failure on every try: out of memory, and still consistent */
    ts_devmodel_fail_vm_create_after(f.dev, 1);
    uintptr_t c = 0;
    assert_int_equal(ts_malloc(f.a, 200 * MiB, 0, &c), TS_OK); /* retry succeeds */
    fx_free(&f, c);
    fx_free(&f, a);
    fx_free(&f, b);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.bytes_in_use, (size_t)fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current);
    fx_close(&f);
}

static void test_es_max_split_does_not_grow_forever(void **state)
{
    (void)state;
    /* PyTorch issue #123548: with max_split_size_mb set, expandable segments grew from 220 MiB
     * to 14 GiB over 100 cycles while allocated stayed flat. */
    fixture f;
    ts_config cfg = es_config();
    cfg.max_split_size = 128 * MiB;
    fx_open(&f, 64 * GiB, &cfg, true, false);
    for (int cycle = 0; cycle < 100; cycle++) {
        uintptr_t big = fx_alloc(&f, 200 * MiB);
        uintptr_t small = fx_alloc(&f, 66 * MiB);
        fx_free(&f, big);
        uintptr_t mid = fx_alloc(&f, 100 * MiB); /* below max_split: may reuse big's pages */
        fx_free(&f, mid);
        fx_free(&f, small);
    }
    const tessera_device_stats *st = fx_stats(&f);
    assert_true(st->reserved_bytes[TESSERA_POOL_ALL].peak <= (int64_t)(300 * MiB));
    fx_close(&f);
}

/* The end of a model run, where stitching is needed by construction whatever the random steps
 * left behind: everything freed but nothing given back (the trajectory's segments, stitched ranges
 * and lent blocks stay), the device filled with 4 MiB blocks until it runs out, every other one
 * freed (4 MiB holes of whole pages; after the out of memory no other free block holds a whole
 * page, so none is larger than 8 MiB), then 64 MiB asked for. No free block fits it, and the
 * device is full, so growing fails: the stitching variants must serve it by stitching the holes,
 * before the release-and-retry pass. */
static void model_es_stitch_needed(fixture *f, uint64_t seed, int variant)
{
    enum { FILL_MAX = 1024 };
    static uintptr_t fill[FILL_MAX];
    size_t nfill = 0;
    uintptr_t p = 0;
    while (nfill < FILL_MAX && ts_malloc(f->a, 4 * MiB, 0, &p) == TS_OK)
        fill[nfill++] = p;
    if (nfill == FILL_MAX || nfill < 2 * 16 + 1)
        fail_msg("seed %llu variant %d: %zu fill blocks in 2 GiB", (unsigned long long)seed,
                 variant, nfill);
    for (size_t i = 0; i < nfill; i += 2)
        assert_int_equal(ts_free(f->a, fill[i]), TS_OK);
    const tessera_device_stats before = *fx_stats(f);
    uintptr_t q = 0;
    if (ts_malloc(f->a, 64 * MiB, 0, &q) != TS_OK)
        fail_msg("seed %llu variant %d: 64 MiB from %zu holes of 4 MiB failed",
                 (unsigned long long)seed, variant, (nfill + 1) / 2);
    fx_check(f);
    assert_true(ts_devmodel_is_backed(f->dev, q, 64 * MiB));
    const tessera_device_stats *st = fx_stats(f);
    if (st->num_stitches != before.num_stitches + 1 ||
        st->num_alloc_retries != before.num_alloc_retries)
        fail_msg("seed %llu variant %d: the full device was not stitched (stitches %lld -> %lld, "
                 "retries %lld -> %lld)", (unsigned long long)seed, variant,
                 (long long)before.num_stitches, (long long)st->num_stitches,
                 (long long)before.num_alloc_retries, (long long)st->num_alloc_retries);
    assert_int_equal(ts_free(f->a, q), TS_OK);
    for (size_t i = 1; i < nfill; i += 2)
        assert_int_equal(ts_free(f->a, fill[i]), TS_OK);
    fx_check(f);
}

/* Randomized: expandable segments, with injected map and create failures, the validator after
 * every step, and every allocation checked to be backed by mapped pages. */
/* variant 0: expandable segments; 1: and 2 MiB pages with stitching before growth; 2: the same,
 * stitching only under pressure (the 2 GiB device fills up with requests up to 300 MiB); 3: as
 * 1, with coarse handles (20 MiB, the rest of a growth in one). */
static void model_es(uint64_t seed, bool inject, int variant)
{
    fixture f;
    ts_config cfg = es_config();
    if (variant > 0) {
        cfg.expandable_page = 2 * MiB;
        cfg.stitching = true;
        cfg.stitch_when = variant == 2 ? TS_STITCH_PRESSURE : TS_STITCH_ALWAYS;
        cfg.handle_policy = variant == 3 ? TS_HANDLES_COARSE : TS_HANDLES_PAGE;
    }
    fx_open(&f, 2 * GiB, &cfg, true, false);
    uint64_t s = seed;
    uintptr_t addr[2048];
    size_t size[2048];
    size_t n = 0;
    for (int step = 0; step < 3000; step++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = (s >> 33) % 100;
        if (inject && r < 3) {
            if (r == 0)
                ts_devmodel_fail_vm_map_after(f.dev, 1 + (s >> 40) % 4);
            else
                ts_devmodel_fail_vm_create_after(f.dev, 1 + (s >> 40) % 4);
        } else if (r < 55 && n < 2048) {
            size_t sz = 1 + (s >> 20) % ((r % 3 == 0) ? (300 * MiB) : (2 * MiB));
            uintptr_t p = 0;
            if (ts_malloc(f.a, sz, 0, &p) == TS_OK) {
                for (size_t i = 0; i < n; i++)
                    if (p < addr[i] + size[i] && addr[i] < p + sz)
                        fail_msg("seed %llu step %d: overlap", (unsigned long long)seed, step);
                if (!ts_devmodel_is_backed(f.dev, p, sz))
                    fail_msg("seed %llu step %d: %#lx not backed", (unsigned long long)seed, step,
                             (unsigned long)p);
                addr[n] = p;
                size[n++] = sz;
            }
        } else if (r < 97 && n > 0) {
            size_t i = (s >> 24) % n;
            assert_int_equal(ts_free(f.a, addr[i]), TS_OK);
            addr[i] = addr[--n];
            size[i] = size[n];
        } else {
            ts_empty_cache(f.a);
        }
        char why[256];
        if (ts_allocator_check(f.a, why, sizeof why) != 0)
            fail_msg("seed %llu step %d: %s", (unsigned long long)seed, step, why);
        ts_devmodel_counters dc;
        ts_devmodel_counters_get(f.dev, &dc);
        tessera_device_stats st;
        ts_get_stats(f.a, &st);
        if (dc.bytes_in_use != (size_t)st.reserved_bytes[TESSERA_POOL_ALL].current)
            fail_msg("seed %llu step %d: device holds %zu, allocator reserved %lld",
                     (unsigned long long)seed, step, dc.bytes_in_use,
                     (long long)st.reserved_bytes[TESSERA_POOL_ALL].current);
    }
    /* Whether the random steps stitched depends on the seed (under pressure, on whether the
     * device ever filled up); the end of the run needs stitching whatever they did. */
    ts_devmodel_fail_vm_map_after(f.dev, 0);
    ts_devmodel_fail_vm_create_after(f.dev, 0);
    while (n > 0)
        assert_int_equal(ts_free(f.a, addr[--n]), TS_OK);
    if (variant == 3)
        ts_empty_cache(f.a); /* coarse handles cached by the random steps hold no 4 MiB hole whole */
    if (variant > 0)
        model_es_stitch_needed(&f, seed, variant);
    ts_empty_cache(f.a);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    fx_close(&f);
}

static uint64_t seed_base(void)
{
    const char *e = getenv("TESSERA_TEST_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "expandable model tests: seed %llu (replay with TESSERA_TEST_SEED=%llu)\n",
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

/* Six blocks of unit bytes allocated and the even ones freed: holes of unit bytes between live
 * blocks p[1], p[3], p[5]. */
static void holes_make(fixture *f, size_t unit, uintptr_t p[6])
{
    for (int i = 0; i < 6; i++)
        p[i] = fx_alloc(f, unit);
    for (int i = 0; i < 6; i += 2)
        fx_free(f, p[i]);
}

/* A 1 GiB device with 6 x 12 MiB allocated and the even ones freed: 36 MiB free in 12 MiB holes
 * between live blocks p[1], p[3], p[5]. */
static void holes_open(fixture *f, const ts_config *cfg, uintptr_t p[6])
{
    fx_open(f, 1 * GiB, cfg, true, false);
    holes_make(f, 12 * MiB, p);
}

/* stitch_when: 6 x 12 MiB with 2 MiB pages, the even ones freed (36 MiB in 12 MiB holes), then a
 * 24 MiB request no hole can serve. always: stitched from the holes, nothing new reserved.
 * pressure: the segment grows while it can; with a cap that the growth would pass (80 MiB), the
 * holes are stitched instead, with no release-and-retry. */
static void test_stitch_when(void **state)
{
    (void)state;
    enum { ALWAYS, PRESSURE, PRESSURE_CAPPED };
    for (int mode = ALWAYS; mode <= PRESSURE_CAPPED; mode++) {
        ts_config cfg = es_config();
        cfg.expandable_page = 2 * MiB;
        cfg.stitching = true;
        cfg.stitch_when = mode == ALWAYS ? TS_STITCH_ALWAYS : TS_STITCH_PRESSURE;
        if (mode == PRESSURE_CAPPED)
            cfg.memory_limit = 80 * MiB;
        fixture f;
        uintptr_t p[6];
        holes_open(&f, &cfg, p);
        uintptr_t q = 0;
        int rc = ts_malloc(f.a, 24 * MiB, 0, &q);
        if (rc != TS_OK)
            fail_msg("mode %d: the 24 MiB request failed (%d)", mode, rc);
        fx_check(&f);
        const tessera_device_stats *st = fx_stats(&f);
        const bool stitched = mode != PRESSURE;
        assert_int_equal(st->num_stitches, stitched ? 1 : 0);
        assert_int_equal(st->num_alloc_retries, 0);
        assert_int_equal(st->num_ooms, 0);
        /* stitching maps pages that are already reserved; growing reserves 24 MiB more */
        assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current,
                         stitched ? 72 * MiB : 96 * MiB);
        assert_true(ts_devmodel_is_backed(f.dev, q, 24 * MiB));
        fx_free(&f, q);
        for (int i = 1; i < 6; i += 2)
            fx_free(&f, p[i]);
        fx_close(&f);
    }
}

/* Peer access: the allocator grants a peer device every mapping it has made, expandable handles
 * and stitched aliases alike, and every mapping it makes later. test_stitch_when's layout: a
 * stitched 24 MiB block exists when peer access is enabled; growth and a second stitch come
 * after. */
static void peer_assert_granted(fixture *f, const uintptr_t *ptr, const size_t *size, size_t n,
                                const char *when)
{
    for (size_t i = 0; i < n; i++)
        if (!ts_devmodel_peer_can_access(f->dev, 1, ptr[i], size[i]))
            fail_msg("block %zu (%zu MiB), mapped %s peer access, is not granted", i,
                     size[i] / MiB, when);
}

static void test_peer_access_covers_every_mapping(void **state)
{
    (void)state;
    ts_config cfg = es_config();
    cfg.expandable_page = 2 * MiB;
    cfg.stitching = true;
    fixture f;
    uintptr_t p[6];
    holes_open(&f, &cfg, p);
    const uintptr_t stitched = fx_alloc(&f, 24 * MiB); /* from the holes */
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    const uintptr_t before[] = {p[1], p[3], p[5], stitched};
    const size_t before_size[] = {12 * MiB, 12 * MiB, 12 * MiB, 24 * MiB};
    for (size_t i = 0; i < 4; i++)
        assert_false(ts_devmodel_peer_can_access(f.dev, 1, before[i], before_size[i]));

    assert_int_equal(ts_allocator_peer_add(f.a, 1), TS_OK);
    assert_int_equal(ts_allocator_peer_add(f.a, 1), TS_OK); /* idempotent */
    assert_int_equal(ts_allocator_peer_add(f.a, 64), TS_EINVAL);
    peer_assert_granted(&f, before, before_size, 4, "before");
    assert_false(ts_devmodel_peer_can_access(f.dev, 2, p[1], 12 * MiB)); /* only device 1 */

    /* later mappings: growth, then a second stitch from the two freed 12 MiB blocks and the
     * hole the first stitch left */
    const uintptr_t grown = fx_alloc(&f, 40 * MiB);
    fx_free(&f, p[1]);
    fx_free(&f, p[5]);
    const int64_t stitches = fx_stats(&f)->num_stitches;
    const uintptr_t stitched2 = fx_alloc(&f, 36 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, stitches + 1);
    const uintptr_t after[] = {grown, stitched2, p[3], stitched};
    const size_t after_size[] = {40 * MiB, 36 * MiB, 12 * MiB, 24 * MiB};
    peer_assert_granted(&f, after, after_size, 4, "after");
    fx_check(&f);
    for (size_t i = 0; i < 4; i++)
        fx_free(&f, after[i]);
    fx_close(&f);
}

static void test_es_model(void **state)
{
    (void)state;
    uint64_t seed = seed_base();
    for (int variant = 0; variant < 4; variant++) {
        for (int i = 0; i < 4; i++)
            model_es(seed + (uint64_t)i, false, variant);
        for (int i = 0; i < 4; i++)
            model_es(seed * 7 + (uint64_t)i, true, variant);
    }
}

/* The device model refuses, as the driver does, access granted or an unmap over a range that is
 * not whole mappings back to back (a part of one, or one and the gap after it): the check that
 * every unit test's fx_close relies on when it counts invalid calls. */
static void test_devmodel_refuses_ranges_that_are_not_whole_mappings(void **state)
{
    (void)state;
    ts_devmodel *m = ts_devmodel_create(64 * MiB, 0);
    assert_non_null(m);
    ts_backend be = ts_devmodel_backend(m, true, false);
    uintptr_t va = 0;
    uint64_t h[2];
    assert_int_equal(be.vm_reserve(be.ctx, 8 * MiB, &va), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 2 * MiB, &h[0]), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 2 * MiB, &h[1]), TS_OK);
    const ts_vm_piece pieces[2] = {{2 * MiB, h[0]}, {2 * MiB, h[1]}};
    assert_int_equal(be.vm_map(be.ctx, va, pieces, 2), TS_OK);
    assert_int_equal(be.vm_access(be.ctx, va, 4 * MiB), TS_OK);
    assert_int_not_equal(be.vm_access(be.ctx, va, 1 * MiB), TS_OK);
    assert_int_not_equal(be.vm_access(be.ctx, va, 6 * MiB), TS_OK);
    assert_int_not_equal(be.vm_unmap(be.ctx, va + 2 * MiB, 1 * MiB), TS_OK);
    assert_int_not_equal(be.vm_unmap(be.ctx, va + 4 * MiB, 2 * MiB), TS_OK);
    ts_devmodel_counters c;
    ts_devmodel_counters_get(m, &c);
    assert_int_equal(c.invalid_calls, 4);
    assert_true(ts_devmodel_is_backed(m, va, 4 * MiB));
    assert_int_equal(be.vm_unmap(be.ctx, va + 2 * MiB, 2 * MiB), TS_OK);
    assert_int_equal(be.vm_unmap(be.ctx, va, 2 * MiB), TS_OK);
    assert_false(ts_devmodel_is_backed(m, va, 2 * MiB));
    assert_int_equal(be.vm_destroy(be.ctx, h[0]), TS_OK);
    assert_int_equal(be.vm_destroy(be.ctx, h[1]), TS_OK);
    assert_int_equal(be.vm_release(be.ctx, va, 8 * MiB), TS_OK);
    ts_devmodel_counters_get(m, &c);
    assert_int_equal(c.invalid_calls, 4);
    assert_int_equal(c.bytes_in_use, 0);
    ts_devmodel_destroy(m);
}

/* The model's copies touch only the range asked: a copy of the first of two adjacent mappings
 * writes nothing past its size in host memory and changes nothing of the second; nothing is read
 * where nothing is mapped. */
static void test_devmodel_copies_stop_at_the_range(void **state)
{
    (void)state;
    ts_devmodel *m = ts_devmodel_create(64 * MiB, 0);
    assert_non_null(m);
    ts_backend be = ts_devmodel_backend(m, true, false);
    uintptr_t va = 0;
    uint64_t h[2], c0, c1, got;
    assert_int_equal(be.vm_reserve(be.ctx, 8 * MiB, &va), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 2 * MiB, &h[0]), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 2 * MiB, &h[1]), TS_OK);
    const ts_vm_piece pieces[2] = {{2 * MiB, h[0]}, {2 * MiB, h[1]}};
    assert_int_equal(be.vm_map(be.ctx, va, pieces, 2), TS_OK);
    assert_true(ts_devmodel_content(m, va, &c0));
    assert_true(ts_devmodel_content(m, va + 2 * MiB, &c1));
    assert_int_not_equal(c0, c1);
    assert_false(ts_devmodel_content(m, va + 4 * MiB, &got));
    char *host = calloc(1, 2 * MiB + 64);
    assert_non_null(host);
    assert_int_equal(be.copy_out(be.ctx, host, va, 2 * MiB), TS_OK);
    for (size_t i = 2 * MiB; i < 2 * MiB + 64; i++)
        assert_int_equal(host[i], 0);
    memset(host + 2 * MiB, 0x5a, 64);
    assert_int_equal(be.copy_in(be.ctx, va, host, 2 * MiB), TS_OK);
    assert_true(ts_devmodel_content(m, va, &got));
    assert_int_equal(got, c0);
    assert_true(ts_devmodel_content(m, va + 2 * MiB, &got));
    assert_int_equal(got, c1);
    free(host);
    assert_int_equal(be.vm_unmap(be.ctx, va, 4 * MiB), TS_OK);
    assert_int_equal(be.vm_destroy(be.ctx, h[0]), TS_OK);
    assert_int_equal(be.vm_destroy(be.ctx, h[1]), TS_OK);
    assert_int_equal(be.vm_release(be.ctx, va, 8 * MiB), TS_OK);
    ts_devmodel_counters c;
    ts_devmodel_counters_get(m, &c);
    assert_int_equal(c.invalid_calls, 0);
    ts_devmodel_destroy(m);
}

/* --- pause and resume (core/pause.c) -------------------------------------------------------- */

/* The content number every 2 MiB page of [p, p + size) reads (the device model's stand-in for
 * its bytes). */
static void contents_of(fixture *f, uintptr_t p, size_t size, uint64_t *out)
{
    for (size_t i = 0; i < size / (2 * MiB); i++)
        if (!ts_devmodel_content(f->dev, p + i * 2 * MiB, &out[i]))
            fail_msg("page %zu of %#lx is not mapped", i, (unsigned long)p);
}

/* Every 2 MiB page of the n blocks live[i] (size[i] bytes) reads what before[i] says it read. */
static void contents_kept(fixture *f, const uintptr_t *live, const size_t *size, int n,
                          uint64_t (*before)[12])
{
    for (int i = 0; i < n; i++) {
        uint64_t after[12];
        contents_of(f, live[i], size[i], after);
        for (size_t k = 0; k < size[i] / (2 * MiB); k++)
            if (after[k] != before[i][k])
                fail_msg("block %d page %zu reads %#llx after the resume, %#llx before", i, k,
                         (unsigned long long)after[k], (unsigned long long)before[i][k]);
    }
}

/* test_stitch_when's layout with a stitched 24 MiB block over the holes: three live 12 MiB blocks
 * of the expandable segment and one stitched range whose pages alias the freed ones. A pause
 * gives every byte back to the device and keeps every address; a resume maps pages at the same
 * addresses that read what they read before, the stitched range's too (its aliases follow the
 * new handles), and the allocator goes on as before. */
static void test_pause_keeps_every_address(void **state)
{
    (void)state;
    ts_config cfg = es_config();
    cfg.expandable_page = 2 * MiB;
    cfg.stitching = true;
    fixture f;
    uintptr_t p[6];
    holes_open(&f, &cfg, p);
    const uintptr_t live[4] = {p[1], p[3], p[5], fx_alloc(&f, 24 * MiB)};
    const size_t size[4] = {12 * MiB, 12 * MiB, 12 * MiB, 24 * MiB};
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    uint64_t before[4][12];
    for (int i = 0; i < 4; i++)
        contents_of(&f, live[i], size[i], before[i]);
    const int64_t reserved = fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current;

    ts_pause_report r;
    assert_int_equal(ts_allocator_pause(f.a, &r), TS_PAUSE_OK);
    assert_true(ts_allocator_paused(f.a));
    ts_devmodel_counters c;
    ts_devmodel_counters_get(f.dev, &c);
    assert_int_equal(c.bytes_in_use, 0); /* every page given back */
    /* the 12 MiB of the holes the range does not use go as free cache; the 60 MiB of pages
     * under live blocks are copied once (the range's aliases are the same bytes) */
    assert_int_equal(c.copied_out, 60 * MiB);
    assert_int_equal(r.saved, 60 * MiB);
    assert_int_equal(r.given, 72 * MiB);
    for (int i = 0; i < 4; i++)
        assert_false(ts_devmodel_is_backed(f.dev, live[i], size[i]));
    /* the program's view is unchanged but for the free cache: its live blocks keep their pages
     * reserved */
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current,
                     reserved - (int64_t)(12 * MiB));
    assert_int_equal(r.reserved, 60 * MiB);
    assert_int_equal(r.allocated, 60 * MiB);
    assert_int_equal(fx_stats(&f)->num_pauses, 1);
    assert_int_equal(fx_stats(&f)->pause_saved_bytes, 60 * MiB);
    /* paused: nothing to give, nothing released, and a second pause is refused */
    assert_int_equal(ts_allocator_give(f.a, 64 * MiB, NULL), 0);
    assert_int_equal(ts_empty_cache(f.a), 0);
    assert_int_equal(ts_allocator_pause(f.a, NULL), TS_PAUSE_ALREADY);
    fx_check(&f);

    assert_int_equal(ts_allocator_resume(f.a, &r), TS_PAUSE_OK);
    assert_false(ts_allocator_paused(f.a));
    assert_int_equal(r.saved, 60 * MiB);
    for (int i = 0; i < 4; i++)
        assert_true(ts_devmodel_is_backed(f.dev, live[i], size[i]));
    contents_kept(&f, live, size, 4, before);
    ts_devmodel_counters_get(f.dev, &c);
    assert_int_equal(c.bytes_in_use, 60 * MiB);
    assert_int_equal(c.copied_in, 60 * MiB);
    assert_int_equal(fx_stats(&f)->num_resumes, 1);
    assert_int_equal(ts_allocator_resume(f.a, NULL), TS_PAUSE_NOT_PAUSED);
    fx_check(&f);
    /* it goes on: a new block, and every free, with the device's accounting exact at the end */
    uintptr_t more = fx_alloc(&f, 6 * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, more, 6 * MiB));
    fx_free(&f, more);
    for (int i = 0; i < 4; i++)
        fx_free(&f, live[i]);
    fx_check(&f);
    fx_close(&f);
}

/* A 1 GiB device with expandable segments of page-byte pages in coarse handles, stitching
 * before growth. */
static void coarse_open(fixture *f, size_t page)
{
    ts_config cfg = es_config();
    cfg.expandable_page = page;
    cfg.stitching = true;
    cfg.handle_policy = TS_HANDLES_COARSE;
    fx_open(f, 1 * GiB, &cfg, true, false);
}

/* The same with coarse handles: the six 12 MiB blocks are carved from a 72 MiB growth (handles of
 * 20, 20, 20 and 12 MiB), so the stitched range maps parts of handles, from their middle. No
 * handle is free whole, so the pause keeps all 72 MiB; after the resume every page, the
 * range's too, reads what it read before: its aliases follow the new handles at their offsets. */
static void test_pause_keeps_aliases_of_parts_of_handles(void **state)
{
    (void)state;
    fixture f;
    coarse_open(&f, 2 * MiB);
    fx_free(&f, fx_alloc(&f, 72 * MiB));
    uintptr_t p[6];
    holes_make(&f, 12 * MiB, p);
    const uintptr_t live[4] = {p[1], p[3], p[5], fx_alloc(&f, 24 * MiB)};
    const size_t size[4] = {12 * MiB, 12 * MiB, 12 * MiB, 24 * MiB};
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    ts_devmodel_counters c;
    ts_devmodel_counters_get(f.dev, &c);
    assert_int_equal(c.vm_creates, 4);
    uint64_t before[4][12];
    for (int i = 0; i < 4; i++)
        contents_of(&f, live[i], size[i], before[i]);
    /* the range's second half is the hole at 24 MiB: the middle of the second handle */
    uint64_t hole;
    assert_true(ts_devmodel_content(f.dev, p[2], &hole));
    assert_true(before[3][6] == hole);

    ts_pause_report r;
    assert_int_equal(ts_allocator_pause(f.a, &r), TS_PAUSE_OK);
    assert_int_equal(r.saved, 72 * MiB);
    assert_int_equal(r.given, 72 * MiB);
    ts_devmodel_counters_get(f.dev, &c);
    assert_int_equal(c.bytes_in_use, 0);
    assert_int_equal(ts_allocator_resume(f.a, &r), TS_PAUSE_OK);
    contents_kept(&f, live, size, 4, before);
    fx_check(&f);
    for (int i = 0; i < 4; i++)
        fx_free(&f, live[i]);
    fx_check(&f);
    fx_close(&f);
}

/* Pages count from the segment's start: with 6 MiB pages (not a power of two, so not aligned
 * to themselves in the address space) and coarse handles, six 6 MiB blocks with the even ones
 * freed leave three 6 MiB holes of whole pages, and a 12 MiB request is stitched from two of
 * them, nothing new reserved. */
static void test_stitch_pages_count_from_the_segment(void **state)
{
    (void)state;
    fixture f;
    coarse_open(&f, 6 * MiB);
    uintptr_t p[6];
    holes_make(&f, 6 * MiB, p);
    assert_true(p[0] % (6 * MiB) != 0); /* the case: the segment is not 6 MiB aligned */
    const uintptr_t r = fx_alloc(&f, 12 * MiB);
    assert_int_equal(fx_stats(&f)->num_stitches, 1);
    assert_int_equal(fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].current, 36 * MiB);
    assert_true(ts_devmodel_is_backed(f.dev, r, 12 * MiB));
    fx_check(&f);
    fx_free(&f, r);
    for (int i = 1; i < 6; i += 2)
        fx_free(&f, p[i]);
    fx_check(&f);
    fx_close(&f);
}

/* What cannot be paused is refused, and nothing changes: live memory in a plain segment (it could
 * not come back at the same address), memory the program holds from the driver itself, and a
 * capture underway. With nothing mapped, a pause is a pause of nothing. */
static void test_pause_refusals(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false); /* PyTorch's policy: plain segments */
    uintptr_t b = fx_alloc(&f, 4 * MiB);
    fx_free(&f, fx_alloc(&f, 24 * MiB)); /* a segment of its own, cached */
    ts_devmodel_counters c0, c1;
    ts_devmodel_counters_get(f.dev, &c0);
    assert_int_equal(ts_allocator_pause(f.a, NULL), TS_PAUSE_PLAIN);
    assert_false(ts_allocator_paused(f.a));
    ts_devmodel_counters_get(f.dev, &c1);
    assert_int_equal(c1.bytes_in_use, c0.bytes_in_use); /* the cache too: nothing changed */
    assert_true(ts_devmodel_is_backed(f.dev, b, 4 * MiB));
    fx_free(&f, b);
    /* only cached plain segments: they go, and the pause holds nothing */
    ts_pause_report pr;
    assert_int_equal(ts_allocator_pause(f.a, &pr), TS_PAUSE_OK);
    assert_int_equal(pr.given, c0.bytes_in_use);
    assert_int_equal(pr.saved, 0);
    ts_devmodel_counters_get(f.dev, &c1);
    assert_int_equal(c1.bytes_in_use, 0);
    assert_int_equal(ts_allocator_resume(f.a, NULL), TS_PAUSE_OK);
    fx_close(&f);

    ts_config cfg = es_config();
    fx_open(&f, 1 * GiB, &cfg, true, false);
    b = fx_alloc(&f, 4 * MiB);
    assert_int_equal(ts_allocator_driver_reserve(f.a, 2 * MiB, false), TS_OK);
    assert_int_equal(ts_allocator_driver_record(f.a, 0x1000, 2 * MiB), TS_OK);
    assert_int_equal(ts_allocator_pause(f.a, NULL), TS_PAUSE_DRIVER_MEMORY);
    size_t gone = 0;
    assert_int_equal(ts_allocator_driver_forget(f.a, 0x1000, &gone), TS_OK);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    assert_int_equal(ts_allocator_pause(f.a, NULL), TS_PAUSE_CAPTURE);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    assert_false(ts_allocator_paused(f.a));
    assert_true(ts_devmodel_is_backed(f.dev, b, 4 * MiB));
    fx_free(&f, b);
    /* nothing live: the cache goes, and the pause holds nothing */
    ts_pause_report r;
    assert_int_equal(ts_allocator_pause(f.a, &r), TS_PAUSE_OK);
    assert_int_equal(r.saved, 0);
    assert_true(ts_allocator_paused(f.a));
    assert_int_equal(fx_stats(&f)->num_pauses, 1); /* counted: the page says it is paused */
    assert_int_equal(ts_allocator_resume(f.a, NULL), TS_PAUSE_OK);
    assert_int_equal(fx_stats(&f)->num_resumes, 1);
    assert_false(ts_allocator_paused(f.a));
    fx_close(&f);
}

/* A device whose copies or synchronisation fail on the nth call (1: the next; 0: never), over the
 * device model: the model's own calls, with these three in front. */
static ts_backend failing_inner;
static unsigned fail_copy_out_at, fail_copy_in_at, fail_sync_at;

static bool fails_now(unsigned *at)
{
    return *at && --*at == 0;
}

static int failing_copy_out(void *ctx, void *host, uintptr_t dev, size_t size)
{
    return fails_now(&fail_copy_out_at) ? TS_EINVAL
                                        : failing_inner.copy_out(ctx, host, dev, size);
}

static int failing_copy_in(void *ctx, uintptr_t dev, const void *host, size_t size)
{
    return fails_now(&fail_copy_in_at) ? TS_EINVAL : failing_inner.copy_in(ctx, dev, host, size);
}

static int failing_synchronize(void *ctx)
{
    return fails_now(&fail_sync_at) ? TS_EINVAL : failing_inner.synchronize(ctx);
}

/* fx_open with expandable segments of 2 MiB pages over that device. */
static void open_failing(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->cfg = es_config();
    f->cfg.expandable_page = 2 * MiB;
    f->dev = ts_devmodel_create(1 * GiB, 0);
    assert_non_null(f->dev);
    failing_inner = ts_devmodel_backend(f->dev, true, false);
    ts_backend be = failing_inner;
    be.copy_out = failing_copy_out;
    be.copy_in = failing_copy_in;
    be.synchronize = failing_synchronize;
    fail_copy_out_at = fail_copy_in_at = fail_sync_at = 0;
    ts_stats_sink sink = {&f->page_stats, &f->page_seq};
    ts_devmodel_watch_seq(f->dev, &f->page_seq);
    f->a = ts_allocator_create(&f->cfg, &be, 0, sink);
    assert_non_null(f->a);
}

/* This process's address space, in bytes (/proc/self/statm): the host copy of a pause that
 * failed must be given back. */
static size_t host_mapped(void)
{
    FILE *fp = fopen("/proc/self/statm", "r");
    assert_non_null(fp);
    unsigned long pages = 0;
    assert_int_equal(fscanf(fp, "%lu", &pages), 1);
    fclose(fp);
    return (size_t)pages * 4096;
}

/* A pause with no host memory for the copy (here: an address-space limit just above what the
 * process maps) is refused as such, the live block keeps its pages and bytes, and the pause is
 * not counted. In a child, so that the limit binds nobody else. Not under ASan, whose shadow
 * memory needs more address space than any such limit leaves. */
static void test_pause_without_host_memory(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    skip();
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    skip();
#endif
#endif
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ts_config cfg = es_config();
        fixture f;
        fx_open(&f, 8 * GiB, &cfg, true, false);
        const uintptr_t b = fx_alloc(&f, 2 * GiB); /* the model holds no bytes: nothing to map */
        uint64_t before, after;
        int ok = ts_devmodel_content(f.dev, b, &before);
        const struct rlimit lim = {host_mapped() + 256 * MiB, host_mapped() + 256 * MiB};
        ok = ok && setrlimit(RLIMIT_AS, &lim) == 0;
        ts_pause_report r;
        ok = ok && ts_allocator_pause(f.a, &r) == TS_PAUSE_HOST_MEMORY;
        ok = ok && !ts_allocator_paused(f.a) && r.saved == 0;
        ok = ok && ts_devmodel_is_backed(f.dev, b, 2 * GiB);
        ok = ok && ts_devmodel_content(f.dev, b, &after) && after == before;
        ok = ok && fx_stats(&f)->num_pauses == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A pause whose synchronisation or copy fails is refused and changes nothing: the pages stay
 * mapped with their bytes, no counter moves, the host copy is given back, and a later pause
 * succeeds. */
static void test_pause_device_failures(void **state)
{
    (void)state;
    fixture f;
    open_failing(&f);
    const uintptr_t b = fx_alloc(&f, 64 * MiB);
    uint64_t before[32], after[32];
    contents_of(&f, b, 64 * MiB, before);
    ts_devmodel_counters c;
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            fail_sync_at = 1;
        else
            fail_copy_out_at = 17; /* half way through the 32 pages */
        const size_t host = host_mapped();
        ts_pause_report r;
        assert_int_equal(ts_allocator_pause(f.a, &r), TS_PAUSE_DEVICE);
        assert_false(ts_allocator_paused(f.a));
        assert_int_equal(r.saved, 0);
        assert_true(host_mapped() < host + 16 * MiB); /* not the 64 MiB copy kept */
        ts_devmodel_counters_get(f.dev, &c);
        assert_int_equal(c.bytes_in_use, 64 * MiB);
        assert_true(ts_devmodel_is_backed(f.dev, b, 64 * MiB));
        contents_of(&f, b, 64 * MiB, after);
        assert_memory_equal(before, after, sizeof before);
        assert_int_equal(fx_stats(&f)->num_pauses, 0);
        assert_int_equal(fx_stats(&f)->pause_saved_bytes, 0);
    }
    ts_devmodel_counters_get(f.dev, &c);
    assert_int_equal(c.copied_out, 16 * 2 * MiB); /* the sixteen pages before the failure */
    assert_int_equal(ts_allocator_pause(f.a, NULL), TS_PAUSE_OK);
    assert_int_equal(ts_allocator_resume(f.a, NULL), TS_PAUSE_OK);
    contents_of(&f, b, 64 * MiB, after);
    assert_memory_equal(before, after, sizeof before);
    fx_free(&f, b);
    fx_close(&f);
}

/* A resume that cannot create a page (the device is full: another process took the memory
 * meanwhile), or whose map or copy fails half way, gives back every page it had mapped, makes no
 * call the driver refuses (fx_close counts them) and stays paused with its bytes; the next
 * resume brings them all back. */
static void test_resume_device_failures(void **state)
{
    (void)state;
    fixture f;
    open_failing(&f);
    const uintptr_t b = fx_alloc(&f, 10 * MiB);
    uint64_t before[5], after[5];
    contents_of(&f, b, 10 * MiB, before);
    ts_devmodel_counters c;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(ts_allocator_pause(f.a, NULL), TS_PAUSE_OK);
        if (k == 0)
            ts_devmodel_fail_vm_create_after(f.dev, 3); /* the third page of five */
        else if (k == 1)
            ts_devmodel_fail_vm_map_after(f.dev, 3);
        else
            fail_copy_in_at = 3;
        assert_int_equal(ts_allocator_resume(f.a, NULL), TS_PAUSE_DEVICE);
        assert_true(ts_allocator_paused(f.a));
        ts_devmodel_counters_get(f.dev, &c);
        assert_int_equal(c.bytes_in_use, 0);
        assert_int_equal(c.invalid_calls, 0);
        assert_false(ts_devmodel_is_backed(f.dev, b, 2 * MiB));
        assert_int_equal(fx_stats(&f)->num_resumes, k);
        assert_int_equal(ts_allocator_resume(f.a, NULL), TS_PAUSE_OK);
        assert_int_equal(fx_stats(&f)->num_resumes, k + 1);
        contents_of(&f, b, 10 * MiB, after);
        assert_memory_equal(before, after, sizeof before);
        fx_check(&f);
    }
    fx_free(&f, b);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devmodel_refuses_ranges_that_are_not_whole_mappings),
        cmocka_unit_test(test_es_tiles_one_reservation),
        cmocka_unit_test(test_es_partial_pages_stay_mapped),
        cmocka_unit_test(test_es_counts_free_block_before_unmapped_range),
        cmocka_unit_test(test_es_growth_keeps_the_latest_free_epoch),
        cmocka_unit_test(test_es_best_fit_keeps_the_growing_tail),
        cmocka_unit_test(test_es_page_rounded_to_granularity),
        cmocka_unit_test(test_es_reservation_size),
        cmocka_unit_test(test_es_seed_middle),
        cmocka_unit_test(test_es_seed_even),
        cmocka_unit_test(test_es_map_failure_rolls_back),
        cmocka_unit_test(test_es_max_split_does_not_grow_forever),
        cmocka_unit_test(test_stitch_when),
        cmocka_unit_test(test_peer_access_covers_every_mapping),
        cmocka_unit_test(test_devmodel_copies_stop_at_the_range),
        cmocka_unit_test(test_pause_keeps_every_address),
        cmocka_unit_test(test_pause_keeps_aliases_of_parts_of_handles),
        cmocka_unit_test(test_stitch_pages_count_from_the_segment),
        cmocka_unit_test(test_pause_refusals),
        cmocka_unit_test(test_pause_without_host_memory),
        cmocka_unit_test(test_pause_device_failures),
        cmocka_unit_test(test_resume_device_failures),
        cmocka_unit_test(test_es_model),
        cmocka_unit_test(test_es_check_refuses_unmerged_unmapped_blocks),
    };
    return cmocka_run_group_tests_name("expandable", tests, NULL, NULL);
}
