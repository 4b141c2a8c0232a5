/* Shared by the stats-page test programs that drive a real allocator: a non-fatal CHECK that
 * counts failures, and a snapshot of one slot of a process's page, taken as a reader would. */
#ifndef TS_TEST_STATSPAGE_SNAP_H
#define TS_TEST_STATSPAGE_SNAP_H

#include <stdio.h>

#include "statspage/reader.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

struct snap {
    tessera_page_slot_head head;
    tessera_page_segment segs[TESSERA_PAGE_MAX_SEGMENTS];
    tessera_page_block blocks[TESSERA_PAGE_MAX_BLOCKS];
};

/* Snapshot slot of pid's page into s; TS_PAGE_OK or the reader's status, with its message in
 * err. */
static inline int snap_take(int pid, int slot, struct snap *s, char *err, size_t len)
{
    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_pid(&pg, NULL, pid);
    if (st == TS_PAGE_OK)
        st = ts_page_snapshot(&pg, (uint32_t)slot, &s->head, s->segs, s->blocks);
    snprintf(err, len, "%s", pg.error);
    ts_page_close(&pg);
    return st;
}

#endif
