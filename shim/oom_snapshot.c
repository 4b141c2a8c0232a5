/* snapshot_on_oom: a PyTorch memory snapshot written by the process itself when an allocation
 * fails with out of memory (statspage/snapshot.h has the layout). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statspage/snapshot_own.h"
#include "shim/shim.h"

/* A program retrying in a loop must not fill the disk: the first few out-of-memory failures get
 * a snapshot (each at most TS_SNAP_MAX_BYTES), the rest a single line saying so. */
#define OOM_SNAPSHOTS_MAX 8

static unsigned oom_snapshots; /* atomic: attempts */
static unsigned oom_written;   /* atomic: snapshots that reached the disk */

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

/* The directory a snapshot goes to must be one other users cannot write: in a shared one
 * (/tmp) anyone can plant a file under the name a snapshot will have, and whoever loads "the
 * snapshot" then unpickles theirs. A missing last directory is created, mode 0700. true when
 * path's directory is fit; else a line says why. */
static bool snapshot_dir_private(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    if (lstat(dir, &st) != 0 && errno == ENOENT && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        ts_log("snapshot_on_oom: cannot create the directory %s: %s", dir, strerror(errno));
        return false;
    }
    if (lstat(dir, &st) != 0) {
        ts_log("snapshot_on_oom: %s: %s", dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0) ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
        ts_log("snapshot_on_oom: not written: %s is %s, so another user could plant a file under "
               "the snapshot's name; use a directory of your own (e.g. $HOME/tessera-oom, "
               "created mode 0700 if missing)", dir,
               !S_ISDIR(st.st_mode) ? "not a directory (or a symbolic link)"
               : (st.st_mode & (S_IWGRP | S_IWOTH)) ? "writable by other users"
               : "another user's");
        return false;
    }
    return true;
}

void ts_oom_snapshot(const char *tpl, ts_allocator *a, ts_history *h)
{
    unsigned n = __atomic_add_fetch(&oom_snapshots, 1, __ATOMIC_RELAXED);
    if (n > OOM_SNAPSHOTS_MAX) {
        if (n == OOM_SNAPSHOTS_MAX + 1) {
            unsigned ok = __atomic_load_n(&oom_written, __ATOMIC_RELAXED);
            if (ok == OOM_SNAPSHOTS_MAX)
                ts_log("snapshot_on_oom: %d snapshots written; no more for this process",
                       OOM_SNAPSHOTS_MAX);
            else
                ts_log("snapshot_on_oom: %u of %d snapshots written, %u not (said above); no "
                       "more for this process", ok, OOM_SNAPSHOTS_MAX, OOM_SNAPSHOTS_MAX - ok);
        }
        return;
    }
    char path[4096];
    if (!expand_template(tpl, n, path, sizeof path)) {
        ts_log("snapshot_on_oom: the path made from '%s' is too long", tpl);
        return;
    }
    if (!snapshot_dir_private(path))
        return;
    ts_snap s;
    ts_snap_init(&s);
    snprintf(s.source, sizeof s.source, "snapshot_on_oom");
    snprintf(s.consistency, sizeof s.consistency,
             "exact: taken by the process under its allocator's lock after the failed request");
    s.pid = (int)getpid();
    ts_snap_load_mappings(&s, 0);
    char err[512];
    int e = ts_snapshot_own(&s, &a, &h, 1);
    uint64_t cut = e ? 0 : ts_snap_bound(&s, TS_SNAP_MAX_BYTES);
    if (cut) {
        size_t used = strlen(s.consistency);
        snprintf(s.consistency + used, sizeof s.consistency - used,
                 "; history cut: %llu oldest events left out (%u MiB bound)",
                 (unsigned long long)cut, TS_SNAP_MAX_BYTES >> 20);
    }
    /* Written after the walk, outside the allocator's lock, and never synced: the failing
     * call waits for no disk. */
    if (e)
        ts_log("snapshot_on_oom: cannot build the snapshot: %s", strerror(e));
    else if (ts_snap_write_file(&s, path, false, err, sizeof err) != 0)
        ts_log("snapshot_on_oom: %s", err);
    else {
        __atomic_add_fetch(&oom_written, 1, __ATOMIC_RELAXED);
        if (cut)
            ts_log("snapshot_on_oom: the history was cut: its %llu oldest events left out to "
                   "keep the snapshot under %u MiB", (unsigned long long)cut,
                   TS_SNAP_MAX_BYTES >> 20);
        ts_log("memory snapshot written to %s (open it at https://pytorch.org/memory_viz)", path);
    }
    ts_snap_free(&s);
}
