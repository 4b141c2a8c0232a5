/* cmocka tests of the device model's driver-time accounting and of the costs file. */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/fixture.h"

/* Distinct costs, so that every call's share of the total can be told apart: call i costs
 * (i + 1) us per call and (i + 1) ns per MiB. */
static ts_driver_costs distinct_costs(void)
{
    ts_driver_costs c;
    for (int i = 0; i < TS_CALL_COUNT; i++)
        c.call[i] = (ts_driver_cost){1000.0 * (i + 1), (double)(i + 1)};
    return c;
}

/* An allocator over a device model of capacity bytes that charges distinct_costs(). */
static void open_priced(fixture *f, size_t capacity, const ts_config *cfg)
{
    fx_open(f, capacity, cfg, true, false);
    ts_driver_costs c = distinct_costs();
    ts_devmodel_set_costs(f->dev, &c);
}

static void assert_total_is_sum(const ts_devmodel_counters *dc)
{
    double sum = 0;
    for (int i = 0; i < TS_CALL_COUNT; i++)
        sum += dc->call_ns[i];
    assert_true(sum == dc->driver_ns);
}

/* PyTorch's policy: one cudaMalloc of the 30 MiB segment, one cudaFree at empty_cache. */
static void test_costs_plain_segments(void **state)
{
    (void)state;
    fixture f;
    open_priced(&f, 1 * GiB, NULL);
    uintptr_t p = fx_alloc(&f, 30 * MiB);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.calls[TS_CALL_MALLOC], 1);
    assert_true(dc.driver_ns == 1000.0 + 1.0 * 30); /* call + 30 MiB at 1 ns */
    fx_free(&f, p);
    ts_empty_cache(f.a);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.calls[TS_CALL_FREE], 1);
    assert_true(dc.call_ns[TS_CALL_FREE] == 2000.0 + 2.0 * 30);
    assert_total_is_sum(&dc);
    assert_int_equal(dc.calls[TS_CALL_CREATE] + dc.calls[TS_CALL_MAP], 0);
    fx_close(&f);
}

/* defragment:True's layout (2 MiB pages, one handle each): 8 MiB reserves the pool's range
 * once, then creates and maps four 2 MiB handles and grants access to the four in one call,
 * priced as four grants of 2 MiB (a GPU grants per handle); giving it back unmaps four mappings
 * and releases four handles. */
static void test_costs_vm_pages(void **state)
{
    (void)state;
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.expandable_segments = true;
    cfg.expandable_page = 2 * MiB;
    fixture f;
    open_priced(&f, 1 * GiB, &cfg);
    uintptr_t p = fx_alloc(&f, 8 * MiB);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.calls[TS_CALL_ADDRESS_RESERVE], 1);
    assert_int_equal(dc.calls[TS_CALL_CREATE], 4);
    assert_int_equal(dc.calls[TS_CALL_MAP], 4);
    assert_int_equal(dc.calls[TS_CALL_SET_ACCESS], 1); /* one grant over the 8 MiB */
    assert_int_equal(dc.calls[TS_CALL_MALLOC], 0);
    /* per call (i + 1) us, per MiB (i + 1) ns, 2 MiB a handle */
    assert_true(dc.call_ns[TS_CALL_CREATE] == 4 * (5000.0 + 5.0 * 2));
    assert_true(dc.call_ns[TS_CALL_MAP] == 4 * (7000.0 + 7.0 * 2));
    assert_true(dc.call_ns[TS_CALL_SET_ACCESS] == 4 * (8000.0 + 8.0 * 2));
    const double reserve_ns = dc.call_ns[TS_CALL_ADDRESS_RESERVE];
    assert_true(reserve_ns >= 3000.0); /* the range's size is the pool's reservation */
    assert_true(dc.driver_ns == reserve_ns + 4 * (5000.0 + 10) + 4 * (7000.0 + 14) +
                                    4 * (8000.0 + 16));
    fx_free(&f, p);
    ts_empty_cache(f.a);
    ts_devmodel_counters_get(f.dev, &dc);
    assert_int_equal(dc.calls[TS_CALL_UNMAP], 4); /* per mapping, however many per call */
    assert_int_equal(dc.calls[TS_CALL_RELEASE], 4);
    assert_true(dc.call_ns[TS_CALL_UNMAP] == 4 * (9000.0 + 9.0 * 2));
    assert_true(dc.call_ns[TS_CALL_RELEASE] == 4 * (6000.0 + 6.0 * 2));
    assert_true(dc.call_ns[TS_CALL_SYNCHRONIZE] == 10000.0 * (double)dc.calls[TS_CALL_SYNCHRONIZE]);
    assert_total_is_sum(&dc);
    fx_close(&f);
}

/* A grant is priced per mapping it covers, at that mapping's size, and covers only the range it
 * names: mappings of 2 and 4 MiB back to back, granted in one call (a 2 MiB and a 4 MiB grant),
 * then the first alone (a 2 MiB grant, not its neighbour's too), then both with vm_access. */
static void test_costs_grant_per_mapping(void **state)
{
    (void)state;
    ts_devmodel *m = ts_devmodel_create(1 * GiB, 2 * MiB);
    ts_driver_costs c = distinct_costs();
    ts_devmodel_set_costs(m, &c);
    ts_backend be = ts_devmodel_backend(m, true, false);
    const double grant_2 = 8000.0 + 8.0 * 2, grant_4 = 8000.0 + 8.0 * 4; /* call 7: 8 us, 8 ns a MiB */
    uintptr_t va = 0;
    uint64_t h2 = 0, h4 = 0;
    assert_int_equal(be.vm_reserve(be.ctx, 16 * MiB, &va), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 2 * MiB, &h2), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 4 * MiB, &h4), TS_OK);
    ts_vm_piece both[2] = {{2 * MiB, h2}, {4 * MiB, h4}};
    assert_int_equal(be.vm_map(be.ctx, va, both, 2), TS_OK);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(m, &dc);
    assert_int_equal(dc.calls[TS_CALL_SET_ACCESS], 1);
    assert_true(dc.call_ns[TS_CALL_SET_ACCESS] == grant_2 + grant_4);
    assert_int_equal(be.vm_access(be.ctx, va, 2 * MiB), TS_OK);
    ts_devmodel_counters_get(m, &dc);
    assert_int_equal(dc.calls[TS_CALL_SET_ACCESS], 2);
    assert_true(dc.call_ns[TS_CALL_SET_ACCESS] == 2 * grant_2 + grant_4);
    assert_int_equal(be.vm_access(be.ctx, va, 6 * MiB), TS_OK);
    ts_devmodel_counters_get(m, &dc);
    assert_true(dc.call_ns[TS_CALL_SET_ACCESS] == 3 * grant_2 + 2 * grant_4);
    assert_total_is_sum(&dc);
    assert_int_equal(be.vm_unmap(be.ctx, va, 6 * MiB), TS_OK);
    assert_int_equal(be.vm_destroy(be.ctx, h2), TS_OK);
    assert_int_equal(be.vm_destroy(be.ctx, h4), TS_OK);
    assert_int_equal(be.vm_release(be.ctx, va, 16 * MiB), TS_OK);
    ts_devmodel_destroy(m);
}

/* A mapping may be any whole pages of a handle, from an offset into it (cuMemMap's rule), and a
 * byte reads the same through every mapping of it; a piece past the handle's end, or not whole
 * pages, is refused and maps nothing. */
static void test_devmodel_maps_parts_of_handles(void **state)
{
    (void)state;
    ts_devmodel *m = ts_devmodel_create(1 * GiB, 2 * MiB);
    ts_backend be = ts_devmodel_backend(m, true, false);
    uintptr_t va = 0;
    uint64_t h = 0;
    assert_int_equal(be.vm_reserve(be.ctx, 32 * MiB, &va), TS_OK);
    assert_int_equal(be.vm_create(be.ctx, 6 * MiB, &h), TS_OK);
    const ts_vm_piece whole = {6 * MiB, h, 0}, tail = {4 * MiB, h, 2 * MiB};
    assert_int_equal(be.vm_map(be.ctx, va, &whole, 1), TS_OK);
    assert_int_equal(be.vm_map(be.ctx, va + 8 * MiB, &tail, 1), TS_OK);
    uint64_t a, b;
    assert_true(ts_devmodel_content(m, va + 2 * MiB, &a));
    assert_true(ts_devmodel_content(m, va + 8 * MiB, &b));
    assert_true(a == b);
    assert_true(ts_devmodel_content(m, va + 5 * MiB, &a));
    assert_true(ts_devmodel_content(m, va + 11 * MiB, &b));
    assert_true(a == b);
    const ts_vm_piece bad[] = {
        {2 * MiB, h, 6 * MiB},     /* starts at the handle's end */
        {4 * MiB, h, 4 * MiB},     /* runs past it */
        {2 * MiB, h, 1 * MiB},     /* not whole pages */
        {1 * MiB, h, 0},           /* nor this */
        {0, h, 0},                 /* nothing */
        {2 * MiB, h + 1, 0},       /* no such handle */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_not_equal(be.vm_map(be.ctx, va + 16 * MiB, &bad[i], 1), TS_OK);
        assert_false(ts_devmodel_content(m, va + 16 * MiB, &a));
    }
    const ts_vm_piece last = {2 * MiB, h, 4 * MiB}; /* to the handle's end exactly */
    assert_int_equal(be.vm_map(be.ctx, va + 16 * MiB, &last, 1), TS_OK);
    assert_int_equal(be.vm_unmap(be.ctx, va + 16 * MiB, 2 * MiB), TS_OK);
    assert_int_equal(be.vm_unmap(be.ctx, va + 8 * MiB, 4 * MiB), TS_OK);
    assert_int_equal(be.vm_unmap(be.ctx, va, 6 * MiB), TS_OK);
    assert_int_equal(be.vm_destroy(be.ctx, h), TS_OK);
    assert_int_equal(be.vm_release(be.ctx, va, 32 * MiB), TS_OK);
    ts_devmodel_destroy(m);
}

/* A failed call costs its time too: a cudaMalloc the device refuses is charged. */
static void test_costs_failures_charged(void **state)
{
    (void)state;
    fixture f;
    open_priced(&f, 64 * MiB, NULL);
    uintptr_t p = 0;
    assert_int_equal(ts_malloc(f.a, 100 * MiB, 0, &p), TS_ENOMEM);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(f.dev, &dc);
    assert_true(dc.calls[TS_CALL_MALLOC] >= 1);
    assert_true(dc.call_ns[TS_CALL_MALLOC] == (double)dc.calls[TS_CALL_MALLOC] * (1000.0 + 100));
    assert_int_equal(dc.seg_alloc_failures, dc.calls[TS_CALL_MALLOC]);
    fx_close(&f);
}

static double cost_us(const ts_driver_costs *c, ts_driver_call call, size_t bytes)
{
    return ts_driver_cost_ns(c, call, bytes) / 1000.0;
}

static bool near(double x, double y)
{
    return x > y - 1e-6 && x < y + 1e-6;
}

/* The defaults are the H100's measured points (tests/data/driver-costs/h100.txt, built in,
 * 2 MiB to 1 GiB); the H200's and the published A100 figures stay selectable as "h200" and
 * "a100". */
static void test_costs_defaults(void **state)
{
    (void)state;
    ts_driver_costs c;
    ts_driver_costs_defaults(&c);
    assert_int_equal(c.call[TS_CALL_SET_ACCESS].npoints, 11);
    assert_true(near(cost_us(&c, TS_CALL_SET_ACCESS, 2 * MiB), 33.455));
    assert_true(near(cost_us(&c, TS_CALL_SET_ACCESS, 1 * GiB), 74.946));
    assert_true(near(cost_us(&c, TS_CALL_CREATE, 20 * MiB), 12.292));
    assert_true(near(cost_us(&c, TS_CALL_ADDRESS_RESERVE, 160 * GiB), 2.889)); /* per call */
    ts_driver_costs h;
    assert_int_equal(ts_driver_costs_builtin(&h, "h100"), 0);
    assert_memory_equal(&h, &c, sizeof c);
    assert_int_equal(ts_driver_costs_builtin(&h, "h200"), 0);
    assert_true(near(cost_us(&h, TS_CALL_SET_ACCESS, 2 * MiB), 22.0));
    assert_true(near(cost_us(&h, TS_CALL_CREATE, 2 * MiB), 6.972));

    assert_int_equal(ts_driver_costs_builtin(&c, "a100"), 0);
    assert_true(near(cost_us(&c, TS_CALL_CREATE, 2 * MiB), 193.32));
    assert_true(near(cost_us(&c, TS_CALL_SET_ACCESS, 2 * MiB), 35.99));
    assert_true(near(cost_us(&c, TS_CALL_MALLOC, 1 * GiB), 50.0)); /* no size known: per call */
    /* measured at 2 MiB only: 20 MiB costs ten calls of 2 MiB */
    assert_true(near(cost_us(&c, TS_CALL_CREATE, 20 * MiB), 1933.2));
    assert_int_equal(ts_driver_costs_builtin(&c, "h300"), -1);
    assert_string_equal(ts_driver_call_name(TS_CALL_UNMAP), "cuMemUnmap");
}

/* A call priced from its measured points: the smallest one's cost below it, the straight line
 * between two, and beyond the largest as many calls of the largest size as fit and one for the
 * rest: a 1 GiB call at the H200's prices (measured at 2 and 20 MiB) costs no less than 51
 * grants of 20 MiB and one of 4 MiB, so the model rewards no batching beyond what was
 * measured. */
static void test_costs_points(void **state)
{
    (void)state;
    ts_driver_costs c;
    assert_int_equal(ts_driver_costs_builtin(&c, "h200"), 0);
    const ts_driver_call A = TS_CALL_SET_ACCESS;
    assert_true(near(cost_us(&c, A, 4096), 22.0));    /* below: the floor */
    assert_true(near(cost_us(&c, A, 2 * MiB), 22.0)); /* at a point */
    assert_true(near(cost_us(&c, A, 11 * MiB), 22.0 + (20.491 - 22.0) / 2)); /* halfway */
    assert_true(near(cost_us(&c, A, 20 * MiB), 20.491)); /* the largest point itself */
    const double four = 22.0 + (20.491 - 22.0) * 2.0 / 18.0;
    assert_true(near(cost_us(&c, A, 4 * MiB), four));
    assert_true(near(cost_us(&c, A, 40 * MiB), 2 * 20.491));
    assert_true(near(cost_us(&c, A, 1 * GiB), 51 * 20.491 + four));
    assert_true(cost_us(&c, A, 1 * GiB) >= 52 * cost_us(&c, A, 20 * MiB) - 1e-6);
    /* one point: that cost up to its size, whole calls of it beyond */
    ts_driver_costs a;
    assert_int_equal(ts_driver_costs_builtin(&a, "a100"), 0);
    assert_true(near(cost_us(&a, A, 1 * MiB), 35.99));
    assert_true(near(cost_us(&a, A, 2 * MiB), 35.99));
    assert_true(near(cost_us(&a, A, 5 * MiB), 3 * 35.99));
}

static int parse(ts_driver_costs *c, const char *text, char *err, size_t errlen)
{
    return ts_driver_costs_parse(c, text, strlen(text), err, errlen);
}

static void test_costs_file_format(void **state)
{
    (void)state;
    ts_driver_costs c, d;
    char err[256];
    assert_int_equal(ts_driver_costs_builtin(&c, "h200"), 0);
    assert_int_equal(parse(&c,
                           "# measured on one GPU\n"
                           "\n"
                           "cuMemCreate   120.5   3.25   # per call, per MiB\n"
                           "\tcudaMalloc 7\r\n"
                           "cuMemMap 64M:3 2M:1.5 1024K:1 # any order\n",
                           err, sizeof err),
                     0);
    assert_true(c.call[TS_CALL_CREATE].call_ns == 120500.0);
    assert_true(c.call[TS_CALL_CREATE].mib_ns == 3250.0);
    assert_int_equal(c.call[TS_CALL_CREATE].npoints, 0);
    assert_true(c.call[TS_CALL_MALLOC].call_ns == 7000.0);
    assert_true(c.call[TS_CALL_MALLOC].mib_ns == 0.0);
    assert_int_equal(c.call[TS_CALL_MAP].npoints, 3);
    assert_true(c.call[TS_CALL_MAP].point_bytes[0] == 1 * MiB &&
                c.call[TS_CALL_MAP].point_bytes[1] == 2 * MiB &&
                c.call[TS_CALL_MAP].point_bytes[2] == 64 * MiB);
    assert_true(near(cost_us(&c, TS_CALL_MAP, 33 * MiB), 2.25));
    assert_true(near(cost_us(&c, TS_CALL_UNMAP, 2 * MiB), 13.501)); /* not named: as it was */

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"cuMemCreat 1\n", "line 1: unknown call 'cuMemCreat'"},
        {"cudaFree 1\n\ncudaFree 2\n", "line 3: cudaFree is given twice"},
        {"cudaFree\n", "line 1: cudaFree needs microseconds per call"},
        {"cudaFree 1 2 3\n", "line 1: cudaFree takes at most two numbers"},
        {"cudaFree -1\n", "line 1: '-1' is not a number"},
        {"cudaFree 1e3\n", "line 1: '1e3' is not a number"},
        {"cudaFree inf\n", "line 1: 'inf' is not a number"},
        {"cudaFree 0x10\n", "line 1: '0x10' is not a number"},
        {"cudaFree 1.\n", "line 1: '1.' is not a number"},
        {"cudaFree 2000000000\n", "line 1: '2000000000' is not a number"},
        {"cudaFree 5 # ok\ncuMemMap 1..2\n", "line 2: '1..2' is not a number"},
        {"cuMemMap 2M:1 3\n", "line 1: '3': cuMemMap takes SIZE:MICROSECONDS points only"},
        {"cuMemMap 3 2M:1\n", "line 1: '3': cuMemMap takes SIZE:MICROSECONDS points only"},
        {"cuMemMap 2X:1\n", "line 1: '2X' is not a size"},
        {"cuMemMap :1\n", "line 1: '' is not a size"},
        {"cuMemMap 1023:1\n", "line 1: '1023' is not a size"},
        {"cuMemMap 1025G:1\n", "line 1: '1025G' is not a size"},
        {"cuMemMap 99999999999999M:1\n", "line 1: '99999999999999M' is not a size"},
        {"cuMemMap 2M:\n", "line 1: '' is not a number"},
        {"cuMemMap 2M:-1\n", "line 1: '-1' is not a number"},
        {"cuMemMap 2M:1 2048K:3\n", "line 1: cuMemMap gives the size 2048K twice"},
        {"cuMemMap 1K:1 2K:1 3K:1 4K:1 5K:1 6K:1 7K:1 8K:1 9K:1 10K:1 11K:1 12K:1 13K:1 14K:1 "
         "15K:1 16K:1 17K:1\n",
         "line 1: cuMemMap has more than 16 points"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = c;
        err[0] = '\0';
        assert_int_equal(parse(&d, bad[i].text, err, sizeof err), -1);
        if (strncmp(err, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("'%s': got '%s', want '%s...'", bad[i].text, err, bad[i].msg);
        assert_memory_equal(&d, &c, sizeof c); /* nothing applied */
    }
    /* sixteen points are fine, and a line after a measured one replaces it */
    d = c;
    assert_int_equal(parse(&d, "cuMemMap 1K:1 2K:1 3K:1 4K:1 5K:1 6K:1 7K:1 8K:1 9K:1 10K:1 "
                               "11K:1 12K:1 13K:1 14K:1 15K:1 1G:2\n", err, sizeof err), 0);
    assert_int_equal(d.call[TS_CALL_MAP].npoints, 16);
    assert_int_equal(parse(&d, "cuMemMap 4\n", err, sizeof err), 0);
    assert_int_equal(d.call[TS_CALL_MAP].npoints, 0);
    assert_true(near(cost_us(&d, TS_CALL_MAP, 1 * GiB), 4.0));
    /* a NUL byte */
    d = c;
    assert_int_equal(ts_driver_costs_parse(&d, "cudaFree 1\0x\n", 13, err, sizeof err), -1);
    assert_string_equal(err, "line 1: a NUL byte (not a text file)");
}

/* The repository's costs files, which the tables are built from, parse as they are. */
static void test_costs_files_of_the_repository(void **state)
{
    (void)state;
    static const char *const files[] = {TESSERA_SOURCE_DIR "/tests/data/driver-costs/h100.txt",
                                        TESSERA_SOURCE_DIR "/tests/data/driver-costs/h200.txt",
                                        TESSERA_SOURCE_DIR
                                        "/tests/data/driver-costs/a100-published.txt"};
    static const char *const names[] = {"h100", "h200", "a100"};
    for (int i = 0; i < 3; i++) {
        ts_driver_costs from_file, built_in;
        char err[512];
        memset(&from_file, 0, sizeof from_file);
        assert_int_equal(ts_driver_costs_load(&from_file, files[i], err, sizeof err), 0);
        assert_int_equal(ts_driver_costs_builtin(&built_in, names[i]), 0);
        assert_memory_equal(&from_file, &built_in, sizeof built_in);
    }
}

static void test_costs_file_load(void **state)
{
    (void)state;
    ts_driver_costs c;
    char err[512];
    assert_int_equal(ts_driver_costs_builtin(&c, "h200"), 0);
    assert_int_equal(ts_driver_costs_load(&c, "/nonexistent/costs", err, sizeof err), -1);
    assert_string_equal(err, "/nonexistent/costs: No such file or directory");
    assert_int_equal(ts_driver_costs_load(&c, "/", err, sizeof err), -1);
    assert_string_equal(err, "/: not a regular file");

    char dir[] = "/tmp/tessera-costs-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], fifo[256];
    snprintf(path, sizeof path, "%s/costs.txt", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("cuMemUnmap 3\ncuMemMap x\n", fp);
    fclose(fp);
    assert_int_equal(ts_driver_costs_load(&c, path, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s: line 2: 'x' is not a number", path);
    assert_int_equal(strncmp(err, want, strlen(want)), 0);
    assert_true(near(cost_us(&c, TS_CALL_UNMAP, 2 * MiB), 13.501)); /* unchanged */
    fp = fopen(path, "w");
    fputs("cuMemUnmap 3\n", fp);
    fclose(fp);
    assert_int_equal(ts_driver_costs_load(&c, path, err, sizeof err), 0);
    assert_true(c.call[TS_CALL_UNMAP].call_ns == 3000.0);
    assert_int_equal(mkfifo(fifo, 0600), 0); /* refused at once, never waited on */
    assert_int_equal(ts_driver_costs_load(&c, fifo, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: not a regular file", fifo);
    assert_string_equal(err, want);
    unlink(fifo);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_costs_plain_segments),
        cmocka_unit_test(test_costs_vm_pages),
        cmocka_unit_test(test_costs_grant_per_mapping),
        cmocka_unit_test(test_devmodel_maps_parts_of_handles),
        cmocka_unit_test(test_costs_failures_charged),
        cmocka_unit_test(test_costs_defaults),
        cmocka_unit_test(test_costs_points),
        cmocka_unit_test(test_costs_file_format),
        cmocka_unit_test(test_costs_files_of_the_repository),
        cmocka_unit_test(test_costs_file_load),
    };
    return cmocka_run_group_tests_name("costs", tests, NULL, NULL);
}
