/* Copying the events of a history ring (statspage/history_read.h), whether the ring is this
 * process's own (snapshot_on_oom) or a copy read from another process's file. */
#include "statspage/history_read.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Copy the live events of a ring at base (hdr already validated: capacity events follow). */
int ts_history_copy_ring(const tessera_history_header *hdr, const tessera_history_event *ev,
                         ts_history_copy *out)
{
    uint64_t written = __atomic_load_n(&hdr->written, __ATOMIC_ACQUIRE);
    uint64_t cap = hdr->capacity;
    uint64_t first = written > cap ? written - cap : 0;
    out->events = calloc(written - first ? written - first : 1, sizeof *out->events);
    if (!out->events)
        return ENOMEM;
    out->n = 0;
    out->dropped = first;
    for (uint64_t n = first; n < written; n++) {
        const tessera_history_event *e = &ev[n % cap];
        uint64_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        tessera_history_event c;
        memcpy(&c, e, sizeof c);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint64_t s2 = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
        if (s1 != 2 * n + 2 || s2 != s1 || c.nframes > TESSERA_HISTORY_MAX_FRAMES) {
            out->dropped++;
            continue;
        }
        out->events[out->n++] = c;
    }
    return 0;
}

void ts_history_copy_free(ts_history_copy *c)
{
    free(c->events);
    c->events = NULL;
    c->n = 0;
}
