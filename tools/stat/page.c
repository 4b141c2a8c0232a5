/* tessera-stat: one process's page opened for a command that acts on it (snapshot, release). */
#include <stdio.h>

#include "tools/stat/stat.h"

int ts_stat_open_page(const char *dir, int pid, ts_page *pg)
{
    ts_page_init(pg);
    if (ts_page_open_pid(pg, dir, pid) == TS_PAGE_OK)
        return 0;
    fprintf(stderr, "tessera-stat: %s/" TESSERA_PAGE_FILE_PREFIX "%d: %s\n", dir, pid, pg->error);
    ts_page_close(pg);
    return 1;
}
