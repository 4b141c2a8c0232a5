/* cmocka tests of the core's data structures: the AVL tree, the segregated free index, the
 * pointer map and the slabs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/freeidx.h"
#include "core/ptrmap.h"
#include "core/slab.h"
#include "core/tree.h"

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random inserts and removes against a brute-force model; order, bounds and balance checked. */
static void test_tree_random(void **state)
{
    (void)state;
    enum { N = 3000 };
    ts_node *nodes = calloc(N, sizeof *nodes);
    bool *in = calloc(N, sizeof *in);
    ts_tree t = {0};
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        nodes[i].k0 = xorshift(&s) % 4;
        nodes[i].k1 = xorshift(&s) % 64;
        nodes[i].k2 = (uint64_t)i; /* unique */
    }
    for (int step = 0; step < 40000; step++) {
        int i = (int)(xorshift(&s) % N);
        if (in[i])
            ts_tree_remove(&t, &nodes[i]);
        else
            ts_tree_insert(&t, &nodes[i]);
        in[i] = !in[i];
        if (step % 997 == 0)
            assert_int_equal(ts_tree_check(&t), 0);
        /* lower_bound agrees with a linear scan */
        uint64_t q0 = xorshift(&s) % 4, q1 = xorshift(&s) % 64;
        ts_node *best = NULL;
        for (int j = 0; j < N; j++)
            if (in[j] && ts_node_cmp(&nodes[j], q0, q1, 0) >= 0 &&
                (!best || ts_node_cmp(&nodes[j], best->k0, best->k1, best->k2) < 0))
                best = &nodes[j];
        assert_ptr_equal(ts_tree_lower_bound(&t, q0, q1, 0), best);
        ts_node *fl = NULL;
        for (int j = 0; j < N; j++)
            if (in[j] && ts_node_cmp(&nodes[j], q0, q1, UINT64_MAX) <= 0 &&
                (!fl || ts_node_cmp(&nodes[j], fl->k0, fl->k1, fl->k2) > 0))
                fl = &nodes[j];
        assert_ptr_equal(ts_tree_floor(&t, q0, q1, UINT64_MAX), fl);
    }
    assert_int_equal(ts_tree_check(&t), 0);
    size_t count = 0;
    for (ts_node *n = ts_tree_last(&t); n; n = ts_tree_prev(n))
        count++;
    assert_int_equal(count, t.count);
    free(nodes);
    free(in);
}

/* The free index answers every ordered question exactly as one tree over the same keys does:
 * random inserts and removes over several streams (0 and UINT64_MAX included) and sizes in
 * every kind of class (exact small classes, sub-classes of powers of two, the last class). */
static void test_freeidx_matches_tree(void **state)
{
    (void)state;
    enum { N = 1500, STEPS = 30000 };
    static const uint64_t streams[] = {0, 1, 7, UINT64_MAX};
    uint64_t sizes[64];
    uint64_t s = 0x243F6A8885A308D3ull;
    for (int i = 0; i < 64; i++) {
        uint64_t r = xorshift(&s);
        switch (i % 4) {
        case 0: sizes[i] = 512u * (1u + r % 2047u); break;               /* below 1 MiB */
        case 1: sizes[i] = (((uint64_t)1 << 20) + (r % (63u << 20))) & ~(uint64_t)511; break;
        case 2: sizes[i] = (uint64_t)1 << (20u + r % 20u); break;        /* class edges */
        default: sizes[i] = r >> (r % 40u); break;                       /* anything */
        }
    }
    sizes[0] = 0;
    sizes[1] = ((uint64_t)1 << 20) - 512u;
    sizes[2] = (uint64_t)1 << 20;
    sizes[3] = UINT64_MAX;
    ts_node *ref = calloc(N, sizeof *ref), *idx = calloc(N, sizeof *idx);
    ts_freeidx *x = calloc(1, sizeof *x);
    bool *in = calloc(N, sizeof *in);
    assert_non_null(ref);
    assert_non_null(idx);
    assert_non_null(x);
    assert_non_null(in);
    ts_tree t = {0};
    for (int i = 0; i < N; i++) {
        ref[i].k0 = idx[i].k0 = streams[xorshift(&s) % 4];
        ref[i].k1 = idx[i].k1 = sizes[xorshift(&s) % 64];
        ref[i].k2 = idx[i].k2 = (uint64_t)i * 4096u; /* unique; node 0 at address 0 */
    }
#define AS_IDX(n) ((n) ? (ptrdiff_t)((n) - idx) : (ptrdiff_t)-1)
#define AS_REF(n) ((n) ? (ptrdiff_t)((n) - ref) : (ptrdiff_t)-1)
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(xorshift(&s) % N);
        if (in[i]) {
            ts_tree_remove(&t, &ref[i]);
            ts_freeidx_remove(x, &idx[i]);
        } else {
            ts_tree_insert(&t, &ref[i]);
            ts_freeidx_insert(x, &idx[i]);
        }
        in[i] = !in[i];
        assert_int_equal(x->count, t.count);
        if (step % 499 == 0)
            assert_int_equal(ts_freeidx_check(x), 0);

        uint64_t q0 = streams[xorshift(&s) % 4], q1 = sizes[xorshift(&s) % 64];
        uint64_t q2 = (xorshift(&s) % (N + 1u)) * 4096u;
        if (step & 1)
            q1 += xorshift(&s) % 3u; /* sizes in between too (wraps at UINT64_MAX) */
        assert_int_equal(AS_IDX(ts_freeidx_lower_bound(x, q0, q1, q2)),
                         AS_REF(ts_tree_lower_bound(&t, q0, q1, q2)));
        assert_int_equal(AS_IDX(ts_freeidx_floor(x, q0, q1, q2)),
                         AS_REF(ts_tree_floor(&t, q0, q1, q2)));
        ts_node *want = ts_tree_lower_bound(&t, q0, q1, 0);
        if (want && want->k0 != q0)
            want = NULL;
        assert_int_equal(AS_IDX(ts_freeidx_find(x, q0, q1)), AS_REF(want));
        assert_int_equal(AS_IDX(ts_freeidx_first(x)), AS_REF(ts_tree_first(&t)));
        assert_int_equal(AS_IDX(ts_freeidx_last(x)), AS_REF(ts_tree_last(&t)));
        if (in[i]) {
            assert_int_equal(AS_IDX(ts_freeidx_next(x, &idx[i])), AS_REF(ts_tree_next(&ref[i])));
            assert_int_equal(AS_IDX(ts_freeidx_prev(x, &idx[i])), AS_REF(ts_tree_prev(&ref[i])));
            ts_node *same = ts_tree_next(&ref[i]);
            if (same && same->k0 != ref[i].k0)
                same = NULL;
            assert_int_equal(AS_IDX(ts_freeidx_next_on_stream(x, &idx[i])), AS_REF(same));
        }
        if (step % 97 == 0) {
            uint64_t max = 0;
            for (ts_node *n = ts_tree_first(&t); n; n = ts_tree_next(n))
                max = n->k1 > max ? n->k1 : max;
            assert_true(ts_freeidx_max_size(x) == max);
        }
    }
#undef AS_IDX
#undef AS_REF
    /* A full walk both ways visits every node once, in the tree's order. */
    size_t count = 0;
    ts_node *r = ts_tree_first(&t);
    for (ts_node *n = ts_freeidx_first(x); n; n = ts_freeidx_next(x, n), r = ts_tree_next(r)) {
        assert_non_null(r);
        assert_int_equal(n - idx, r - ref);
        count++;
    }
    assert_null(r);
    assert_int_equal(count, t.count);
    count = 0;
    for (ts_node *n = ts_freeidx_last(x); n; n = ts_freeidx_prev(x, n))
        count++;
    assert_int_equal(count, t.count);
    /* A damaged bitmap is caught. */
    assert_int_equal(ts_freeidx_check(x), 0);
    x->summary ^= 1u;
    assert_int_not_equal(ts_freeidx_check(x), 0);
    free(ref);
    free(idx);
    free(x);
    free(in);
}

/* Classes never decrease as sizes grow, and below 1 MiB each 512-byte size has its own. */
static void test_freeidx_classes(void **state)
{
    (void)state;
    unsigned prev = 0;
    for (uint64_t size = 0; size < ((uint64_t)1 << 20); size += 512) {
        unsigned c = ts_freeidx_class(size);
        assert_int_equal(c, size / 512);
        prev = c;
    }
    for (unsigned l = 20; l < 64; l++)
        for (uint64_t k = 0; k < 64; k++) {
            uint64_t size = ((uint64_t)1 << l) + k * (((uint64_t)1 << l) / 64);
            unsigned c = ts_freeidx_class(size);
            assert_true(c >= prev);
            assert_true(c < TS_FREEIDX_CLASSES);
            prev = c;
        }
    assert_int_equal(ts_freeidx_class(UINT64_MAX), TS_FREEIDX_CLASSES - 1);
}

static void test_ptrmap_random(void **state)
{
    (void)state;
    enum { N = 20000 };
    uintptr_t *keys = calloc(N, sizeof *keys);
    bool *in = calloc(N, sizeof *in);
    ts_ptrmap m;
    assert_int_equal(ts_ptrmap_init(&m, 16), 0);
    uint64_t s = 0x1234567ull;
    for (int i = 0; i < N; i++)
        keys[i] = 0x7f0000000000ull + (uintptr_t)i * 512u; /* dense, aligned: worst case */
    size_t count = 0;
    for (int step = 0; step < 200000; step++) {
        int i = (int)(xorshift(&s) % N);
        if (in[i]) {
            assert_ptr_equal(ts_ptrmap_del(&m, keys[i]), &keys[i]);
            count--;
        } else {
            assert_int_equal(ts_ptrmap_put(&m, keys[i], &keys[i]), 0);
            count++;
        }
        in[i] = !in[i];
        int j = (int)(xorshift(&s) % N);
        assert_ptr_equal(ts_ptrmap_get(&m, keys[j]), in[j] ? &keys[j] : NULL);
    }
    assert_int_equal(m.count, count);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(ts_ptrmap_get(&m, keys[i]), in[i] ? &keys[i] : NULL);
    assert_null(ts_ptrmap_del(&m, 0x1000));
    ts_ptrmap_destroy(&m);
    free(keys);
    free(in);
}

static void test_slab_reuse(void **state)
{
    (void)state;
    ts_slab s;
    ts_slab_init(&s, 40);
    void *objs[5000];
    for (int i = 0; i < 5000; i++) {
        objs[i] = ts_slab_alloc(&s);
        assert_non_null(objs[i]);
        memset(objs[i], 0xab, 40);
    }
    assert_int_equal(s.live, 5000);
    for (int i = 0; i < 5000; i += 2)
        ts_slab_free(&s, objs[i]);
    /* freed objects come back, zeroed */
    for (int i = 0; i < 5000; i += 2) {
        unsigned char *p = ts_slab_alloc(&s);
        for (int k = 0; k < 40; k++)
            assert_int_equal(p[k], 0);
    }
    assert_int_equal(s.live, 5000);
    ts_slab_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_random),
        cmocka_unit_test(test_freeidx_matches_tree),
        cmocka_unit_test(test_freeidx_classes),
        cmocka_unit_test(test_ptrmap_random),
        cmocka_unit_test(test_slab_reuse),
    };
    return cmocka_run_group_tests_name("structures", tests, NULL, NULL);
}
