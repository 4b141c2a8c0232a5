/* The smallest device that runs a trace, checked (see search.h). */
#include "tools/replay/search.h"

#include <string.h>

/* The largest capacity in the check above ans that does not fit, 0 when all do. */
static size_t min_check(size_t ans, size_t top, replay_fits_fn fits, void *user,
                        replay_min_check *chk)
{
    size_t failed = 0;
    for (size_t k = 1; k <= MIN_CHECK_STEPS && ans + k <= top; k++) {
        chk->steps++;
        chk->checked_to = ans + k;
        if (!fits(user, ans + k))
            failed = ans + k;
    }
    const size_t from = ans + MIN_CHECK_STEPS;
    for (size_t k = 1; k <= MIN_CHECK_SAMPLES && from < top; k++) {
        const size_t c = from + (top - from) * k / MIN_CHECK_SAMPLES;
        chk->samples++;
        chk->checked_to = c;
        if (!fits(user, c))
            failed = c;
    }
    return failed;
}

size_t replay_min_search(size_t lo, size_t top, replay_fits_fn fits, void *user,
                         replay_min_check *chk)
{
    memset(chk, 0, sizeof *chk);
    size_t hi = top;
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if (fits(user, mid))
            hi = mid;
        else
            lo = mid;
    }
    /* A policy need not be monotone in the device's size: check above the answer, and move it
     * above any capacity that fails. */
    for (size_t round = 0; hi < top; round++) {
        const size_t failed = min_check(hi, top, fits, user, chk);
        if (!failed)
            break;
        chk->raised++;
        hi = round + 1 < MIN_CHECK_ROUNDS ? failed + 1 : top;
    }
    return hi;
}
