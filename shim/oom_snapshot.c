/* snapshot_on_oom: a PyTorch memory snapshot written by the process itself when an allocation
 * fails with out of memory (statspage/snapshot.h has the layout). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "statspage/snapshot_own.h"
#include "shim/shim.h"

/* A program retrying in a loop must not fill the disk: the first few out-of-memory failures get
 * a snapshot, the rest a single line saying so. */
#define OOM_SNAPSHOTS_MAX 8

static unsigned oom_snapshots; /* atomic */

/* Expand %p (pid), %n (this snapshot's number) and %% in a template the configuration parser
 * checked. false when the result does not fit. */
static bool expand_template(const char *tpl, unsigned n, char *out, size_t len)
{
    size_t k = 0;
    for (const char *s = tpl; *s; s++) {
        char piece[24];
        const char *add = piece;
        if (*s == '%' && s[1] == 'p')
            snprintf(piece, sizeof piece, "%d", (int)getpid());
        else if (*s == '%' && s[1] == 'n')
            snprintf(piece, sizeof piece, "%u", n);
        else if (*s == '%' && s[1] == '%')
            add = "%";
        else {
            piece[0] = *s;
            piece[1] = '\0';
        }
        if (*s == '%')
            s++;
        size_t m = strlen(add);
        if (k + m >= len)
            return false;
        memcpy(out + k, add, m);
        k += m;
    }
    out[k] = '\0';
    return true;
}

void ts_oom_snapshot(const char *tpl, ts_allocator *a, ts_history *h)
{
    unsigned n = __atomic_add_fetch(&oom_snapshots, 1, __ATOMIC_RELAXED);
    if (n > OOM_SNAPSHOTS_MAX) {
        if (n == OOM_SNAPSHOTS_MAX + 1)
            ts_log("snapshot_on_oom: %d snapshots written; no more for this process",
                   OOM_SNAPSHOTS_MAX);
        return;
    }
    char path[4096];
    if (!expand_template(tpl, n, path, sizeof path)) {
        ts_log("snapshot_on_oom: the path made from '%s' is too long", tpl);
        return;
    }
    ts_snap s;
    ts_snap_init(&s);
    snprintf(s.source, sizeof s.source, "snapshot_on_oom");
    snprintf(s.consistency, sizeof s.consistency,
             "exact: taken by the process under its allocator's lock after the failed request");
    s.pid = (int)getpid();
    ts_snap_load_mappings(&s, 0);
    char err[512];
    int e = ts_snapshot_own(&s, &a, &h, 1);
    if (e)
        ts_log("snapshot_on_oom: cannot build the snapshot: %s", strerror(e));
    else if (ts_snap_write_file(&s, path, false, err, sizeof err) != 0)
        ts_log("snapshot_on_oom: %s", err);
    else
        ts_log("memory snapshot written to %s (open it at https://pytorch.org/memory_viz)", path);
    ts_snap_free(&s);
}
