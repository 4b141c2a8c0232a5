/* cmocka tests of tessera-replay's --min-capacity search (tools/replay/search.c): a bisection
 * whose answer is checked, not assumed monotone. Capacities in pages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tools/replay/search.h"

/* fits: at least `from` pages, except the capacities listed in bad[] (a policy that is not
 * monotone there); counts the capacities asked for. */
typedef struct shape {
    size_t from;
    const size_t *bad;
    size_t nbad;
    size_t asked;
} shape;

static bool fits(void *user, size_t pages)
{
    shape *s = user;
    s->asked++;
    for (size_t i = 0; i < s->nbad; i++)
        if (pages == s->bad[i])
            return false;
    return pages >= s->from;
}

/* Monotone: the bisection's answer, checked by 8 capacities above it and 4 up to the top. */
static void test_search_monotone(void **state)
{
    (void)state;
    shape s = {50, NULL, 0, 0};
    replay_min_check chk;
    assert_int_equal(replay_min_search(10, 100, fits, &s, &chk), 50);
    assert_int_equal(chk.steps, MIN_CHECK_STEPS);
    assert_int_equal(chk.samples, MIN_CHECK_SAMPLES);
    assert_int_equal(chk.checked_to, 100);
    assert_int_equal(chk.raised, 0);
    /* an answer right below the top: only what lies above it is checked */
    shape near = {98, NULL, 0, 0};
    assert_int_equal(replay_min_search(10, 100, fits, &near, &chk), 98);
    assert_int_equal(chk.steps, 2);
    assert_int_equal(chk.samples, 0);
    assert_int_equal(chk.checked_to, 100);
    shape top = {100, NULL, 0, 0};
    assert_int_equal(replay_min_search(10, 100, fits, &top, &chk), 100);
    assert_int_equal(chk.steps + chk.samples, 0);
}

/* A capacity right above the bisection's answer fails: the answer moves above it. */
static void test_search_moves_above_a_failure(void **state)
{
    (void)state;
    static const size_t bad[] = {58};
    shape s = {50, bad, 1, 0};
    replay_min_check chk;
    assert_int_equal(replay_min_search(10, 100, fits, &s, &chk), 59);
    assert_int_equal(chk.raised, 1);
    assert_int_equal(chk.steps, 2 * MIN_CHECK_STEPS);
    /* one further up, among the samples (58 + 42 * 2 / 4 = 79): caught too */
    static const size_t far[] = {79};
    shape f = {50, far, 1, 0};
    assert_int_equal(replay_min_search(10, 100, fits, &f, &chk), 80);
    assert_int_equal(chk.raised, 1);
}

/* Failures that keep coming: the answer moves above each; after MIN_CHECK_ROUNDS moves the
 * known-good top is taken. Failing every 8 pages from 58 up (twelve of them, to 146), with the
 * top at 1000: the check finds one or two at a time, and the rounds run out first. */
static void test_search_gives_up_at_the_top(void **state)
{
    (void)state;
    size_t bad[12];
    for (size_t k = 0; k < 12; k++)
        bad[k] = 58 + 8 * k;
    shape s = {50, bad, 12, 0};
    replay_min_check chk;
    assert_int_equal(replay_min_search(10, 1000, fits, &s, &chk), 1000);
    assert_int_equal(chk.raised, MIN_CHECK_ROUNDS);
    /* fewer failures than rounds: just above the last of them */
    shape few = {50, bad, 3, 0};
    assert_int_equal(replay_min_search(10, 1000, fits, &few, &chk), 75);
    assert_int_equal(chk.raised, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_monotone),
        cmocka_unit_test(test_search_moves_above_a_failure),
        cmocka_unit_test(test_search_gives_up_at_the_top),
    };
    return cmocka_run_group_tests_name("search", tests, NULL, NULL);
}
