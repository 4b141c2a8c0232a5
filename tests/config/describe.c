/* config-describe: print ts_config_describe (the key table) or, with a configuration string,
 * the effective configuration it gives. Used to regenerate docs/configuration.md. */
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"

static void warn(void *user, const char *message)
{
    (void)user;
    fprintf(stderr, "tessera: %s\n", message);
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: %s [CONFIG]\n  no argument: describe every key\n  CONFIG: parse it "
                        "(strict) and print the effective configuration\n", argv[0]);
        return 2;
    }
    if (argc == 2) {
        ts_config cfg;
        ts_config_diag diag;
        if (ts_config_parse(&cfg, argv[1], "CONFIG", TS_CONFIG_STRICT, &diag, warn, NULL) != 0) {
            fprintf(stderr, "tessera: %s\n", diag.message);
            return 1;
        }
        char buf[4096];
        ts_config_format(&cfg, buf, sizeof buf);
        printf("%s\n", buf);
        return 0;
    }
    size_t n = ts_config_describe(NULL, 0);
    char *buf = malloc(n + 1);
    if (!buf)
        return 1;
    ts_config_describe(buf, n + 1);
    fputs(buf, stdout);
    free(buf);
    return 0;
}
