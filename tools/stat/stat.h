/* tessera-stat's commands beyond the stats page renderers (statspage/render.c). */
#ifndef TS_TOOLS_STAT_H
#define TS_TOOLS_STAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "statspage/listing.h"

/* Every page of dir, loaded for output with bounded work (ts_views_load_all): 0, or -1 after a
 * message (tessera-stat.c). */
typedef ts_views views;
int ts_stat_load_all(const char *dir, views *out);
void ts_stat_free_all(views *vs);

/* Open the page of pid in dir: 0, or 1 after a message (the page closed) (tools/stat/page.c). */
int ts_stat_open_page(const char *dir, int pid, ts_page *pg);

/* tessera-stat snapshot PID -o FILE (tools/stat/snapshot.c). Exit status. */
int ts_stat_snapshot(const char *dir, int pid, const char *out_path, double wait_s);

/* tessera-stat release PID [--keep SIZE] (tools/stat/release.c): the process's empty_cache,
 * keeping at most keep bytes cached per device. Exit status: 0, 1 (no page for PID), or
 * TS_STAT_REFUSED (another user's process, no control channel, no answer). */
#define TS_STAT_REFUSED 3
int ts_stat_release(const char *dir, int pid, uint64_t keep);

/* One request to process pid over its control channel (tools/stat/ask.c), whose answer must be
 * exactly cap bytes of the request's type; timeout_ns 0: the channel's own bound (30 s). what:
 * the act, for messages ("release its memory"). Exit status: 0, 1 (no page), or
 * TS_STAT_REFUSED after a message. */
int ts_stat_ask(const char *dir, int pid, const char *what, void *req, size_t len, void *ans,
                size_t cap, uint64_t timeout_ns);

/* tessera-stat pause PID and resume PID (tools/stat/pause.c). Exit status: 0, 1, or
 * TS_STAT_REFUSED (refused by the process, with its reason, or not asked). */
int ts_stat_pause(const char *dir, int pid, bool resume);

/* tessera-stat symbolize FILE [-o OUT] (tools/stat/symbolize.c): name a snapshot's raw frames;
 * OUT NULL: FILE itself. Exit status. */
int ts_stat_symbolize(const char *in_path, const char *out_path);

/* tessera-stat --serve [ADDR:PORT] (tools/stat/serve.c). labels: the --labels list, or NULL
 * for the default (every label on loopback; beyond it no command line and no configuration).
 * Exit status. */
#define TS_STAT_SERVE_DEFAULT "127.0.0.1:9464"
int ts_stat_serve(const char *dir, const char *listen, const char *labels);

#endif /* TS_TOOLS_STAT_H */
