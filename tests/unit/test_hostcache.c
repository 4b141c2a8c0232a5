/* The pinned host memory cache (core/hostcache.c) over the device model: page-rounded requests,
 * regions of the request's size (large) or shared 2 MiB regions (small), pieces split by best fit
 * and merged on free, classes (flags, small or large), reuse only after the fence of the free,
 * frees during a capture, the floor rule, the idle rule (an injected clock), invalid frees,
 * counters, fences given back, teardown. */
#include "fixture.h"

#include <stdio.h>
#include <time.h>

#include "core/hostcache.h"

#define PAGE TS_HOST_PAGE
#define SMALL_REGION TS_HOST_SMALL_REGION

static ts_devmodel_counters dev_counters(fixture *f)
{
    ts_devmodel_counters c;
    ts_devmodel_counters_get(f->dev, &c);
    return c;
}

/* Every call closes the stats window it opened: a reader never spins on a page left odd. */
static void *host_alloc(fixture *f, size_t size, unsigned flags)
{
    uintptr_t p = 0;
    assert_int_equal(ts_host_alloc(f->a, size, flags, &p), TS_OK);
    assert_true(p != 0);
    assert_int_equal(f->page_seq & 1, 0);
    return (void *)p;
}

static void host_free(fixture *f, void *p)
{
    assert_int_equal(ts_host_free(f->a, (uintptr_t)p), TS_OK);
    assert_int_equal(f->page_seq & 1, 0);
}

/* The pinned region (the driver's buffer) starting at p: its size, 0 when p starts none. */
static size_t region_size(fixture *f, void *p)
{
    size_t size = 0;
    unsigned flags;
    return ts_devmodel_host_info(f->dev, (uintptr_t)p, &size, &flags) == TS_OK ? size : 0;
}

/* The size of the region p was in, where a region given back may have been mapped again for a
 * later one: p inside [later, later + n) counts as gone (0), as the driver may reuse addresses. */
static size_t region_size_unless_in(fixture *f, void *p, void *later, size_t n)
{
    const char *q = p, *l = later;
    return q >= l && q < l + n ? 0 : region_size(f, p);
}

static ts_host_info lookup(fixture *f, const void *p)
{
    ts_host_info info;
    memset(&info, 0, sizeof info);
    assert_int_equal(ts_host_lookup(f->a, (uintptr_t)p, &info), TS_OK);
    return info;
}

/* A fixture whose allocator has pinned_idle_s idle. */
static void open_idle(fixture *f, uint32_t idle, bool fences)
{
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.pinned_idle_s = idle;
    fx_open(f, 1 * GiB, &cfg, false, fences);
}

/* A clock the test moves. */
static int64_t test_now;
static int64_t test_clock(void *user)
{
    (void)user;
    return test_now;
}

/* pinned_idle_s:10 with fences, on the test's clock, which starts at start (microseconds). */
static void open_clocked(fixture *f, int64_t start)
{
    open_idle(f, 10, true);
    test_now = start;
    ts_host_set_clock(f->a, test_clock, NULL);
}

/* Every byte of a request is the program's: requests are rounded up to whole pages, never down
 * (a 2^k + 1 byte request gets k + 1 bits' worth, not 2^k), and two of them never overlap. Small
 * requests share a region of 2 MiB; a large one gets a region of its own size. */
static void test_host_sizes_are_whole_pages_and_bytes_are_real(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *a = host_alloc(&f, 5000, 0);
    char *b = host_alloc(&f, 1, 0);
    char *c = host_alloc(&f, 3 * MiB + 1, 0);
    assert_int_equal(region_size(&f, a), SMALL_REGION);
    assert_ptr_equal(b, a + 2 * PAGE); /* the next piece of the small region */
    assert_int_equal(lookup(&f, a).size, 2 * PAGE);
    assert_int_equal(lookup(&f, b).size, PAGE);
    assert_int_equal(region_size(&f, c), 3 * MiB + PAGE);
    memset(a, 0x5a, 5000);
    memset(b, 0xa5, 1);
    assert_int_equal((unsigned char)a[4999], 0x5a);
    assert_int_equal((unsigned char)b[0], 0xa5);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->host_allocations.current, 2);
    assert_int_equal(st->host_allocated_bytes.current, (int64_t)(SMALL_REGION + 3 * MiB + PAGE));
    assert_int_equal(st->host_active_requests.current, 3);
    assert_int_equal(st->host_active_bytes.current, (int64_t)(3 * PAGE + 3 * MiB + PAGE));
    assert_int_equal(st->num_host_alloc, 2);
    assert_int_equal(st->num_host_alloc_calls, 3);
    /* Device memory is untouched: pinned host memory is not the device's. */
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    host_free(&f, a);
    host_free(&f, b);
    host_free(&f, c);
    fx_close(&f);
}

/* Many small requests cost one driver call: they share 2 MiB regions, a new one only when the
 * last is full. */
static void test_host_one_page_left_is_split_off(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    char *big = host_alloc(&f, 3 * MiB, 0);
    host_free(&f, big);
    char *b = host_alloc(&f, 3 * MiB - PAGE, 0); /* one page left: a piece of its own */
    assert_ptr_equal(b, big);
    assert_int_equal(lookup(&f, b).size, 3 * MiB - PAGE);
    assert_false(lookup(&f, big + 3 * MiB - PAGE).live);
    assert_int_equal(lookup(&f, big + 3 * MiB - PAGE).base, (uintptr_t)(big + 3 * MiB - PAGE));
    host_free(&f, b);
    fx_close(&f);
}

static void test_host_small_requests_share_regions(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    enum { N = 33 };
    char *p[N];
    for (int i = 0; i < N; i++)
        p[i] = host_alloc(&f, 64 * KiB - 100, 0); /* 16 pages: 32 fill a region */
    for (int i = 1; i < 32; i++)
        assert_ptr_equal(p[i], p[0] + (size_t)i * 64 * KiB);
    assert_true(p[32] < p[0] || p[32] >= p[0] + SMALL_REGION);
    assert_int_equal(fx_stats(&f)->num_host_alloc, 2);
    for (int i = 0; i < N; i++)
        host_free(&f, p[i]);
    assert_int_equal(ts_host_empty_cache(f.a), 2 * SMALL_REGION);
    fx_close(&f);
}

static void test_host_request_just_over_a_power_of_two(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    const size_t sizes[] = {PAGE + 1, 2 * PAGE + 1, TS_HOST_SMALL + 1, 4 * MiB + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = host_alloc(&f, n, 0);
        unsigned char *q = host_alloc(&f, n, 0);
        ts_host_info ip = lookup(&f, p);
        assert_true(ip.size >= n);
        assert_true(ip.size < n + PAGE);
        assert_int_equal(ip.requested, n);
        assert_int_equal(region_size(&f, p), n > TS_HOST_SMALL ? ip.size : SMALL_REGION);
        assert_true((uintptr_t)q >= (uintptr_t)p + n || (uintptr_t)q + n <= (uintptr_t)p);
        memset(p, 0x11, n);
        memset(q, 0x22, n);
        assert_int_equal(p[n - 1], 0x11);
        assert_int_equal(p[0], 0x11);
        host_free(&f, p);
        host_free(&f, q);
        /* Freed: the next request of that size reuses p's piece; one of one byte more does not
         * fit in it unless the page rounding left room. */
        unsigned char *r = host_alloc(&f, n, 0);
        assert_true(r == p || r == q);
        host_free(&f, r);
    }
    fx_close(&f);
}

/* A large freed region is split for smaller requests and merged again when they are freed:
 * pinned bytes follow the requests, not their powers of two. */
static void test_host_split_and_merge(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    const size_t big = 129 * MiB + 512 * KiB; /* 129.5 MiB: 256 MiB as a power of two */
    char *a = host_alloc(&f, big, TS_HOST_PORTABLE);
    assert_int_equal(region_size(&f, a), big);
    assert_int_equal(fx_stats(&f)->host_allocated_bytes.current, (int64_t)big);
    host_free(&f, a);
    char *b = host_alloc(&f, 64 * MiB, TS_HOST_PORTABLE);
    char *c = host_alloc(&f, 60 * MiB, TS_HOST_PORTABLE);
    assert_ptr_equal(b, a);
    assert_ptr_equal(c, a + 64 * MiB);
    assert_int_equal(fx_stats(&f)->num_host_alloc, 1);
    assert_int_equal(lookup(&f, c + 1).base, (uintptr_t)c);
    assert_int_equal(lookup(&f, c).size, 60 * MiB);
    /* 5.5 MiB are left: 8 MiB needs a region of its own. */
    char *d = host_alloc(&f, 8 * MiB, TS_HOST_PORTABLE);
    assert_true(d < a || d >= a + big);
    assert_int_equal(fx_stats(&f)->num_host_alloc, 2);
    /* The rest of the region is free and never handed out: freeing into it is refused. */
    assert_int_equal(ts_host_free(f.a, (uintptr_t)(a + 124 * MiB)), TS_EINVAL);
    assert_false(lookup(&f, a + 124 * MiB).live);
    host_free(&f, c);
    host_free(&f, b);
    /* b, c and the rest merged again: the whole region serves one request. */
    char *e = host_alloc(&f, big, TS_HOST_PORTABLE);
    assert_ptr_equal(e, a);
    assert_int_equal(lookup(&f, e).size, big);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_host_alloc, 2);
    assert_int_equal(st->host_allocated_bytes.current, (int64_t)(big + 8 * MiB));
    assert_int_equal(st->host_active_requests.current, 2);
    assert_int_equal(st->host_active_bytes.current, (int64_t)(big + 8 * MiB));
    host_free(&f, e);
    host_free(&f, d);
    assert_int_equal(ts_host_empty_cache(f.a), big + 8 * MiB);
    assert_int_equal(f.page_seq & 1, 0); /* the stats window closed */
    assert_int_equal(dev_counters(&f).host_bytes_in_use, 0);
    fx_close(&f);
}

/* Merging takes both neighbours: a piece freed between two free ones makes one piece of the
 * three, whatever order they were freed in. */
static void test_host_merge_both_sides(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    char *r = host_alloc(&f, 12 * MiB, 0);
    host_free(&f, r);
    char *p[3];
    for (int i = 0; i < 3; i++)
        p[i] = host_alloc(&f, 4 * MiB, 0);
    assert_ptr_equal(p[0], r);
    assert_ptr_equal(p[1], r + 4 * MiB);
    assert_ptr_equal(p[2], r + 8 * MiB);
    const int orders[2][3] = {{0, 2, 1}, {1, 0, 2}};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 3; i++)
            host_free(&f, p[orders[k][i]]);
        assert_int_equal(lookup(&f, r + 5 * MiB).base, (uintptr_t)r);
        assert_int_equal(lookup(&f, r).size, 12 * MiB);
        for (int i = 0; i < 3; i++)
            assert_ptr_equal(host_alloc(&f, 4 * MiB, 0), p[i]);
    }
    assert_int_equal(fx_stats(&f)->num_host_alloc, 1);
    for (int i = 0; i < 3; i++)
        host_free(&f, p[i]);
    fx_close(&f);
}

/* Best fit: the smallest free piece that holds the request. */
static void test_host_best_fit(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    char *big = host_alloc(&f, 20 * MiB, 0);
    char *mid = host_alloc(&f, 10 * MiB, 0);
    char *tight = host_alloc(&f, 9 * MiB, 0);
    host_free(&f, big);
    host_free(&f, mid);
    host_free(&f, tight);
    assert_ptr_equal(host_alloc(&f, 9 * MiB, 0), tight);
    assert_ptr_equal(host_alloc(&f, 9 * MiB, 0), mid);
    assert_ptr_equal(host_alloc(&f, 9 * MiB, 0), big);
    assert_int_equal(fx_stats(&f)->num_host_alloc, 3);
    ts_host_info i = lookup(&f, mid);
    assert_int_equal(i.size, 9 * MiB);
    assert_false(lookup(&f, mid + 9 * MiB).live); /* the 1 MiB rest */
    fx_close(&f);
}

/* A freed piece comes back only once its fence has completed; until then a new region is pinned,
 * and the host never waits. */
static void test_host_reuse_waits_for_the_fence_without_blocking(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    const size_t n = 2 * MiB;
    void *a = host_alloc(&f, n, 0);
    host_free(&f, a);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_fences_recorded, 1);
    assert_int_equal(st->host_active_requests.current, 1); /* freed, fence not seen complete */
    assert_false(lookup(&f, a).live);
    void *b = host_alloc(&f, n, 0);
    assert_ptr_not_equal(a, b);
    st = fx_stats(&f);
    assert_int_equal(st->num_host_alloc, 2);
    assert_int_equal(st->num_fence_waits, 0);
    assert_int_equal(dev_counters(&f).fence_waits, 0);
    assert_int_equal(dev_counters(&f).synchronizes, 0);

    ts_devmodel_complete_fences(f.dev); /* the device catches up: a's fence is done */
    host_free(&f, b);                   /* b's fence: pending */
    void *c = host_alloc(&f, n, 0);
    assert_ptr_equal(c, a);
    void *d = host_alloc(&f, n, 0);
    assert_ptr_not_equal(d, b); /* b still waits */
    st = fx_stats(&f);
    assert_int_equal(st->num_host_alloc, 3);
    assert_int_equal(st->num_host_alloc_calls, 4);
    assert_int_equal(st->num_host_free_calls, 2);
    assert_int_equal(st->host_allocations.current, 3);
    assert_int_equal(st->host_active_requests.current, 3); /* c, d and b (pending) */
    assert_int_equal(dev_counters(&f).fence_waits, 0);
    host_free(&f, c);
    host_free(&f, d);
    ts_devmodel_complete_fences(f.dev);
    assert_int_equal(ts_host_empty_cache(f.a), 3 * n);
    ts_devmodel_counters dc = dev_counters(&f);
    assert_int_equal(dc.fences_recorded, 4);
    assert_int_equal(dc.fences_released, 4); /* every fence given back */
    fx_close(&f);
}

/* A pending piece is not merged into its free neighbours before its fence completes: the merged
 * piece would be handed out with bytes still in use. */
static void test_host_pending_piece_is_not_merged(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *r = host_alloc(&f, 8 * MiB, 0);
    host_free(&f, r);
    ts_devmodel_set_manual_fences(f.dev, true);
    char *a = host_alloc(&f, 4 * MiB, 0);
    char *b = host_alloc(&f, 4 * MiB, 0);
    assert_ptr_equal(a, r);
    assert_ptr_equal(b, r + 4 * MiB);
    host_free(&f, a); /* pending */
    ts_devmodel_complete_fences(f.dev);
    host_free(&f, b); /* a's fence complete, b's pending */
    char *c = host_alloc(&f, 8 * MiB, 0);
    assert_true(c < r || c >= r + 8 * MiB);
    assert_ptr_equal(host_alloc(&f, 4 * MiB, 0), a);
    ts_devmodel_complete_fences(f.dev);
    fx_close(&f);
}

/* Without fences (a backend that has none) a freed piece is reused at once. */
static void test_host_reuse_at_once_without_fences(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    void *a = host_alloc(&f, 3000, 0);
    host_free(&f, a);
    assert_ptr_equal(host_alloc(&f, 4000, 0), a); /* the same page */
    assert_int_equal(fx_stats(&f)->num_host_alloc, 1);
    assert_int_equal(fx_stats(&f)->host_active_requests.current, 1);
    host_free(&f, a);
    assert_int_equal(fx_stats(&f)->host_active_requests.current, 0);
    fx_close(&f);
}

/* Portable, mapped, write-combined and cuMemAllocHost buffers are separate classes: a request is
 * served only by a region pinned with its own flags. */
static void test_host_flags_are_classes(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    const unsigned kinds[] = {0, TS_HOST_PORTABLE, TS_HOST_DEVICEMAP,
                              TS_HOST_PORTABLE | TS_HOST_WRITECOMBINED, TS_HOST_ALLOC_HOST};
    enum { N = sizeof kinds / sizeof kinds[0] };
    void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = host_alloc(&f, 65536, kinds[i]);
    assert_int_equal(fx_stats(&f)->num_host_alloc, N); /* no class served another */
    for (int i = 0; i < N; i++)
        host_free(&f, p[i]);
    for (int i = N - 1; i >= 0; i--) {
        void *q = host_alloc(&f, 65536, kinds[i]);
        assert_ptr_equal(q, p[i]);
        size_t size;
        unsigned flags;
        assert_int_equal(ts_devmodel_host_info(f.dev, (uintptr_t)q, &size, &flags), TS_OK);
        assert_int_equal(flags, kinds[i]);
        assert_int_equal(lookup(&f, q).flags, kinds[i]);
    }
    assert_int_equal(fx_stats(&f)->num_host_alloc, N);
    for (int i = 0; i < N; i++)
        host_free(&f, p[i]);
    /* Unknown flags, and sizes whose rounding overflows: not the cache's (the driver answers). */
    uintptr_t out = 0;
    assert_int_equal(ts_host_alloc(f.a, 100, 0x100, &out), TS_EUNSUPPORTED);
    assert_int_equal(ts_host_alloc(f.a, 100, TS_HOST_FLAGS_MASK + 1, &out), TS_EUNSUPPORTED);
    assert_int_equal(ts_host_alloc(f.a, SIZE_MAX - PAGE + 1, 0, &out), TS_EUNSUPPORTED);
    /* more than a quarter of the address space: the driver's; up to it: the cache tries (and
     * the device model, given a capacity, refuses it before asking the C library) */
    ts_devmodel_set_host_capacity(f.dev, 1 * GiB);
    assert_int_equal(ts_host_alloc(f.a, SIZE_MAX / 4 + 1, 0, &out), TS_EUNSUPPORTED);
    assert_int_equal(ts_host_alloc(f.a, SIZE_MAX / 4, 0, &out), TS_ENOMEM);
    assert_int_equal(ts_host_alloc(f.a, 0, 0, &out), TS_EUNSUPPORTED);
    assert_int_equal(fx_stats(&f)->num_host_alloc_calls, 2 * N);
    fx_close(&f);
}

/* Small requests (whole pages up to TS_HOST_SMALL) never split a large region, and large ones
 * never take a small region: a long-lived small buffer cannot hold a large region pinned. */
static void test_host_small_and_large_are_classes(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    char *keep = host_alloc(&f, 64 * MiB, 0); /* the floor rule keeps the others cached */
    char *large = host_alloc(&f, 8 * MiB, 0);
    host_free(&f, large);
    char *small = host_alloc(&f, TS_HOST_SMALL, 0); /* the largest small request */
    assert_true(small < large || small >= large + 8 * MiB);
    host_free(&f, small);
    char *l2 = host_alloc(&f, TS_HOST_SMALL + 1, 0); /* the smallest large one */
    assert_ptr_equal(l2, large);
    char *s2 = host_alloc(&f, 100, 0);
    assert_ptr_equal(s2, small); /* the small region, split */
    assert_int_equal(fx_stats(&f)->num_host_alloc, 3);
    host_free(&f, l2);
    host_free(&f, s2);
    host_free(&f, keep);
    fx_close(&f);
}

/* Interior pointers, second frees and pointers never handed out are refused and change nothing;
 * foreign pointers are not the cache's. */
static void test_host_invalid_frees_are_refused(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *a = host_alloc(&f, 5000, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)(a + 1)), TS_EINVAL);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)(a + 6000)), TS_EINVAL); /* in the rounding */
    int local;
    assert_int_equal(ts_host_free(f.a, (uintptr_t)&local), TS_ENOTFOUND);
    /* the rest of its region, never handed out; past the region: not the cache's */
    assert_int_equal(ts_host_free(f.a, (uintptr_t)(a + 2 * PAGE)), TS_EINVAL);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)(a + SMALL_REGION)), TS_ENOTFOUND);
    host_free(&f, a);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_EINVAL);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_invalid_frees, 4);
    assert_int_equal(st->num_host_free_calls, 1);
    assert_int_equal(st->num_fences_recorded, 1);
    ts_host_info i = lookup(&f, a + 100);
    assert_int_equal(i.base, (uintptr_t)a);
    assert_int_equal(i.size, 2 * PAGE);
    assert_false(i.live);
    assert_int_equal(ts_host_lookup(f.a, (uintptr_t)&local, NULL), TS_ENOTFOUND);
    assert_ptr_equal(host_alloc(&f, 8000, 0), a); /* still cached, once */
    i = lookup(&f, a + 100);
    assert_true(i.live);
    assert_int_equal(i.requested, 8000);
    host_free(&f, a);
    fx_close(&f);
}

/* Each hand-out has its own number: a piece handed out again gets a new one. */
static void test_host_serials(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    char *a = host_alloc(&f, 100, 0);
    uint64_t s1 = lookup(&f, a).serial;
    host_free(&f, a);
    assert_int_equal(lookup(&f, a).serial, 0);
    assert_ptr_equal(host_alloc(&f, 100, 0), a);
    uint64_t s2 = lookup(&f, a).serial;
    assert_true(s1 != 0 && s2 != 0 && s2 != s1);
    host_free(&f, a);
    fx_close(&f);
}

/* When pinning fails the cache gives its regions back: those past their fence first, then it
 * waits for the others (the only wait), and the request is retried. */
static void test_host_memory_short_releases_the_cache(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    ts_devmodel_set_host_capacity(f.dev, 8 * MiB);
    void *a = host_alloc(&f, 4 * MiB, 0);
    host_free(&f, a); /* pending */
    void *b = host_alloc(&f, 2 * MiB, 0);
    void *c = host_alloc(&f, 2 * MiB, 0); /* 8 MiB pinned now */
    assert_int_equal(fx_stats(&f)->num_fence_waits, 0);
    uintptr_t d = 0;
    assert_int_equal(ts_host_alloc(f.a, 4 * MiB, TS_HOST_PORTABLE, &d), TS_OK);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_fence_waits, 1);
    assert_int_equal(st->num_host_free, 1);
    assert_int_equal(dev_counters(&f).host_frees, 1);
    assert_int_equal(st->host_allocated_bytes.current, 8 * (int64_t)MiB);
    /* Nothing left to give back: out of memory, nothing lost. */
    uintptr_t e = 0;
    assert_int_equal(ts_host_alloc(f.a, 2 * MiB, 0, &e), TS_ENOMEM);
    assert_int_equal(f.page_seq & 1, 0); /* the stats window closed on the way out */
    assert_int_equal(fx_stats(&f)->host_active_requests.current, 3);
    host_free(&f, b);
    host_free(&f, c);
    assert_int_equal(ts_host_free(f.a, d), TS_OK);
    ts_devmodel_complete_fences(f.dev);
    assert_int_equal(ts_host_empty_cache(f.a), 8 * MiB);
    assert_int_equal(dev_counters(&f).host_bytes_in_use, 0);
    st = fx_stats(&f);
    assert_int_equal(st->host_allocations.current, 0);
    assert_int_equal(st->host_active_requests.current, 0);
    assert_int_equal(st->num_host_free, 4);
    fx_close(&f);
}

/* Below the floor rule's bound, the backend may still be short: idle regions go back then, and
 * the request is retried, with no fence waited for. */
static void test_host_memory_short_gives_back_idle_regions(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *a = host_alloc(&f, 4 * MiB, 0);
    char *x = host_alloc(&f, 12 * MiB, 0); /* peak 16 MiB */
    host_free(&f, x);
    assert_int_equal(ts_host_empty_cache(f.a), 12 * MiB);
    char *y = host_alloc(&f, 8 * MiB, TS_HOST_PORTABLE);
    host_free(&f, y); /* 12 MiB pinned, within the bound (16.64 MiB) */
    ts_devmodel_set_host_capacity(f.dev, 12 * MiB);
    char *c = host_alloc(&f, 4 * MiB, 0); /* 16 MiB: within the bound, not within the capacity */
    assert_int_equal(fx_stats(&f)->num_host_free, 2); /* x by empty_cache, y now */
    assert_int_equal(fx_stats(&f)->host_allocated_bytes.current, 8 * (int64_t)MiB);
    assert_int_equal(region_size(&f, c), 4 * MiB);
    assert_int_equal(fx_stats(&f)->num_fence_waits, 0);
    assert_int_equal(f.page_seq & 1, 0); /* the stats window closed */
    host_free(&f, a);
    host_free(&f, c);
    fx_close(&f);
}

/* Free memory first: when what is free already makes room, no fence is waited for. */
static void test_host_memory_short_free_first(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_host_capacity(f.dev, 8 * MiB);
    void *a = host_alloc(&f, 4 * MiB, 0);
    void *b = host_alloc(&f, 4 * MiB, 0);
    host_free(&f, a); /* fence complete at once */
    void *c = host_alloc(&f, 4 * MiB, TS_HOST_PORTABLE);
    assert_ptr_not_equal(c, NULL);
    assert_int_equal(fx_stats(&f)->num_fence_waits, 0);
    assert_int_equal(fx_stats(&f)->num_host_free, 1);
    host_free(&f, b);
    host_free(&f, c);
    fx_close(&f);
}

/* Outside a capture, a free that cannot get a fence (the backend out of host memory) waits for the
 * device instead: the piece is free at once, and no fence is left behind. */
static void test_host_free_without_a_fence_synchronises(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    char *a = host_alloc(&f, 2 * MiB, 0);
    ts_devmodel_fail_fence_record_after(f.dev, 1);
    host_free(&f, a);
    assert_int_equal(dev_counters(&f).synchronizes, 1);
    assert_int_equal(fx_stats(&f)->num_fence_waits, 1);
    assert_int_equal(fx_stats(&f)->host_active_requests.current, 0);
    assert_ptr_equal(host_alloc(&f, 2 * MiB, 0), a); /* no fence to wait for */
    assert_int_equal(fx_stats(&f)->num_host_alloc, 1);
    host_free(&f, a);
    ts_devmodel_complete_fences(f.dev);
    fx_close(&f);
}

/* A piece freed during a capture cannot get a fence: it is not handed out again during the
 * capture, nor after it before a fence recorded after the capture completes; nothing is unpinned
 * while the capture runs (fx_close checks that no call was refused). */
static void test_host_free_during_capture(void **state)
{
    (void)state;
    fixture f;
    open_clocked(&f, 0);
    ts_devmodel_set_manual_fences(f.dev, true);
    char *a = host_alloc(&f, 3 * MiB, 0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    host_free(&f, a);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 0);
    char *b = host_alloc(&f, 3 * MiB, 0);
    assert_ptr_not_equal(b, a);
    host_free(&f, b);
    assert_int_equal(ts_host_empty_cache(f.a), 0);
    test_now = 20000000; /* both idle long enough: still nothing unpinned in the capture */
    uintptr_t dptr = 0;
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &dptr), TS_OK); /* a device op: the idle rule */
    assert_int_equal(fx_stats(&f)->num_host_free, 0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    test_now = 0; /* and no longer due */
    /* After the capture: the next operation fences both; they wait for their fences. */
    char *c = host_alloc(&f, 3 * MiB, 0);
    assert_true(c != a && c != b);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 2);
    ts_devmodel_complete_fences(f.dev);
    char *d = host_alloc(&f, 3 * MiB, 0);
    assert_true(d == a || d == b);
    assert_int_equal(ts_free(f.a, dptr), TS_OK);
    host_free(&f, c);
    host_free(&f, d);
    ts_devmodel_complete_fences(f.dev);
    ts_host_empty_cache(f.a);
    ts_devmodel_counters dc = dev_counters(&f);
    assert_int_equal(dc.fences_recorded, dc.fences_released);
    assert_int_equal(dc.invalid_calls, 0);
    fx_close(&f);
}

/* The idle rule reaches a piece freed during a capture, once the capture is over, with no pinned
 * operation in between: a device operation fences it, and the region goes back when done. */
static void test_host_idle_rule_after_a_capture(void **state)
{
    (void)state;
    fixture f;
    open_clocked(&f, 0);
    char *a = host_alloc(&f, 3 * MiB, 0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    host_free(&f, a);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    test_now = 10000000;
    uintptr_t dptr = 0;
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &dptr), TS_OK);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, 1);
    assert_int_equal(region_size(&f, a), 0);
    assert_int_equal(fx_stats(&f)->num_host_free, 1);
    assert_int_equal(ts_free(f.a, dptr), TS_OK);
    /* a free fences what a capture left, before its own piece */
    char *e = host_alloc(&f, 3 * MiB, 0);
    char *g = host_alloc(&f, 3 * MiB, 0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    host_free(&f, e);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    int64_t before = fx_stats(&f)->num_fences_recorded;
    host_free(&f, g);
    assert_int_equal(fx_stats(&f)->num_fences_recorded, before + 2);
    /* ts_host_empty_cache, too, fences what a capture left */
    char *b = host_alloc(&f, 3 * MiB, 0);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    host_free(&f, b);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    assert_int_equal(ts_host_empty_cache(f.a), 6 * MiB); /* b's region (e's or g's) and the other */
    fx_close(&f);
}

/* The floor rule: a new region may take the pinned bytes to 1.04 times the most the program has
 * held at once (this request counted); past that, regions nothing uses go back first. */
static void floor_case(size_t rest, bool released)
{
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *a = host_alloc(&f, 42 * MiB, 0);
    char *b = host_alloc(&f, rest, 0); /* large (more than 1 MiB), of the request's class */
    host_free(&f, b);
    /* peak 50 MiB with the new request: bound 52 MiB, which 42 + 2 + 8 MiB reach exactly */
    char *c = host_alloc(&f, 8 * MiB, 0);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_host_free, released ? 1 : 0);
    assert_int_equal(region_size_unless_in(&f, b, c, 8 * MiB), released ? 0 : rest);
    assert_int_equal(st->host_allocated_bytes.current, (int64_t)(50 * MiB + (released ? 0 : rest)));
    host_free(&f, a);
    host_free(&f, c);
    fx_close(&f);
}

static void test_host_floor_rule(void **state)
{
    (void)state;
    floor_case(2 * MiB, false);
    floor_case(2 * MiB + PAGE, true);
}

/* After the class's idle regions, other idle regions go back only while the bound is still
 * passed (here the gathered region alone reaches it exactly: the other one stays). */
static void test_host_floor_rule_stops_at_the_bound(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *x = host_alloc(&f, 42 * MiB, 0);
    char *z = host_alloc(&f, 2 * MiB, TS_HOST_PORTABLE);
    char *b = host_alloc(&f, 3 * MiB, 0);
    host_free(&f, z);
    host_free(&f, b);
    /* 8 MiB: b (3 MiB) goes, and comes back as the 8 MiB region; 42 + 2 + 8 = 52 = the bound */
    char *c = host_alloc(&f, 8 * MiB, 0);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_host_free, 1);
    assert_int_equal(region_size_unless_in(&f, b, c, 8 * MiB), 0);
    assert_int_equal(region_size(&f, z), 2 * MiB);
    assert_int_equal(region_size(&f, c), 8 * MiB);
    host_free(&f, x);
    host_free(&f, c);
    fx_close(&f);
}

/* Past the bound, idle regions of the request's class come back as one region of their total:
 * the request takes its start, and a later request the rest, with no driver call. Others go
 * back only while the bound is still passed (z, older, stays). */
static void test_host_floor_rule_gathers_the_class(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *x = host_alloc(&f, 10 * MiB, 0);
    char *z = host_alloc(&f, 2 * MiB, TS_HOST_PORTABLE);
    char *b1 = host_alloc(&f, 3 * MiB + 512 * KiB, 0);
    char *b2 = host_alloc(&f, 3 * MiB + 512 * KiB, 0);
    host_free(&f, z);
    host_free(&f, b1);
    host_free(&f, b2); /* peak 19 MiB: bound 19.76 MiB */
    char *c = host_alloc(&f, 5 * MiB, 0);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_host_free, 2);
    assert_int_equal(st->num_host_alloc, 5);
    assert_int_equal(region_size(&f, c), 7 * MiB);
    assert_int_equal(region_size(&f, z), 2 * MiB);
    assert_int_equal(st->host_allocated_bytes.current, 19 * (int64_t)MiB);
    char *d = host_alloc(&f, 2 * MiB, 0);
    assert_ptr_equal(d, c + 5 * MiB);
    assert_int_equal(fx_stats(&f)->num_host_alloc, 5);
    host_free(&f, x);
    host_free(&f, c);
    host_free(&f, d);
    fx_close(&f);
}

/* The class's idle regions are gathered only until they add up to the request. */
static void test_host_floor_rule_gathers_no_more_than_needed(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *x = host_alloc(&f, 10 * MiB, 0);
    char *b[3];
    const size_t n[3] = {2 * MiB + 512 * KiB, 2 * MiB + 512 * KiB, 3 * MiB};
    for (int i = 0; i < 3; i++)
        b[i] = host_alloc(&f, n[i], 0);
    for (int i = 0; i < 3; i++)
        host_free(&f, b[i]); /* peak 18 MiB: bound 18.72 MiB */
    char *c = host_alloc(&f, 5 * MiB, 0); /* b[0] and b[1] make 5 MiB: b[2] stays */
    assert_int_equal(fx_stats(&f)->num_host_free, 2);
    assert_int_equal(region_size(&f, c), 5 * MiB);
    assert_int_equal(region_size(&f, b[2]), 3 * MiB);
    host_free(&f, x);
    host_free(&f, c);
    fx_close(&f);
}

/* Regions in use are never given back by the floor rule, nor pieces of a region in use. */
static void test_host_floor_rule_keeps_what_is_used(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *a = host_alloc(&f, 16 * MiB, 0);
    host_free(&f, a);
    char *b = host_alloc(&f, 2 * MiB, 0); /* a piece of a's region */
    char *c = host_alloc(&f, 30 * MiB, 0);
    assert_ptr_equal(b, a);
    assert_int_equal(fx_stats(&f)->num_host_free, 0);
    assert_int_equal(fx_stats(&f)->host_allocated_bytes.current, 46 * (int64_t)MiB);
    host_free(&f, b);
    host_free(&f, c);
    fx_close(&f);
}

/* The idle rule, with a clock the test moves: a region nothing used for pinned_idle_s goes back
 * at the next operation of the allocator, pinned or device, not a microsecond earlier. */
static void test_host_idle_rule(void **state)
{
    (void)state;
    fixture f;
    open_clocked(&f, 1000);
    char *a = host_alloc(&f, 2 * MiB, 0);
    char *b = host_alloc(&f, 2 * MiB, 0);
    host_free(&f, a); /* idle from 1000 */
    test_now = 1000 + 5000000;
    host_free(&f, b); /* idle from 5 s later */
    test_now = 1000 + 10000000 - 1;
    uintptr_t d = 0;
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &d), TS_OK);
    assert_int_equal(fx_stats(&f)->num_host_free, 0);
    test_now = 1000 + 10000000;
    assert_int_equal(ts_free(f.a, d), TS_OK); /* a device op: a is due */
    assert_int_equal(fx_stats(&f)->num_host_free, 1);
    assert_int_equal(region_size(&f, a), 0);
    assert_int_equal(region_size(&f, b), 2 * MiB);
    test_now = 1000 + 15000000;
    char *c = host_alloc(&f, 1 * MiB, 0); /* small: b is due, and goes */
    assert_int_equal(fx_stats(&f)->num_host_free, 2);
    assert_int_equal(region_size(&f, b), 0);
    assert_int_equal(fx_stats(&f)->host_allocated_bytes.current, (int64_t)SMALL_REGION);
    /* A region in use is never idle, whatever the time. */
    test_now += 100000000;
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &d), TS_OK);
    assert_int_equal(region_size(&f, c), SMALL_REGION);
    /* Using a region restarts its time. */
    host_free(&f, c);
    test_now += 9000000;
    host_free(&f, host_alloc(&f, 1 * MiB, 0));
    test_now += 9000000;
    assert_int_equal(ts_free(f.a, d), TS_OK);
    assert_int_equal(region_size(&f, c), SMALL_REGION);
    test_now += 1000000;
    ts_host_set_clock(f.a, test_clock, NULL);
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &d), TS_OK);
    assert_int_equal(region_size(&f, c), 0);
    assert_int_equal(ts_free(f.a, d), TS_OK);
    fx_close(&f);
}

/* A due region still waiting for its fence asks the device once, then waits another period: no
 * query at every operation. */
static void test_host_idle_rule_waits_for_fences(void **state)
{
    (void)state;
    fixture f;
    open_clocked(&f, 0);
    ts_devmodel_set_manual_fences(f.dev, true);
    char *a = host_alloc(&f, 2 * MiB, 0);
    host_free(&f, a);
    test_now = 10000000;
    uintptr_t d = 0;
    uint64_t q0 = dev_counters(&f).fence_queries;
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &d), TS_OK);
    uint64_t q1 = dev_counters(&f).fence_queries;
    assert_int_equal(q1, q0 + 1);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(ts_free(f.a, d), TS_OK);
        assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &d), TS_OK);
    }
    assert_int_equal(dev_counters(&f).fence_queries, q1);
    assert_int_equal(region_size(&f, a), 2 * MiB);
    ts_devmodel_complete_fences(f.dev);
    test_now = 20000000 - 1;
    assert_int_equal(ts_free(f.a, d), TS_OK);
    assert_int_equal(region_size(&f, a), 2 * MiB);
    test_now = 20000000;
    assert_int_equal(ts_malloc(f.a, 1 * MiB, 0, &d), TS_OK);
    assert_int_equal(region_size(&f, a), 0);
    assert_int_equal(fx_stats(&f)->num_fence_waits, 0);
    assert_int_equal(ts_free(f.a, d), TS_OK);
    fx_close(&f);
}

/* pinned_idle_s:0 gives a region back as soon as it is free and its device work is done. */
static void test_host_idle_zero(void **state)
{
    (void)state;
    fixture f;
    open_idle(&f, 0, false);
    char *a = host_alloc(&f, 2 * MiB, 0);
    host_free(&f, a);
    assert_int_equal(fx_stats(&f)->num_host_free, 1);
    assert_int_equal(fx_stats(&f)->host_allocated_bytes.current, 0);
    fx_close(&f);
}

/* Destroying the allocator with release unpins what is cached; a context that died took its
 * buffers with it: they are forgotten, never unpinned (forget_all). */
static void test_host_teardown(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    void *a = host_alloc(&f, 2 * MiB, 0);
    void *b = host_alloc(&f, 2 * MiB, 0);
    host_free(&f, a);
    ts_allocator_forget_all(f.a);
    assert_int_equal(dev_counters(&f).host_frees, 0);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->host_allocations.current, 0);
    assert_int_equal(st->host_active_bytes.current, 0);
    assert_int_equal(st->host_active_requests.current, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)b), TS_ENOTFOUND); /* the driver's now */

    ts_devmodel_set_manual_fences(f.dev, true);
    void *c = host_alloc(&f, 3 * MiB, 0);
    void *e = host_alloc(&f, 3 * MiB, 0);
    void *g = host_alloc(&f, 3 * MiB, 0);
    host_free(&f, c); /* pending: teardown waits for it */
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_CAPTURING);
    host_free(&f, g); /* no fence yet: teardown records one and waits for it */
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_ONE_QUEUE);
    ts_allocator_destroy(f.a, true);
    ts_devmodel_counters dc = dev_counters(&f);
    assert_int_equal(dc.host_frees, 2);
    assert_int_equal(dc.host_allocs, 5);
    assert_int_equal(dc.fence_waits, 2);
    (void)e;
    ts_devmodel_destroy(f.dev);
}

/* Random requests of mixed sizes, flags and lifetimes: every live piece keeps its bytes, pieces
 * never overlap, the counters add up with the device model's, and everything goes back. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_host_random(void **state)
{
    (void)state;
    const char *e = getenv("TESSERA_TEST_SEED");
    uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
    if (!seed)
        seed = 1;
    fprintf(stderr, "hostcache random test: seed %llu (replay with TESSERA_TEST_SEED=%llu)\n",
            (unsigned long long)seed, (unsigned long long)seed);
    uint64_t s = seed;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    enum { LIVE = 48 };
    struct { unsigned char *p; size_t n; unsigned char tag; } lv[LIVE];
    int n = 0;
    for (int step = 0; step < 3000; step++) {
        uint64_t r = rng_next(&s) % 100;
        if (r < 45 && n < LIVE) {
            size_t size = rng_next(&s) % 4 == 0 ? 1 + rng_next(&s) % (64 * KiB)
                                                : 1 + rng_next(&s) % (6 * MiB);
            unsigned flags = (unsigned)(rng_next(&s) % 3);
            unsigned char *p = host_alloc(&f, size, flags);
            for (int i = 0; i < n; i++)
                if (!((uintptr_t)p >= (uintptr_t)lv[i].p + lv[i].n ||
                      (uintptr_t)p + size <= (uintptr_t)lv[i].p))
                    fail_msg("seed %llu step %d: overlap", (unsigned long long)seed, step);
            unsigned char tag = (unsigned char)(step | 1);
            p[0] = p[size / 2] = p[size - 1] = tag;
            lv[n].p = p;
            lv[n].n = size;
            lv[n++].tag = tag;
        } else if (r < 90 && n > 0) {
            int i = (int)(rng_next(&s) % (uint64_t)n);
            if (lv[i].p[0] != lv[i].tag || lv[i].p[lv[i].n / 2] != lv[i].tag ||
                lv[i].p[lv[i].n - 1] != lv[i].tag)
                fail_msg("seed %llu step %d: bytes lost", (unsigned long long)seed, step);
            host_free(&f, lv[i].p);
            lv[i] = lv[--n];
        } else if (r < 97) {
            ts_devmodel_complete_fences(f.dev);
        } else {
            ts_host_empty_cache(f.a);
        }
        const tessera_device_stats *st = fx_stats(&f);
        if (st->host_allocated_bytes.current != (int64_t)dev_counters(&f).host_bytes_in_use)
            fail_msg("seed %llu step %d: pinned bytes differ from the driver's",
                     (unsigned long long)seed, step);
    }
    while (n > 0)
        host_free(&f, lv[--n].p);
    ts_devmodel_complete_fences(f.dev);
    ts_host_empty_cache(f.a);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->host_allocated_bytes.current, 0);
    assert_int_equal(st->host_active_bytes.current, 0);
    assert_int_equal(st->host_active_requests.current, 0);
    assert_int_equal(st->num_host_alloc, st->num_host_free);
    ts_devmodel_counters dc = dev_counters(&f);
    assert_int_equal(dc.host_bytes_in_use, 0);
    assert_int_equal(dc.fences_recorded, dc.fences_released);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_sizes_are_whole_pages_and_bytes_are_real),
        cmocka_unit_test(test_host_one_page_left_is_split_off),
        cmocka_unit_test(test_host_small_requests_share_regions),
        cmocka_unit_test(test_host_request_just_over_a_power_of_two),
        cmocka_unit_test(test_host_split_and_merge),
        cmocka_unit_test(test_host_merge_both_sides),
        cmocka_unit_test(test_host_best_fit),
        cmocka_unit_test(test_host_reuse_waits_for_the_fence_without_blocking),
        cmocka_unit_test(test_host_pending_piece_is_not_merged),
        cmocka_unit_test(test_host_reuse_at_once_without_fences),
        cmocka_unit_test(test_host_flags_are_classes),
        cmocka_unit_test(test_host_small_and_large_are_classes),
        cmocka_unit_test(test_host_invalid_frees_are_refused),
        cmocka_unit_test(test_host_serials),
        cmocka_unit_test(test_host_memory_short_releases_the_cache),
        cmocka_unit_test(test_host_memory_short_gives_back_idle_regions),
        cmocka_unit_test(test_host_memory_short_free_first),
        cmocka_unit_test(test_host_free_without_a_fence_synchronises),
        cmocka_unit_test(test_host_free_during_capture),
        cmocka_unit_test(test_host_idle_rule_after_a_capture),
        cmocka_unit_test(test_host_floor_rule),
        cmocka_unit_test(test_host_floor_rule_stops_at_the_bound),
        cmocka_unit_test(test_host_floor_rule_gathers_the_class),
        cmocka_unit_test(test_host_floor_rule_gathers_no_more_than_needed),
        cmocka_unit_test(test_host_floor_rule_keeps_what_is_used),
        cmocka_unit_test(test_host_idle_rule),
        cmocka_unit_test(test_host_idle_rule_waits_for_fences),
        cmocka_unit_test(test_host_idle_zero),
        cmocka_unit_test(test_host_teardown),
        cmocka_unit_test(test_host_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
