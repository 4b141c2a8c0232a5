/* snapshot_on_oom: a PyTorch memory snapshot written by the process itself when an allocation
 * fails with out of memory (statspage/snapshot.h has the layout). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statspage/snapshot_own.h"
#include "shim/shim.h"

/* A program retrying in a loop must not fill the disk: the first failures get a file each (each at
 * most TS_SNAP_MAX_BYTES), the last of them is then replaced by each later failure's snapshot, so
 * that the failure that ends the run has one whatever came before it. */
#define OOM_SNAPSHOTS_MAX 8
/* A taken name gets a number (-2, -3, ...): so many tries before giving up. */
#define OOM_NAME_TRIES 100

/* Serialises the writers (threads failing together); fork re-creates it in the child
 * (ts_oom_snapshot_forget). Under it: */
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned oom_failures; /* out-of-memory failures seen */
static unsigned oom_written;  /* snapshots of the first OOM_SNAPSHOTS_MAX failures on the disk */
static char last_path[4096];  /* the last file (OOM_SNAPSHOTS_MAX-th): who wrote it, and which */
static dev_t last_dev;
static ino_t last_ino;

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

/* Is st a directory only this user (or root) can write, and not reached through a link? */
static bool dir_fit(const struct stat *st, char *why, size_t len, const char *dir)
{
    const char *what = !S_ISDIR(st->st_mode) ? "not a directory (or a symbolic link)"
                       : (st->st_mode & (S_IWGRP | S_IWOTH)) ? "writable by other users"
                       : st->st_uid != geteuid() && st->st_uid != 0 ? "another user's"
                       : NULL;
    if (what)
        snprintf(why, len, "%s is %s, so another user could plant a file under the snapshot's "
                 "name; use a directory of your own (e.g. $HOME/tessera-oom, created mode 0700 "
                 "if missing)", dir, what);
    return what == NULL;
}

/* The directory a snapshot goes to must be one other users cannot write: in a shared one (/tmp)
 * anyone can plant a file under the name a snapshot will have, and whoever loads "the snapshot"
 * then unpickles theirs. A missing last directory is created, mode 0700 (then it is this
 * user's). true when path's directory is fit; else why says so. */
static bool snapshot_dir_private(const char *path, char *why, size_t len)
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
        snprintf(why, len, "cannot create the directory %s: %s", dir, strerror(errno));
        return false;
    }
    if (lstat(dir, &st) != 0) {
        snprintf(why, len, "%s: %s", dir, strerror(errno));
        return false;
    }
    return dir_fit(&st, why, len, dir);
}

bool ts_oom_snapshot_check(const char *tpl, char *why, size_t len)
{
    char path[4096];
    if (!expand_template(tpl, 1, path, sizeof path)) {
        snprintf(why, len, "the path made from '%s' is too long", tpl);
        return false;
    }
    return snapshot_dir_private(path, why, len);
}

void ts_oom_snapshot_forget(void)
{
    pthread_mutex_init(&snap_lock, NULL);
}

/* Build this process's snapshot at the failure; 0 or an errno value. */
static int build(ts_snap *s, ts_allocator *a, ts_history *h)
{
    snprintf(s->source, sizeof s->source, "snapshot_on_oom");
    snprintf(s->consistency, sizeof s->consistency,
             "exact: taken by the process under its allocator's lock after the failed request");
    s->pid = (int)getpid();
    ts_snap_load_mappings(s, 0);
    int e = ts_snapshot_own(s, &a, &h, 1);
    uint64_t cut = e ? 0 : ts_snap_bound(s, TS_SNAP_MAX_BYTES);
    if (cut) {
        size_t used = strlen(s->consistency);
        snprintf(s->consistency + used, sizeof s->consistency - used,
                 "; history cut: %llu oldest events left out (%u MiB bound)",
                 (unsigned long long)cut, TS_SNAP_MAX_BYTES >> 20);
        ts_log_once(&oom_failures, "snapshot_on_oom: the history was cut: its %llu oldest "
                    "events left out to keep the snapshot under %u MiB",
                    (unsigned long long)cut, TS_SNAP_MAX_BYTES >> 20);
    }
    return e;
}

/* Write failure n's snapshot (under snap_lock). Returns true when a file has it. */
static bool write_one(const char *tpl, unsigned n, ts_allocator *a, ts_history *h)
{
    const bool last = n >= OOM_SNAPSHOTS_MAX;
    char path[4096], why[640];
    if (!expand_template(tpl, last ? OOM_SNAPSHOTS_MAX : n, path, sizeof path)) {
        ts_log_once(tpl, "snapshot_on_oom: the path made from '%s' is too long", tpl);
        return false;
    }
    if (!snapshot_dir_private(path, why, sizeof why)) {
        ts_log("snapshot_on_oom: not written: %s", why);
        return false;
    }
    ts_snap s;
    ts_snap_init(&s);
    int e = build(&s, a, h);
    struct stat st;
    /* The last file is replaced only while it is the one written here: a file put there since
     * (or its name taken before) is kept, and a free name is used instead. */
    bool mine = last && last_path[0] && lstat(last_path, &st) == 0 && S_ISREG(st.st_mode) &&
                st.st_dev == last_dev && st.st_ino == last_ino;
    char chosen[4096];
    if (e)
        snprintf(why, sizeof why, "cannot build the snapshot: %s", strerror(e));
    else if (mine)
        e = ts_snap_replace_file(&s, last_path, why, sizeof why);
    else
        e = ts_snap_write_new_file(&s, path, OOM_NAME_TRIES, chosen, sizeof chosen, why,
                                   sizeof why);
    ts_snap_free(&s);
    if (e) {
        if (n <= OOM_SNAPSHOTS_MAX)
            ts_log("snapshot_on_oom: %s", why);
        else /* a program failing in a loop on a full disk: said once */
            ts_log_once(last_path, "snapshot_on_oom: %s (said once)", why);
        return false;
    }
    if (!mine)
        ts_log("memory snapshot written to %s (open it at https://pytorch.org/memory_viz)", chosen);
    /* (a replacement is said once, when the last file was first written) */
    if (last && lstat(mine ? last_path : chosen, &st) == 0) {
        if (!mine)
            snprintf(last_path, sizeof last_path, "%s", chosen);
        last_dev = st.st_dev; /* a replacement is a new file: known by its new inode */
        last_ino = st.st_ino;
    }
    return true;
}

void ts_oom_snapshot(const char *tpl, ts_allocator *a, ts_history *h)
{
    pthread_mutex_lock(&snap_lock);
    unsigned n = ++oom_failures;
    if (write_one(tpl, n, a, h) && n <= OOM_SNAPSHOTS_MAX)
        oom_written++;
    if (n == OOM_SNAPSHOTS_MAX) {
        if (oom_written == OOM_SNAPSHOTS_MAX)
            ts_log("snapshot_on_oom: %d snapshots written; each later out of memory replaces the "
                   "last one, %s, so the failure that ends the run has its snapshot",
                   OOM_SNAPSHOTS_MAX, last_path);
        else
            ts_log("snapshot_on_oom: %u of %d snapshots written, %u not (said above); each "
                   "later out of memory is written to the last name", oom_written,
                   OOM_SNAPSHOTS_MAX, OOM_SNAPSHOTS_MAX - oom_written);
    }
    pthread_mutex_unlock(&snap_lock);
}
