/* The validator (check.c). */
#ifndef TS_CHECK_H
#define TS_CHECK_H

#include "core/internal.h"

/* Every invariant of a, lock held: 0, or -1 with the first violation in why. */
int allocator_check_locked(ts_allocator *a, char *why, size_t whylen);

#endif /* TS_CHECK_H */
