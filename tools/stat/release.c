/* tessera-stat release PID [--keep SIZE]: torch.cuda.empty_cache() for a process of this user,
 * from another shell. The process gives back only free cached memory, as its own empty_cache
 * would (shim/lend.c). */
#include <inttypes.h>
#include <stdio.h>

#include "shim/lend.h"
#include "statspage/render.h"
#include "tools/stat/stat.h"

int ts_stat_release(const char *dir, int pid, uint64_t keep)
{
    ts_lend_request q = {.h = {.type = TS_LEND_RELEASE}, .bytes = keep};
    ts_lend_answer a;
    int rc = ts_stat_ask(dir, pid, "release its memory", &q, sizeof q, &a, sizeof a, 0);
    if (rc != 0)
        return rc;
    if (a.ndevices > TS_LEND_DEVICES) {
        fprintf(stderr, "tessera-stat: cannot ask process %d to release its cache: its answer is "
                        "not one tessera gives\n", pid);
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
