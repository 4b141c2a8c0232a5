/* Named policies: a whole configuration string may be one of these names, wherever a
 * configuration is read (TESSERA_ALLOC_CONF, tessera run --conf, tessera-replay --conf and
 * --compare, tessera.check_config), and stands for the text beside it. One table, so that every
 * tool takes the same names with the same meaning. */
#include "config/internal.h"

#include <string.h>

static const struct {
    const char *name;
    const char *text;
} NAMED[] = {
    {"default", ""},                          /* tessera's default policy: what no string gives */
    {"pytorch", "expandable_segments:False"}, /* PyTorch's caching allocator, segment for segment */
};

const char *ts_config_named_policy(const char *text)
{
    if (!text)
        return NULL;
    for (size_t i = 0; i < sizeof NAMED / sizeof NAMED[0]; i++)
        if (strcmp(text, NAMED[i].name) == 0)
            return NAMED[i].text;
    return NULL;
}
