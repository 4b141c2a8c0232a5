/* tessera-stat release PID [--keep SIZE]: torch.cuda.empty_cache() for a process of this user,
 * from another shell. The request goes over the process's control channel (shim/control.c),
 * named in its stats page; the process itself checks who asks (its own user or root) and gives
 * back only free cached memory, as its own empty_cache would (shim/lend.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shim/lend.h"
#include "statspage/reader.h"
#include "statspage/render.h"
#include "tools/stat/stat.h"

static const char *prog = "tessera-stat";

/* Why the request could not be made or answered, in words. */
static const char *call_problem(ssize_t rc)
{
    switch (rc) {
    case -ESRCH:
    case -ESTALE:
        return "it has exited";
    case -ETIMEDOUT:
        return "it did not answer within 30 s";
    case -EUSERS:
        return "it serves as many processes as it may already";
    case -EPERM:
        return "its channel is held by another process";
    default:
        return strerror(rc < 0 ? (int)-rc : EPROTO);
    }
}

int ts_stat_release(const char *dir, int pid, uint64_t keep)
{
    ts_page pg;
    if (ts_stat_open_page(dir, pid, &pg) != 0)
        return 1;
    ts_ctl_address addr = {.pid = pid, .start = pg.hdr.start_time_ticks,
                           .secret = pg.hdr.control_secret};
    uint32_t layout = pg.hdr.layout_version;
    ts_page_close(&pg);
    if (!addr.secret) {
        fprintf(stderr, "%s: process %d has no control channel to ask (%s)\n", prog, pid,
                layout < 3 ? "an older tessera" : "its stats page names none");
        return TS_STAT_REFUSED;
    }
    ts_ctl_client *c = NULL;
    ssize_t rc = ts_ctl_connect(&addr, &c);
    ts_lend_request q = {.h = {.type = TS_LEND_RELEASE}, .bytes = keep};
    ts_lend_answer a;
    unsigned nfds = 0;
    if (rc == 0)
        rc = ts_ctl_call(c, &q, sizeof q, &a, sizeof a, NULL, 0, &nfds);
    if (c)
        ts_ctl_close(c);
    if (rc == -EACCES) {
        fprintf(stderr, "%s: process %d refused: it runs as another user, and only its own user "
                        "or root may release its memory\n", prog, pid);
        return TS_STAT_REFUSED;
    }
    if (rc < 0 || rc != (ssize_t)sizeof a || a.h.type != TS_LEND_RELEASE ||
        a.ndevices > TS_LEND_DEVICES) {
        fprintf(stderr, "%s: cannot ask process %d to release its cache: %s\n", prog, pid,
                rc < 0 ? call_problem(rc) : "its answer is not one tessera gives");
        return TS_STAT_REFUSED;
    }
    if (a.ndevices == 0)
        printf("pid %d: no device in use, nothing to release\n", pid);
    for (uint32_t i = 0; i < a.ndevices; i++) {
        char g[32], r[32], al[32];
        printf("pid %d: device %" PRId32 ": released %s; now %s reserved, %s allocated\n", pid,
               a.dev[i].device, ts_format_bytes(g, sizeof g, a.dev[i].given),
               ts_format_bytes(r, sizeof r, a.dev[i].reserved),
               ts_format_bytes(al, sizeof al, a.dev[i].allocated));
    }
    return 0;
}
