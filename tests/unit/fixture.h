/* Shared fixture for the core's cmocka tests: an allocator over the device model. */
#ifndef TS_TEST_FIXTURE_H
#define TS_TEST_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/allocator.h"
#include "devmodel/devmodel.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

typedef struct fixture {
    ts_devmodel *dev;
    ts_allocator *a;
    ts_config cfg;
    tessera_device_stats st;
    /* The allocator's counters and their sequence lock, as the stats page would hold them: the
     * device model watches the lock, and fx_close checks that no backend call was made with a
     * write window open. The fixture must not move while open. */
    tessera_device_stats page_stats;
    uint64_t page_seq;
} fixture;

/* page: the device model's page, which is also the granularity it reports (0: 2 MiB). */
static inline void fx_open_page(fixture *f, size_t capacity, size_t page, const ts_config *cfg,
                                bool vm, bool fences)
{
    memset(f, 0, sizeof *f);
    if (cfg)
        f->cfg = *cfg;
    else
        ts_config_defaults(&f->cfg);
    f->dev = ts_devmodel_create(capacity, page);
    assert_non_null(f->dev);
    ts_backend be = ts_devmodel_backend(f->dev, vm, fences);
    ts_stats_sink sink = {&f->page_stats, &f->page_seq};
    ts_devmodel_watch_seq(f->dev, &f->page_seq);
    f->a = ts_allocator_create(&f->cfg, &be, 0, sink);
    assert_non_null(f->a);
}

static inline void fx_open(fixture *f, size_t capacity, const ts_config *cfg, bool vm, bool fences)
{
    fx_open_page(f, capacity, 0, cfg, vm, fences);
}

static inline void fx_close(fixture *f)
{
    ts_allocator_destroy(f->a, true);
    ts_devmodel_counters c;
    ts_devmodel_counters_get(f->dev, &c);
    /* The stats window is closed before every device call (DESIGN.md, "The stats page"). */
    assert_int_equal(c.calls_in_stats_window, 0);
    /* The allocator never makes a call the driver would refuse as invalid. */
    assert_int_equal(c.invalid_calls, 0);
    /* Destroying with release gives every byte back. */
    assert_int_equal(c.bytes_in_use, 0);
    ts_devmodel_destroy(f->dev);
}

static inline void fx_check(fixture *f)
{
    char why[256] = "";
    int rc = ts_allocator_check(f->a, why, sizeof why);
    if (rc != 0)
        fail_msg("heap check: %s", why);
}

static inline const tessera_device_stats *fx_stats(fixture *f)
{
    ts_get_stats(f->a, &f->st);
    return &f->st;
}

static inline uintptr_t fx_alloc(fixture *f, size_t size)
{
    uintptr_t p = 0;
    assert_int_equal(ts_malloc(f->a, size, 0, &p), TS_OK);
    assert_true(p != 0);
    fx_check(f);
    return p;
}

static inline void fx_free(fixture *f, uintptr_t p)
{
    assert_int_equal(ts_free(f->a, p), TS_OK);
    fx_check(f);
}


#endif /* TS_TEST_FIXTURE_H */
