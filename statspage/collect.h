/* Listing the pages of a directory and collecting the stale ones (tessera-stat --gc, tessera
 * run). A live page is never removed: see ts_page_gc. */
#ifndef TS_STATSPAGE_COLLECT_H
#define TS_STATSPAGE_COLLECT_H

#include <stddef.h>

#include "statspage/reader.h"

/* Page files in dir (names tessera.<pid>), pids ascending. *pids is malloc'd (free it). Returns
 * 0 or an errno value. */
int ts_page_list(const char *dir, int **pids, size_t *n);

/* The owner state of an opened page (status: what the open returned), including pages without
 * an identity (creation never finished), judged by the pid of their name and their age. */
int ts_page_judge(ts_page *pg, int status, int pid, char *why, size_t whylen);

/* Remove the stale pages of dir: each candidate is renamed aside, judged again, and unlinked
 * only if still stale (else renamed back), so a live page is never removed. Then the history
 * rings (tessera.<pid>.history.<slot>) whose page is gone and whose process is gone: a ring is
 * created after its page and removed before it, so only a process that died (or kept its files
 * with TESSERA_STATS_KEEP=1) leaves one without a page. Rings are only removed when they belong
 * to the collecting user (or the collector is root), with the same rename-aside check. report
 * (may be NULL) is called for each stale file, removed or not, with its name in dir. Returns the
 * number of files removed, or a negative errno when the directory cannot be read. */
typedef void (*ts_gc_report_fn)(void *user, const char *name, int pid, int removed,
                                const char *why);
int ts_page_gc(const char *dir, ts_gc_report_fn report, void *user);

/* The same for one pid only: its page, then its history rings, each removed only when stale
 * (tessera run, once its program died of a signal and left them). Returns the number of files
 * removed, or a negative errno. */
int ts_page_collect_pid(const char *dir, int pid, ts_gc_report_fn report, void *user);

#endif /* TS_STATSPAGE_COLLECT_H */
