/* The smallest device that runs a trace, found by bisection and then checked rather than
 * assumed monotone (search.c). Capacities are counted in pages (2 MiB). */
#ifndef TS_REPLAY_SEARCH_H
#define TS_REPLAY_SEARCH_H

#include <stdbool.h>
#include <stddef.h>

/* How the answer was checked. */
typedef struct replay_min_check {
    size_t steps;      /* capacities checked one page after another above the answer */
    size_t samples;    /* capacities checked further up, to the known-good capacity */
    size_t checked_to; /* the largest capacity checked (pages) */
    size_t raised;     /* how many times a capacity above the answer failed, so the answer was
                        * moved above it */
} replay_min_check;

#define MIN_CHECK_STEPS 8   /* capacities right above the answer, a page apart */
#define MIN_CHECK_SAMPLES 4 /* and spread from there to the known-good capacity */
#define MIN_CHECK_ROUNDS 8  /* answers moved up before the known-good capacity is taken */

/* Does the trace run on a device of this many pages? */
typedef bool (*replay_fits_fn)(void *user, size_t pages);

/* The smallest capacity in (lo, top] (pages) on which fits holds, where top is known to fit
 * and lo not to: a bisection, whose answer is then checked: the MIN_CHECK_STEPS capacities
 * right above it and MIN_CHECK_SAMPLES more spread up to top must fit too; where one does not,
 * the answer moves above it and is checked again (after MIN_CHECK_ROUNDS moves, top is taken).
 * chk says what was checked. */
size_t replay_min_search(size_t lo, size_t top, replay_fits_fn fits, void *user,
                         replay_min_check *chk);

#endif /* TS_REPLAY_SEARCH_H */
