/* tessera-stat: one request to a process over its control channel (shim/control.c), named in its
 * stats page, for the commands that act on a process (release, pause, resume). The process
 * itself checks who asks: its own user or root. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shim/shim.h"
#include "statspage/reader.h"
#include "tools/stat/stat.h"

static const char *prog = "tessera-stat";

/* Why the request could not be made or answered, in words. */
static const char *call_problem(ssize_t rc, uint64_t timeout_ns)
{
    static char waited[64];
    switch (rc) {
    case -ESRCH:
    case -ESTALE:
        return "it has exited";
    case -ETIMEDOUT:
        snprintf(waited, sizeof waited, "it did not answer within %llu s",
                 (unsigned long long)(timeout_ns / 1000000000u));
        return waited;
    case -EUSERS:
        return "it serves as many processes as it may already";
    case -EPERM:
        return "its channel is held by another process";
    default:
        return strerror(rc < 0 ? (int)-rc : EPROTO);
    }
}

int ts_stat_ask(const char *dir, int pid, const char *what, void *req, size_t len, void *ans,
                size_t cap, uint64_t timeout_ns)
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
    if (rc == 0 && timeout_ns)
        rc = ts_ctl_timeout(c, timeout_ns);
    unsigned nfds = 0;
    if (rc == 0)
        rc = ts_ctl_call(c, req, len, ans, cap, NULL, 0, &nfds);
    if (c)
        ts_ctl_close(c);
    if (rc == -EACCES) {
        fprintf(stderr, "%s: process %d refused: it runs as another user, and only its own user "
                        "or root may %s\n", prog, pid, what);
        return TS_STAT_REFUSED;
    }
    const ts_ctl_header *h = ans;
    const ts_ctl_header *q = req;
    if (rc < 0 || (size_t)rc != cap || h->type != q->type) {
        fprintf(stderr, "%s: cannot ask process %d to %s: %s\n", prog, pid, what,
                rc < 0 ? call_problem(rc, timeout_ns ? timeout_ns : 30000000000ull)
                       : "its answer is not one tessera gives");
        return TS_STAT_REFUSED;
    }
    return 0;
}
