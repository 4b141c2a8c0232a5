/* The pinned host memory cache (core/hostcache.c) over the device model: size classes, flags
 * classes, reuse only after the fence of the free, no wait unless pinning fails, invalid frees,
 * counters, teardown. */
#include "fixture.h"

#include "core/hostcache.h"

static ts_devmodel_counters dev_counters(fixture *f)
{
    ts_devmodel_counters c;
    ts_devmodel_counters_get(f->dev, &c);
    return c;
}

static void *host_alloc(fixture *f, size_t size, unsigned flags)
{
    uintptr_t p = 0;
    assert_int_equal(ts_host_alloc(f->a, size, flags, &p), TS_OK);
    assert_true(p != 0);
    return (void *)p;
}

static void test_host_sizes_are_powers_of_two_and_bytes_are_real(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    char *a = host_alloc(&f, 5000, 0);
    char *b = host_alloc(&f, 1, 0);
    size_t size;
    unsigned flags;
    assert_int_equal(ts_devmodel_host_info(f.dev, (uintptr_t)a, &size, &flags), TS_OK);
    assert_int_equal(size, 8192);
    assert_int_equal(ts_devmodel_host_info(f.dev, (uintptr_t)b, &size, &flags), TS_OK);
    assert_int_equal(size, 512);
    memset(a, 0x5a, 5000);
    memset(b, 0xa5, 1);
    assert_int_equal((unsigned char)a[4999], 0x5a);
    assert_int_equal((unsigned char)b[0], 0xa5);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->host_allocations.current, 2);
    assert_int_equal(st->host_allocated_bytes.current, 8192 + 512);
    assert_int_equal(st->host_active_requests.current, 2);
    assert_int_equal(st->host_active_bytes.current, 8192 + 512);
    assert_int_equal(st->num_host_alloc, 2);
    assert_int_equal(st->num_host_alloc_calls, 2);
    /* Device memory is untouched: pinned host memory is not the device's. */
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)b), TS_OK);
    fx_close(&f);
}

/* A freed buffer comes back only once its fence has completed; until then a new one is pinned,
 * and the host never waits. */
static void test_host_reuse_waits_for_the_fence_without_blocking(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    void *a = host_alloc(&f, 4096, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_fences_recorded, 1);
    assert_int_equal(st->host_active_requests.current, 1); /* freed, fence not seen complete */
    void *b = host_alloc(&f, 4096, 0);
    assert_ptr_not_equal(a, b);
    st = fx_stats(&f);
    assert_int_equal(st->num_host_alloc, 2);
    assert_int_equal(st->num_fence_waits, 0);
    assert_int_equal(dev_counters(&f).fence_waits, 0);
    assert_int_equal(dev_counters(&f).synchronizes, 0);

    ts_devmodel_complete_fences(f.dev); /* the device catches up: a's fence is done */
    assert_int_equal(ts_host_free(f.a, (uintptr_t)b), TS_OK); /* b's fence: pending */
    void *c = host_alloc(&f, 4096, 0);
    assert_ptr_equal(c, a); /* the oldest free, its fence complete */
    void *d = host_alloc(&f, 4096, 0);
    assert_ptr_not_equal(d, b); /* b still waits */
    st = fx_stats(&f);
    assert_int_equal(st->num_host_alloc, 3);
    assert_int_equal(st->num_host_alloc_calls, 4);
    assert_int_equal(st->num_host_free_calls, 2);
    assert_int_equal(st->host_allocations.current, 3);
    assert_int_equal(st->host_active_requests.current, 3); /* c, d and b (pending) */
    assert_int_equal(dev_counters(&f).fence_waits, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)c), TS_OK);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)d), TS_OK);
    fx_close(&f);
}

/* Without fences (a backend that has none) a freed buffer is reused at once. */
static void test_host_reuse_at_once_without_fences(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    void *a = host_alloc(&f, 3000, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    assert_ptr_equal(host_alloc(&f, 4000, 0), a); /* same class: 4096 */
    assert_int_equal(fx_stats(&f)->num_host_alloc, 1);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    fx_close(&f);
}

/* Portable, mapped, write-combined and cuMemAllocHost buffers are separate classes: a request is
 * served only by a buffer pinned with its own flags. */
static void test_host_flags_are_classes(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, false);
    const unsigned kinds[] = {0, TS_HOST_PORTABLE, TS_HOST_DEVICEMAP,
                              TS_HOST_PORTABLE | TS_HOST_WRITECOMBINED, TS_HOST_ALLOC_HOST};
    enum { N = sizeof kinds / sizeof kinds[0] };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = host_alloc(&f, 65536, kinds[i]);
        assert_int_equal(ts_host_free(f.a, (uintptr_t)p[i]), TS_OK);
    }
    assert_int_equal(fx_stats(&f)->num_host_alloc, N); /* no class served another */
    for (int i = N - 1; i >= 0; i--) {
        void *q = host_alloc(&f, 65536, kinds[i]);
        assert_ptr_equal(q, p[i]);
        size_t size;
        unsigned flags;
        assert_int_equal(ts_devmodel_host_info(f.dev, (uintptr_t)q, &size, &flags), TS_OK);
        assert_int_equal(flags, kinds[i]);
    }
    assert_int_equal(fx_stats(&f)->num_host_alloc, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(ts_host_free(f.a, (uintptr_t)p[i]), TS_OK);
    /* Unknown flags: not the cache's (the driver answers them). */
    uintptr_t out = 0;
    assert_int_equal(ts_host_alloc(f.a, 100, 0x100, &out), TS_EUNSUPPORTED);
    fx_close(&f);
}

/* Interior pointers and second frees are refused and change nothing; foreign pointers are not
 * the cache's. */
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
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_EINVAL);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_invalid_frees, 3);
    assert_int_equal(st->num_host_free_calls, 1);
    assert_int_equal(st->num_fences_recorded, 1);
    uintptr_t base = 0;
    size_t size = 0;
    assert_int_equal(ts_host_lookup(f.a, (uintptr_t)(a + 100), &base, &size), TS_OK);
    assert_int_equal(base, (uintptr_t)a);
    assert_int_equal(size, 8192);
    assert_ptr_equal(host_alloc(&f, 8000, 0), a); /* still cached, once */
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    fx_close(&f);
}

/* When pinning fails the cache gives its buffers back: those past their fence first, then it
 * waits for the others (the only wait), and the request is retried. */
static void test_host_memory_short_releases_the_cache(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    ts_devmodel_set_manual_fences(f.dev, true);
    ts_devmodel_set_host_capacity(f.dev, 64 * KiB);
    void *a = host_alloc(&f, 32 * KiB, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK); /* pending */
    void *b = host_alloc(&f, 16 * KiB, 0);
    void *c = host_alloc(&f, 16 * KiB, 0); /* 64 KiB pinned now */
    assert_int_equal(fx_stats(&f)->num_fence_waits, 0);
    uintptr_t d = 0;
    assert_int_equal(ts_host_alloc(f.a, 32 * KiB, TS_HOST_PORTABLE, &d), TS_OK);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_fence_waits, 1);
    assert_int_equal(st->num_host_free, 1);
    assert_int_equal(dev_counters(&f).host_frees, 1);
    assert_int_equal(st->host_allocated_bytes.current, 64 * KiB);
    /* Nothing left to give back: out of memory, nothing lost. */
    uintptr_t e = 0;
    assert_int_equal(ts_host_alloc(f.a, 1024, 0, &e), TS_ENOMEM);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)b), TS_OK);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)c), TS_OK);
    assert_int_equal(ts_host_free(f.a, d), TS_OK);
    ts_devmodel_complete_fences(f.dev);
    assert_int_equal(ts_host_empty_cache(f.a), 64 * KiB);
    assert_int_equal(dev_counters(&f).host_bytes_in_use, 0);
    st = fx_stats(&f);
    assert_int_equal(st->host_allocations.current, 0);
    assert_int_equal(st->host_active_requests.current, 0);
    assert_int_equal(st->num_host_free, 4);
    fx_close(&f);
}

/* Destroying the allocator with release unpins what is cached; a context that died took its
 * buffers with it: they are forgotten, never unpinned (forget_all). */
static void test_host_teardown(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1 * GiB, NULL, false, true);
    void *a = host_alloc(&f, 4096, 0);
    void *b = host_alloc(&f, 4096, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)a), TS_OK);
    ts_allocator_forget_all(f.a);
    assert_int_equal(dev_counters(&f).host_frees, 0);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->host_allocations.current, 0);
    assert_int_equal(st->host_active_bytes.current, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)b), TS_ENOTFOUND); /* the driver's now */

    void *c = host_alloc(&f, 8192, 0);
    assert_int_equal(ts_host_free(f.a, (uintptr_t)c), TS_OK);
    ts_allocator_destroy(f.a, true);
    ts_devmodel_counters dc = dev_counters(&f);
    assert_int_equal(dc.host_frees, 1);
    assert_int_equal(dc.host_allocs, 3);
    ts_devmodel_destroy(f.dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_sizes_are_powers_of_two_and_bytes_are_real),
        cmocka_unit_test(test_host_reuse_waits_for_the_fence_without_blocking),
        cmocka_unit_test(test_host_reuse_at_once_without_fences),
        cmocka_unit_test(test_host_flags_are_classes),
        cmocka_unit_test(test_host_invalid_frees_are_refused),
        cmocka_unit_test(test_host_memory_short_releases_the_cache),
        cmocka_unit_test(test_host_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
