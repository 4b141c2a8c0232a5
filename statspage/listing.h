/* Every page of a directory read for output, with bounded work (tessera-stat's listings, its
 * Prometheus server, the Python module's tessera.processes()). */
#ifndef TS_STATSPAGE_LISTING_H
#define TS_STATSPAGE_LISTING_H

#include <stddef.h>

#include "statspage/render.h"

typedef struct ts_views {
    ts_proc_view *v; /* sorted by pid */
    size_t n;
} ts_views;

/* Load every page of dir. Whatever the directory holds, at most 1024 pages and 512 slots per
 * user owning page files, and 4096 pages and 2048 slots in all, are read: a page past a bound is
 * a view of status TS_PAGE_ESKIPPED, unread. Returns 0, or an errno value (the directory cannot
 * be read, or out of memory) with *out empty. */
int ts_views_load_all(const char *dir, ts_views *out);
void ts_views_free(ts_views *vs);

#endif /* TS_STATSPAGE_LISTING_H */
