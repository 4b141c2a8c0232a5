/* Pause and resume (pause.c); the API is in allocator.h. */
#ifndef TS_PAUSE_H
#define TS_PAUSE_H

#include "core/internal.h"

/* Forget a pause: the saved bytes are dropped and the allocator is no longer paused. Its
 * records still name the handles the pause destroyed, so the caller must not give them to the
 * device (allocator destroy, which then leaves the ranges to the context's teardown). */
void pause_drop(ts_allocator *a);

#endif /* TS_PAUSE_H */
