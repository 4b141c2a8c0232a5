/* cmocka tests of the core's data structures: the AVL tree and the pointer map. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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
        cmocka_unit_test(test_ptrmap_random),
        cmocka_unit_test(test_slab_reuse),
    };
    return cmocka_run_group_tests_name("structures", tests, NULL, NULL);
}
