/* The other tessera processes on one device (statspage/neighbours.h). */
#include "statspage/neighbours.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "statspage/reader.h"

static uint64_t cached_of(const ts_neighbour *n)
{
    return n->reserved > n->allocated ? n->reserved - n->allocated : 0;
}

static int most_cached_first(const void *x, const void *y)
{
    uint64_t a = cached_of(x), b = cached_of(y);
    return a < b ? 1 : a > b ? -1 : 0;
}

/* Read the page of pid into *out when it is a live neighbour on the device. */
static bool read_neighbour(const char *dir, int pid, const uint8_t uuid[16], ts_neighbour *out)
{
    ts_page pg;
    bool found = false;
    ts_page_init(&pg);
    pg.retries = 1; /* a slot being written is passed over: this is an out-of-memory path */
    if (ts_page_open_pid(&pg, dir, pid) != TS_PAGE_OK ||
        ts_owner_is_stale(ts_page_owner_state(&pg.hdr, NULL, 0))) {
        ts_page_close(&pg);
        return false;
    }
    *out = (ts_neighbour){.pid = pid, .uid = pg.uid, .start_ticks = pg.hdr.start_time_ticks,
                          .secret = pg.hdr.control_secret};
    memcpy(out->command, pg.hdr.cmdline, sizeof out->command - 1); /* validated: terminated */
    out->command[sizeof out->command - 1] = '\0';
    tessera_page_slot_head head;
    for (uint32_t i = 0; i < pg.hdr.slot_count; i++) {
        if (ts_page_snapshot(&pg, i, &head, NULL, NULL) != TS_PAGE_OK ||
            memcmp(head.device_uuid, uuid, sizeof head.device_uuid) != 0)
            continue;
        found = true;
        int64_t r = head.stats.reserved_bytes[TESSERA_POOL_ALL].current;
        int64_t a = head.stats.allocated_bytes[TESSERA_POOL_ALL].current;
        out->reserved += r > 0 ? (uint64_t)r : 0;
        out->allocated += a > 0 ? (uint64_t)a : 0;
    }
    ts_page_close(&pg);
    return found;
}

size_t ts_neighbours_find(const char *dir, const uint8_t uuid[16], int self, uint32_t uid,
                          bool any_user, ts_neighbour *out, size_t max)
{
    static const uint8_t unknown[16];
    if (!dir)
        dir = ts_statspage_dir();
    if (max == 0 || memcmp(uuid, unknown, sizeof unknown) == 0)
        return 0; /* a device without a UUID is no device another process can be found on */
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0, looked = 0;
    struct dirent *e;
    while (n < max && looked < TS_NEIGHBOURS_PAGES && (e = readdir(d))) {
        int pid = ts_page_name_pid(e->d_name);
        struct stat st;
        if (pid <= 0 || pid == self)
            continue;
        /* another user's page is not even opened unless every user's processes are asked */
        if (!any_user && (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                          st.st_uid != uid))
            continue;
        looked++;
        if (read_neighbour(dir, pid, uuid, &out[n]) && (any_user || out[n].uid == uid))
            n++;
    }
    closedir(d);
    qsort(out, n, sizeof *out, most_cached_first);
    return n;
}
