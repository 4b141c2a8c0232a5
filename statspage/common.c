/* What every side of the stats page shares (statspage/common.h). */
#include "statspage/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "tessera/stats_page.h"

const char *ts_statspage_dir(void)
{
    const char *d = getenv(TESSERA_PAGE_DIR_ENV);
    return (d && *d) ? d : TESSERA_PAGE_DEFAULT_DIR;
}

void ts_msg_set(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}
