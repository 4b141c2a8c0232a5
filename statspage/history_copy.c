/* Copying the events of a history ring (statspage/history_read.h), whether the ring is this
 * process's own (snapshot_on_oom) or a copy read from another process's file. */
#include "statspage/history_read.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint64_t ts_history_window(uint64_t written, uint64_t capacity, uint64_t *first)
{
    uint64_t f = written > capacity ? written - capacity : 0;
    if (written - f > TS_HISTORY_COPY_MAX_EVENTS)
        f = written - TS_HISTORY_COPY_MAX_EVENTS;
    *first = f;
    return written - f;
}

void ts_history_take(ts_history_copy *out, const tessera_history_event *e, uint64_t seq_after,
                     uint64_t n)
{
    if (e->seq != 2 * n + 2 || seq_after != e->seq || e->nframes > TESSERA_HISTORY_MAX_FRAMES) {
        out->dropped++;
        return;
    }
    out->events[out->n++] = *e;
}

/* Copy the live events of a ring at base (hdr already validated: capacity events follow). */
int ts_history_copy_ring(const tessera_history_header *hdr, const tessera_history_event *ev,
                         ts_history_copy *out)
{
    uint64_t written = __atomic_load_n(&hdr->written, __ATOMIC_ACQUIRE);
    uint64_t cap = hdr->capacity, first;
    uint64_t count = ts_history_window(written, cap, &first);
    out->events = calloc(count ? count : 1, sizeof *out->events);
    if (!out->events)
        return ENOMEM;
    out->n = 0;
    out->dropped = first;
    out->cut = first - (written > cap ? written - cap : 0);
    for (uint64_t n = first; n < written; n++) {
        const tessera_history_event *e = &ev[n % cap];
        tessera_history_event c;
        c.seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        memcpy((char *)&c + sizeof c.seq, (const char *)e + sizeof c.seq, sizeof c - sizeof c.seq);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        ts_history_take(out, &c, __atomic_load_n(&e->seq, __ATOMIC_RELAXED), n);
    }
    return 0;
}

void ts_history_copy_free(ts_history_copy *c)
{
    free(c->events);
    c->events = NULL;
    c->n = 0;
}
