/* Listing and collecting stale pages (statspage/collect.h). A page is removed only after it was
 * moved aside and judged stale again as exactly that file, so a live page is never removed. */
#include "statspage/collect.h"

#include "tessera/history.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Files without an identity (creation interrupted) are only collected once this old. */
#define TS_NO_IDENTITY_GRACE_S 2

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int ts_page_list(const char *dir, int **pids, size_t *n)
{
    *pids = NULL;
    *n = 0;
    if (!dir)
        dir = ts_statspage_dir();
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    size_t cap = 0, cnt = 0;
    int *v = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int pid = ts_page_name_pid(de->d_name);
        if (pid <= 0)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            int *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return ENOMEM;
            }
            v = nv;
            cap = ncap;
        }
        v[cnt++] = pid;
    }
    closedir(d);
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_int);
    *pids = v;
    *n = cnt;
    return 0;
}

/* What an interrupted creation leaves, and nothing else: a regular file of mode 0000 (a page
 * gets its mode only once published) that is empty or exactly layout 1's size. */
static bool interrupted_creation(const ts_page *pg)
{
    const uint64_t total =
        (uint64_t)TESSERA_PAGE_HEADER_SIZE + (uint64_t)TESSERA_PAGE_SLOTS * TESSERA_PAGE_SLOT_SIZE;
    return pg->ino != 0 && (pg->mode & 07777) == 0 && (pg->size == 0 || pg->size == total);
}

int ts_page_judge(ts_page *pg, int status, int pid, char *why, size_t whylen)
{
    if (status == TS_PAGE_ENOENT) {
        ts_msg_set(why, whylen, "no such page");
        return TS_OWNER_UNKNOWN;
    }
    if (pg->have_identity) {
        int owner = ts_page_owner_state(&pg->hdr, why, whylen);
        if (ts_owner_is_stale(owner))
            pg->retries = 1; /* nobody writes a dead process's page: a busy slot stays busy */
        return owner;
    }
    if (interrupted_creation(pg)) {
        if (time(NULL) - pg->mtime < TS_NO_IDENTITY_GRACE_S) {
            ts_msg_set(why, whylen, "being created");
            return TS_OWNER_UNKNOWN;
        }
        if (ts_pid_is_gone(pid)) {
            ts_msg_set(why, whylen, "creation never finished and process %d is gone", pid);
            return TS_OWNER_DEAD;
        }
        ts_msg_set(why, whylen, "not published yet; process %d is running", pid);
        return TS_OWNER_UNKNOWN;
    }
    ts_msg_set(why, whylen, "not a readable tessera page");
    return TS_OWNER_UNKNOWN;
}

/* Judge the file now at path (moved aside) as the page of pid, identical to (dev, ino). */
static int still_stale(const char *path, int pid, uint64_t dev, uint64_t ino, char *why,
                       size_t whylen)
{
    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_as(&pg, path, pid);
    int stale = 0;
    if (st != TS_PAGE_ENOENT && pg.dev == dev && pg.ino == ino)
        stale = ts_owner_is_stale(ts_page_judge(&pg, st, pid, why, whylen));
    else
        ts_msg_set(why, whylen, "replaced while being collected");
    ts_page_close(&pg);
    return stale;
}

/* Put a file moved aside back under its name, never over a newer file. */
static int restore_name(const char *aside, const char *path)
{
    if (renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return errno;
    if (link(aside, path) != 0)
        return errno;
    unlink(aside);
    return 0;
}

static int collect_one(const char *dir, const char *name, int pid, int *removed,
                       ts_gc_report_fn report, void *user)
{
    char path[PATH_MAX], aside[PATH_MAX], why[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = snprintf(aside, sizeof aside, "%s/.tessera-gc.%d.%d", dir, (int)getpid(), pid);
    if (n < 0 || (size_t)n >= sizeof aside)
        return ENAMETOOLONG;

    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_as(&pg, path, pid);
    int stale = ts_owner_is_stale(ts_page_judge(&pg, st, pid, why, sizeof why));
    uint64_t dev = pg.dev, ino = pg.ino;
    ts_page_close(&pg);
    if (!stale)
        return 0;
    /* Move it aside (atomic), then judge exactly that inode again: a live page can never be
     * removed, even if its pid's new owner replaced the file in between. */
    if (rename(path, aside) != 0) {
        int e = errno;
        if (e != ENOENT && report) {
            char msg[320];
            snprintf(msg, sizeof msg, "%s; cannot remove it: %s", why, strerror(e));
            report(user, name, pid, 0, msg);
        }
        return 0;
    }
    char why2[256];
    if (still_stale(aside, pid, dev, ino, why2, sizeof why2) && unlink(aside) == 0) {
        (*removed)++;
        if (report)
            report(user, name, pid, 1, why);
        return 0;
    }
    int e = restore_name(aside, path);
    if (report) {
        char msg[PATH_MAX + 320];
        if (e)
            snprintf(msg, sizeof msg, "changed while being collected; left as %s (%s)", aside,
                     strerror(e));
        else
            snprintf(msg, sizeof msg, "changed while being collected (%s); left in place", why2);
        report(user, name, pid, 0, msg);
    }
    return 0;
}

/* --- history rings ------------------------------------------------------------------------ */

/* pid of a ring's name, tessera.<pid>.history.<slot> (decimal, no leading zeros, nothing after),
 * with the slot in *slot; 0 for any other name. */
static int ring_name_pid(const char *name, int *slot)
{
    const size_t pre = strlen(TESSERA_PAGE_FILE_PREFIX), infix = strlen(TESSERA_HISTORY_FILE_INFIX);
    if (strncmp(name, TESSERA_PAGE_FILE_PREFIX, pre) != 0)
        return 0;
    const char *p = name + pre, *dot = strchr(p, '.');
    if (!dot || strncmp(dot, TESSERA_HISTORY_FILE_INFIX, infix) != 0)
        return 0;
    char page[32];
    int n = snprintf(page, sizeof page, TESSERA_PAGE_FILE_PREFIX "%.*s", (int)(dot - p), p);
    int pid = n > 0 && (size_t)n < sizeof page ? ts_page_name_pid(page) : 0;
    const char *s = dot + infix;
    char *end;
    errno = 0;
    long v = (*s >= '0' && *s <= '9' && (s[0] != '0' || s[1] == '\0')) ? strtol(s, &end, 10) : -1;
    if (pid <= 0 || v < 0 || v >= TESSERA_PAGE_SLOTS || errno || *end)
        return 0;
    *slot = (int)v;
    return pid;
}

/* Is the file at path (lstat'ed into st) a history ring of pid's slot: its header says so, or
 * it is all zeros (a creation that never published its magic)? Files that merely have a ring's
 * name are left alone. */
static bool ring_content_is(const char *path, const struct stat *st, int pid, int slot)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return false;
    struct stat fst;
    tessera_history_header h;
    bool ok = fstat(fd, &fst) == 0 && fst.st_dev == st->st_dev && fst.st_ino == st->st_ino &&
              pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
    close(fd);
    if (!ok)
        return false;
    if (h.magic == TESSERA_HISTORY_MAGIC)
        return h.pid == pid && h.slot == (uint32_t)slot;
    static const tessera_history_header zero;
    return memcmp(&h, &zero, sizeof h) == 0;
}

/* Is the ring at path (already lstat'ed into st) one this collector may remove: a regular file of
 * the collecting user (any user's for root), whose process has no page and is gone? */
static bool ring_is_stale(const char *dir, int pid, const struct stat *st, char *why, size_t len)
{
    if (!S_ISREG(st->st_mode) || (st->st_uid != geteuid() && geteuid() != 0))
        return false;
    char page[PATH_MAX];
    struct stat pst;
    snprintf(page, sizeof page, "%s/" TESSERA_PAGE_FILE_PREFIX "%d", dir, pid);
    if (lstat(page, &pst) == 0 || errno != ENOENT || !ts_pid_is_gone(pid))
        return false;
    ts_msg_set(why, len, "history ring of process %d, which is gone and has no page", pid);
    return true;
}

static void collect_ring(const char *dir, const char *name, int pid, int slot, int *removed,
                         ts_gc_report_fn report, void *user)
{
    char path[PATH_MAX], aside[PATH_MAX], why[160];
    struct stat st, ast;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) != 0 || !ring_is_stale(dir, pid, &st, why, sizeof why) ||
        !ring_content_is(path, &st, pid, slot))
        return;
    int n = snprintf(aside, sizeof aside, "%s/.tessera-gc.%d.%d" TESSERA_HISTORY_FILE_INFIX "%d",
                     dir, (int)getpid(), pid, slot);
    if (n < 0 || (size_t)n >= sizeof aside || rename(path, aside) != 0)
        return;
    /* the same file, and still stale: a process that took this pid since has not made it its */
    if (lstat(aside, &ast) == 0 && ast.st_dev == st.st_dev && ast.st_ino == st.st_ino &&
        ring_is_stale(dir, pid, &ast, why, sizeof why) &&
        ring_content_is(aside, &ast, pid, slot) && unlink(aside) == 0) {
        (*removed)++;
        if (report)
            report(user, name, pid, 1, why);
        return;
    }
    (void)restore_name(aside, path);
}

/* --- collectors that died half-way ------------------------------------------------------------ */

/* A file moved aside by a collector that died before finishing: .tessera-gc.<gcpid>.<pid> (a
 * page), .tessera-gc.<gcpid>.<pid>.history.<slot> (a ring). rings: handle the rings' (which
 * are judged only once every page was), else the pages'. */
static void recover_aside(const char *dir, const char *name, bool rings, int *removed,
                          ts_gc_report_fn report, void *user)
{
    int gcpid = 0, pid = 0, slot = 0;
    char tail;
    int got = sscanf(name, ".tessera-gc.%d.%d%c", &gcpid, &pid, &tail);
    if ((got != 2 && got != 3) || gcpid <= 0 || pid <= 0 || rings != (got == 3))
        return;
    if (gcpid == (int)getpid() || !ts_pid_is_gone(gcpid))
        return;
    if (got == 3) {
        char ring[64];
        const char *dot = strchr(name + strlen(".tessera-gc."), '.');
        dot = dot ? strchr(dot + 1, '.') : NULL;
        int n = dot ? snprintf(ring, sizeof ring, TESSERA_PAGE_FILE_PREFIX "%d%s", pid, dot) : -1;
        if (n <= 0 || (size_t)n >= sizeof ring || ring_name_pid(ring, &slot) != pid)
            return;
        char aside[PATH_MAX], path[PATH_MAX], why[160];
        struct stat st;
        snprintf(aside, sizeof aside, "%s/%s", dir, name);
        snprintf(path, sizeof path, "%s/%s", dir, ring);
        if (lstat(aside, &st) != 0)
            return;
        if (ring_is_stale(dir, pid, &st, why, sizeof why) &&
            ring_content_is(aside, &st, pid, slot)) {
            if (unlink(aside) == 0) {
                (*removed)++;
                if (report)
                    report(user, ring, pid, 1, why);
            }
        } else if (S_ISREG(st.st_mode)) {
            (void)restore_name(aside, path);
        }
        return;
    }
    char aside[PATH_MAX], path[PATH_MAX], why[256];
    snprintf(aside, sizeof aside, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d", dir, pid);
    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_as(&pg, aside, pid);
    int stale = ts_owner_is_stale(ts_page_judge(&pg, st, pid, why, sizeof why));
    ts_page_close(&pg);
    if (stale) {
        if (unlink(aside) == 0) {
            (*removed)++;
            if (report) {
                char page[32];
                snprintf(page, sizeof page, TESSERA_PAGE_FILE_PREFIX "%d", pid);
                report(user, page, pid, 1, why);
            }
        }
    } else if (st != TS_PAGE_ENOENT) {
        (void)restore_name(aside, path);
    }
}

int ts_page_gc(const char *dir, ts_gc_report_fn report, void *user)
{
    if (!dir)
        dir = ts_statspage_dir();
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    size_t cap = 0, cnt = 0;
    char (*names)[256] = NULL;
    struct dirent *de;
    int slot;
    while ((de = readdir(d)) != NULL) {
        if (ts_page_name_pid(de->d_name) <= 0 && ring_name_pid(de->d_name, &slot) <= 0 &&
            strncmp(de->d_name, ".tessera-gc.", 12) != 0)
            continue;
        if (strlen(de->d_name) >= 256)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            void *nv = realloc(names, ncap * sizeof *names);
            if (!nv) {
                free(names);
                closedir(d);
                return -ENOMEM;
            }
            names = nv;
            cap = ncap;
        }
        snprintf(names[cnt++], sizeof names[0], "%s", de->d_name);
    }
    closedir(d);
    int removed = 0;
    for (size_t i = 0; i < cnt; i++) { /* pages (and half-collected pages) first */
        int pid = ts_page_name_pid(names[i]);
        if (pid > 0)
            collect_one(dir, names[i], pid, &removed, report, user);
        else if (ring_name_pid(names[i], &slot) <= 0)
            recover_aside(dir, names[i], false, &removed, report, user);
    }
    /* then the rings their pages leave behind: a ring is judged by whether its page is still
     * there, so only once every page had its turn */
    for (size_t i = 0; i < cnt; i++) {
        int pid = ring_name_pid(names[i], &slot);
        if (pid > 0)
            collect_ring(dir, names[i], pid, slot, &removed, report, user);
        else if (ts_page_name_pid(names[i]) <= 0)
            recover_aside(dir, names[i], true, &removed, report, user);
    }
    free(names);
    return removed;
}

int ts_page_collect_pid(const char *dir, int pid, ts_gc_report_fn report, void *user)
{
    if (!dir)
        dir = ts_statspage_dir();
    if (pid <= 0)
        return -EINVAL;
    char name[64];
    int removed = 0;
    snprintf(name, sizeof name, TESSERA_PAGE_FILE_PREFIX "%d", pid);
    int e = collect_one(dir, name, pid, &removed, report, user);
    if (e)
        return -e;
    for (int slot = 0; slot < (int)TESSERA_PAGE_SLOTS; slot++) {
        snprintf(name, sizeof name, TESSERA_PAGE_FILE_PREFIX "%d" TESSERA_HISTORY_FILE_INFIX "%d",
                 pid, slot);
        collect_ring(dir, name, pid, slot, &removed, report, user);
    }
    return removed;
}
