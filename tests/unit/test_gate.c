/* The gate of shim/gate.c, with threads: once a close returns, no thread is inside and none
 * enters until the open; a call that never leaves makes the close give up and open again; a
 * gated call inside a gated call passes through. scripts/test.sh runs it under TSan too. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "shim/shim.h"

#define SECOND 1000000000ull

static int inside_now;   /* atomic: threads between their enter and their leave */
static int stop;         /* atomic */
static long passes;      /* atomic: gated calls made */

static void *caller(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        ts_gate_enter();
        __atomic_add_fetch(&inside_now, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&passes, 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&inside_now, 1, __ATOMIC_SEQ_CST);
        ts_gate_leave();
    }
    return NULL;
}

/* Four threads pass the gate in a loop; 200 times it closes and opens. While it is shut nobody
 * is inside, and the callers go on once it opens. */
static void test_nobody_inside_while_shut(void **state)
{
    (void)state;
    pthread_t t[4];
    __atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, caller, NULL), 0);
    for (int round = 0; round < 200; round++) {
        long before = __atomic_load_n(&passes, __ATOMIC_RELAXED);
        while (__atomic_load_n(&passes, __ATOMIC_RELAXED) < before + 50)
            ; /* the callers are running */
        assert_int_equal(ts_gate_close(60 * SECOND), 0);
        assert_true(ts_gate_closed());
        long shut = __atomic_load_n(&passes, __ATOMIC_SEQ_CST);
        for (int k = 0; k < 1000; k++)
            assert_int_equal(__atomic_load_n(&inside_now, __ATOMIC_SEQ_CST), 0);
        assert_int_equal(__atomic_load_n(&passes, __ATOMIC_SEQ_CST), shut);
        assert_int_equal(ts_gate_close(SECOND), -EALREADY);
        ts_gate_open();
        assert_false(ts_gate_closed());
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
}

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static int entered; /* atomic */

static void *stuck(void *arg)
{
    (void)arg;
    ts_gate_enter();
    __atomic_store_n(&entered, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&held); /* until the test lets go */
    pthread_mutex_unlock(&held);
    ts_gate_leave();
    return NULL;
}

/* A call that does not leave: the close gives up after its wait, and the gate is open again
 * (another call passes); once that call left, a close succeeds. */
static void test_a_call_that_stays_makes_the_close_give_up(void **state)
{
    (void)state;
    pthread_t t;
    pthread_mutex_lock(&held);
    __atomic_store_n(&entered, 0, __ATOMIC_RELEASE);
    assert_int_equal(pthread_create(&t, NULL, stuck, NULL), 0);
    while (!__atomic_load_n(&entered, __ATOMIC_ACQUIRE))
        ;
    assert_int_equal(ts_gate_close(SECOND / 10), -ETIMEDOUT);
    assert_false(ts_gate_closed());
    ts_gate_enter(); /* open: this thread passes */
    ts_gate_leave();
    pthread_mutex_unlock(&held);
    pthread_join(t, NULL);
    assert_int_equal(ts_gate_close(SECOND), 0);
    ts_gate_open();
}

static int outer_in, inner_done; /* atomic */

static void *nested(void *arg)
{
    (void)arg;
    ts_gate_enter();
    __atomic_store_n(&outer_in, 1, __ATOMIC_RELEASE);
    while (!ts_gate_closed())
        ; /* the close is waiting for this call now */
    ts_gate_enter(); /* a gated call inside a gated call: it must not wait for itself */
    ts_gate_leave();
    __atomic_store_n(&inner_done, 1, __ATOMIC_RELEASE);
    ts_gate_leave();
    return NULL;
}

static void *closer(void *arg)
{
    *(int *)arg = ts_gate_close(60 * SECOND);
    return NULL;
}

/* A thread inside a gated call makes another one after the gate shut: it passes (it is counted
 * once), and the close returns when the outer call leaves. */
static void test_a_nested_call_passes(void **state)
{
    (void)state;
    pthread_t t, c;
    int rc = 1;
    assert_int_equal(pthread_create(&t, NULL, nested, NULL), 0);
    while (!__atomic_load_n(&outer_in, __ATOMIC_ACQUIRE))
        ;
    assert_int_equal(pthread_create(&c, NULL, closer, &rc), 0);
    pthread_join(t, NULL);
    pthread_join(c, NULL);
    assert_int_equal(__atomic_load_n(&inner_done, __ATOMIC_ACQUIRE), 1);
    assert_int_equal(rc, 0);
    ts_gate_open();
}

static void *waiter(void *arg)
{
    (void)arg;
    ts_gate_enter();
    __atomic_store_n(&entered, 2, __ATOMIC_RELEASE);
    ts_gate_leave();
    return NULL;
}

/* A call made while the gate is shut waits for the open: it has not entered before the open,
 * and enters after it. */
static void test_a_call_waits_for_the_open(void **state)
{
    (void)state;
    __atomic_store_n(&entered, 0, __ATOMIC_RELEASE);
    assert_int_equal(ts_gate_close(SECOND), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, NULL), 0);
    for (int k = 0; k < 100000; k++)
        assert_int_equal(__atomic_load_n(&entered, __ATOMIC_ACQUIRE), 0);
    ts_gate_open();
    pthread_join(t, NULL);
    assert_int_equal(__atomic_load_n(&entered, __ATOMIC_ACQUIRE), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nobody_inside_while_shut),
        cmocka_unit_test(test_a_call_that_stays_makes_the_close_give_up),
        cmocka_unit_test(test_a_nested_call_passes),
        cmocka_unit_test(test_a_call_waits_for_the_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
