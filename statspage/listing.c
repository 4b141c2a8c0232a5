/* Every page of a directory read for output, with bounded work (statspage/listing.h). */
#include "statspage/listing.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "statspage/collect.h"

/* Bounded work per listing (a scrape, a table): whatever a directory holds, at most this many
 * pages are read and this many slots kept, per user owning the page files and overall. A page
 * past a bound is listed as skipped, unread. Reading one page is bounded by the reader (slots,
 * retries, its user's retry budget). */
#define LOAD_MAX_PAGES 4096
#define LOAD_MAX_SLOTS 2048
#define LOAD_USER_MAX_PAGES 1024
#define LOAD_USER_MAX_SLOTS 512

typedef struct user_tally {
    uint32_t uid;
    unsigned pages, slots;
} user_tally;

static user_tally *tally_of(user_tally *t, size_t *nt, uint32_t uid)
{
    for (size_t i = 0; i < *nt; i++)
        if (t[i].uid == uid)
            return &t[i];
    t[*nt] = (user_tally){uid, 0, 0};
    return &t[(*nt)++];
}

static void view_skip(ts_proc_view *v, int pid, uint32_t uid, const char *what, unsigned bound,
                      bool user)
{
    ts_proc_view_free(v);
    memset(v, 0, sizeof *v);
    v->pid = pid;
    v->uid = uid;
    v->status = TS_PAGE_ESKIPPED;
    v->owner = TS_OWNER_UNKNOWN;
    snprintf(v->owner_why, sizeof v->owner_why, "not read");
    if (user)
        snprintf(v->error, sizeof v->error,
                 "not read: uid %" PRIu32 " has more than %u %s here (the bound per user and listing)",
                 uid, bound, what);
    else
        snprintf(v->error, sizeof v->error,
                 "not read: more than %u %s here (the bound per listing)", bound, what);
}

int ts_views_load_all(const char *dir, ts_views *out)
{
    int *pids = NULL;
    size_t n = 0;
    out->v = NULL;
    out->n = 0;
    int e = ts_page_list(dir, &pids, &n);
    if (e)
        return e;
    user_tally *tally = NULL;
    if (n) {
        out->v = calloc(n, sizeof *out->v);
        tally = calloc(n, sizeof *tally);
        if (!out->v || !tally) {
            free(out->v);
            free(tally);
            free(pids);
            out->v = NULL;
            return ENOMEM;
        }
    }
    size_t nt = 0;
    unsigned pages = 0, slots = 0;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        struct stat st;
        uint32_t uid = 0;
        snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d", dir, pids[i]);
        if (lstat(path, &st) == 0)
            uid = (uint32_t)st.st_uid;
        user_tally *u = tally_of(tally, &nt, uid);
        ts_proc_view *v = &out->v[i];
        if (u->pages >= LOAD_USER_MAX_PAGES) {
            view_skip(v, pids[i], uid, "pages", LOAD_USER_MAX_PAGES, true);
            continue;
        }
        if (pages >= LOAD_MAX_PAGES) {
            view_skip(v, pids[i], uid, "pages", LOAD_MAX_PAGES, false);
            continue;
        }
        if (u->slots >= LOAD_USER_MAX_SLOTS || slots >= LOAD_MAX_SLOTS) { /* not even opened */
            bool user = u->slots >= LOAD_USER_MAX_SLOTS;
            view_skip(v, pids[i], uid, "slots in use", user ? LOAD_USER_MAX_SLOTS : LOAD_MAX_SLOTS,
                      user);
            continue;
        }
        u->pages++;
        pages++;
        ts_proc_view_load(v, dir, pids[i], true);
        if (u->slots + v->nslots > LOAD_USER_MAX_SLOTS)
            view_skip(v, pids[i], uid, "slots in use", LOAD_USER_MAX_SLOTS, true);
        else if (slots + v->nslots > LOAD_MAX_SLOTS)
            view_skip(v, pids[i], uid, "slots in use", LOAD_MAX_SLOTS, false);
        else {
            u->slots += v->nslots;
            slots += v->nslots;
        }
    }
    out->n = n;
    free(tally);
    free(pids);
    return 0;
}

void ts_views_free(ts_views *vs)
{
    for (size_t i = 0; i < vs->n; i++)
        ts_proc_view_free(&vs->v[i]);
    free(vs->v);
    vs->v = NULL;
    vs->n = 0;
}
