/* tessera-stat --serve without libmicrohttpd: say how to get it. */
#include <stdio.h>

#include "tools/stat/stat.h"

int ts_stat_serve(const char *dir, const char *listen, const char *labels)
{
    (void)dir;
    (void)listen;
    (void)labels;
    fprintf(stderr, "tessera-stat: --serve needs libmicrohttpd, which this build was made "
                    "without (install libmicrohttpd-dev and rebuild; scripts/setup.sh does)\n");
    return 1;
}
