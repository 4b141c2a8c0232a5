/* tessera-stat snapshot PID -o FILE: a PyTorch memory snapshot of another process.
 *
 * Consistency: the segment map in a stats page is refreshed at segment changes and every 64
 * operations, so it can be behind the counters. Before reading it, this asks the owner for a
 * fresh one: it writes the current time into each slot's map_request word, and the owner
 * publishes a map at its next allocator operation, recording the request it served. If that
 * does not happen within the wait (the process is idle, or the page is not writable by this
 * user), the map is still exact when no operation happened since it was taken (its `ops`
 * equals the counters' num_ops); otherwise the snapshot says how many operations it is behind.
 */
#include "tools/stat/stat.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "statspage/collect.h"
#include "statspage/history_read.h"
#include "statspage/snapshot.h"
#include "statspage/symbols.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Ask every active slot for a fresh map. Returns the request value, 0 when the page cannot be
 * written (why says so). The page is opened again by its name: never blocking (a FIFO swapped
 * in would hang a writer-open), and only written when it is still the file that was read. */
static uint64_t request_maps(ts_page *pg, const char *path, char *why, size_t whylen)
{
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, whylen, "cannot ask for a fresh map (%s)", strerror(errno));
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != pg->dev ||
        (uint64_t)st.st_ino != pg->ino) {
        snprintf(why, whylen, "cannot ask for a fresh map (the page was replaced)");
        close(fd);
        return 0;
    }
    uint64_t req = now_ns();
    for (uint32_t i = 0; i < pg->hdr.slot_count; i++) {
        off_t at = (off_t)pg->hdr.header_size + (off_t)i * pg->hdr.slot_size +
                   (off_t)offsetof(tessera_page_slot_head, map_request);
        /* One aligned 8-byte store into the owner's shared mapping: the owner reads it with an
         * atomic load; it is the only word of the page a reader ever writes. */
        if (pwrite(fd, &req, sizeof req, at) != (ssize_t)sizeof req) {
            snprintf(why, whylen, "cannot ask for a fresh map (%s)", strerror(errno));
            close(fd);
            return 0;
        }
    }
    close(fd);
    return req;
}

/* allocator_settings from the configuration the page holds (ts_config_format's text, which the
 * parser reads back as it was); a text that does not parse (a forged page) keeps PyTorch's
 * defaults, and is still shown. */
static void settings_from_page(ts_snap *s, const char *conf)
{
    ts_config cfg;
    bool ok = ts_config_parse(&cfg, conf, "the page's configuration", TS_CONFIG_STRICT, NULL, NULL,
                              NULL) == 0;
    ts_snap_set_settings(s, ok ? &cfg : NULL, conf);
}

int ts_stat_snapshot(const char *dir, int pid, const char *out_path, double wait_s)
{
    const char *prog = "tessera-stat";
    ts_page pg;
    if (ts_stat_open_page(dir, pid, &pg) != 0)
        return 1;
    /* A page of a process that is gone shows its last layout: said so, never "exact". */
    char owner_why[192];
    int owner = ts_page_judge(&pg, TS_PAGE_OK, pid, owner_why, sizeof owner_why);
    bool gone = ts_owner_is_stale(owner);
    if (owner != TS_OWNER_LIVE && !gone) {
        fprintf(stderr, "%s: %s: %s\n", prog, pg.path, owner_why);
        ts_page_close(&pg);
        return 1;
    }
    tessera_page_slot_head *head = malloc(sizeof *head);
    tessera_page_segment *segs = calloc(TESSERA_PAGE_MAX_SEGMENTS, sizeof *segs);
    tessera_page_block *blocks = calloc(TESSERA_PAGE_MAX_BLOCKS, sizeof *blocks);
    ts_snap s;
    ts_snap_init(&s);
    int rc = 0;
    if (!head || !segs || !blocks) {
        fprintf(stderr, "%s: out of memory\n", prog);
        rc = 1;
        goto done;
    }

    char why[96] = "";
    uint64_t req = gone ? 0 : request_maps(&pg, pg.path, why, sizeof why);
    const uint64_t deadline = now_ns() + (uint64_t)(wait_s * 1e9);
    snprintf(s.source, sizeof s.source, "tessera-stat");
    settings_from_page(&s, pg.hdr.config);
    s.symbols = ts_symbols_create(); /* frames named here, at read time (NULL: offsets) */
    s.pid = pid;
    ts_snap_load_mappings(&s, pid);
    size_t nslots = 0;
    char consistency[320] = "";
    for (uint32_t i = 0; i < pg.hdr.slot_count && rc == 0; i++) {
        int r;
        /* Bounded wait for the owner to serve the request at its next operation. */
        for (;;) {
            r = ts_page_snapshot(&pg, i, head, segs, blocks);
            if (r != TS_PAGE_OK || !req || head->map.request_served >= req || now_ns() >= deadline)
                break;
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        if (r == TS_PAGE_EEMPTY)
            continue;
        if (r != TS_PAGE_OK) {
            fprintf(stderr, "%s: %s: slot %" PRIu32 ": %s\n", prog, pg.path, i, pg.error);
            rc = 1;
            break;
        }
        uint64_t behind = (uint64_t)head->stats.num_ops - head->map.ops;
        if (gone)
            snprintf(consistency, sizeof consistency,
                     "last state: %s; this is the last block layout its page recorded%s",
                     owner_why, behind ? " (older than its last counters)" : "");
        else if (req && head->map.request_served >= req)
            snprintf(consistency, sizeof consistency,
                     "exact: the process published its block layout for this request");
        else if (behind == 0)
            snprintf(consistency, sizeof consistency,
                     "exact: no allocator operation since the map was taken (%s)",
                     req ? "the process stayed idle" : why);
        else
            snprintf(consistency, sizeof consistency,
                     "stale: the block layout is %" PRIu64 " operations older than the counters (%s)",
                     behind, req ? "the process did not answer in time" : why);
        if (head->map.flags & TESSERA_MAP_TRUNCATED)
            snprintf(consistency + strlen(consistency), sizeof consistency - strlen(consistency),
                     "; truncated: more segments or blocks than the page holds");
        if (ts_snap_add_page_slot(&s, head, segs, blocks) != 0) {
            fprintf(stderr, "%s: out of memory\n", prog);
            rc = 1;
            break;
        }
        ts_history_copy c;
        char err[600];
        int e = ts_history_read(dir, pid, i, pg.uid, &c, err, sizeof err);
        if (e == 0) {
            uint64_t dropped = c.dropped, cut = c.cut;
            /* cut at the layout's instant: events after the map are not in the snapshot */
            uint64_t past = 0;
            int at = ts_snap_add_page_trace(&s, head, &c, &past);
            if (at < 0)
                ts_history_copy_free(&c);
            else if (at == 1 && strncmp(consistency, "exact", 5) == 0)
                snprintf(consistency, sizeof consistency,
                         "not exact: the history may run past the block layout (a page without "
                         "the history mark)");
            if (cut)
                printf("device %d: %" PRIu64 " older events of the history ring not read (at most "
                       "%u per device)\n", head->device, cut, TS_HISTORY_COPY_MAX_EVENTS);
            if (dropped > cut)
                printf("device %d: %" PRIu64 " older events no longer in the history ring\n",
                       head->device, dropped - cut);
        } else if (e != ENOENT) {
            fprintf(stderr, "%s: %s (no device_traces for device %d)\n", prog, err, head->device);
        }
        printf("device %d: %s\n", head->device, consistency);
        nslots++;
    }
    if (rc == 0 && nslots == 0) {
        fprintf(stderr, "%s: pid %d has no device slot in use yet\n", prog, pid);
        rc = 1;
    }
    if (rc == 0) {
        snprintf(s.consistency, sizeof s.consistency, "%s", consistency);
        uint64_t cut = ts_snap_bound(&s, TS_SNAP_MAX_BYTES);
        if (cut) {
            printf("history cut: its %" PRIu64 " oldest events left out to keep the snapshot under "
                   "%u MiB\n", cut, TS_SNAP_MAX_BYTES >> 20);
            size_t used = strlen(s.consistency);
            snprintf(s.consistency + used, sizeof s.consistency - used,
                     "; history cut: %" PRIu64 " oldest events left out (%u MiB bound)", cut,
                     TS_SNAP_MAX_BYTES >> 20);
        }
        char err[600];
        if (ts_snap_write_file(&s, out_path, true, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            rc = 1;
        } else {
            size_t nev = 0;
            for (size_t i = 0; i < s.ntraces; i++)
                nev += s.traces[i].nevents;
            printf("snapshot of pid %d written to %s: %zu segments, %zu blocks, %zu events%s\n",
                   pid, out_path, s.nsegs, s.nblocks, nev,
                   s.ntraces ? "" : " (no history: run it with history_events:N)");
            if (gone)
                printf("note: process %d is gone: the snapshot holds the last state its page "
                       "recorded\n", pid);
        }
    }
done:
    ts_symbols_free(s.symbols);
    ts_snap_free(&s);
    free(head);
    free(segs);
    free(blocks);
    ts_page_close(&pg);
    return rc;
}
