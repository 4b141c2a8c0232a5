/* tessera-stat pause PID and resume PID: a process of this user copies its device memory to host
 * memory and gives the pages back, every address kept (shim/pause.c); then maps pages at the
 * same addresses again and copies the bytes back. Meanwhile its CUDA calls wait. */
#include <inttypes.h>
#include <stdio.h>

#include "shim/pause.h"
#include "statspage/render.h"
#include "tools/stat/stat.h"

/* A pause of many GiB takes seconds over PCIe: the answer is waited for this long. */
#define PAUSE_CALL_NS (600ull * 1000000000ull)

int ts_stat_pause(const char *dir, int pid, bool resume)
{
    const char *verb = resume ? "resume" : "pause";
    ts_pause_request q = {.h = {.type = resume ? TS_RESUME_ASK : TS_PAUSE_ASK}};
    ts_pause_answer a;
    int rc = ts_stat_ask(dir, pid, resume ? "resume it" : "pause it", &q, sizeof q, &a, sizeof a,
                         PAUSE_CALL_NS);
    if (rc != 0)
        return rc;
    if (a.ndevices > TS_PAUSE_DEVICES) {
        fprintf(stderr, "tessera-stat: cannot ask process %d to %s: its answer is not one "
                        "tessera gives\n", pid, verb);
        return TS_STAT_REFUSED;
    }
    for (uint32_t i = 0; i < a.ndevices; i++) {
        const ts_pause_device *d = &a.dev[i];
        char s[32], g[32], r[32];
        if (d->status != TS_PAUSE_OK)
            printf("pid %d: device %" PRId32 ": refused: %s\n", pid, d->device,
                   ts_pause_why(d->status));
        else if (resume)
            printf("pid %d: device %" PRId32 ": resumed: %s copied back in %.1f ms\n", pid,
                   d->device, ts_format_bytes(s, sizeof s, d->saved), (double)d->time_us / 1e3);
        else
            printf("pid %d: device %" PRId32 ": paused: %s copied to host memory, %s given back "
                   "to the device, %s kept reserved, in %.1f ms\n", pid, d->device,
                   ts_format_bytes(s, sizeof s, d->saved), ts_format_bytes(g, sizeof g, d->given),
                   ts_format_bytes(r, sizeof r, d->reserved), (double)d->time_us / 1e3);
    }
    if (a.h.status != TS_PROC_OK) {
        fprintf(stderr, "tessera-stat: process %d refused to %s: it %s\n", pid, verb,
                ts_proc_why(a.h.status));
        return TS_STAT_REFUSED;
    }
    if (a.ndevices == 0)
        printf("pid %d: %s (no device in use)\n", pid, resume ? "resumed" : "paused");
    return 0;
}
