/* The counters' flattened names, in word order (statspage/keys.h). A stat array is
 * {current, peak, allocated, freed} per pool, pool after pool, so its twelve names follow its
 * twelve words; a single Stat has four, a counter or gauge one. Built once, from the X-macros. */
#include "statspage/keys.h"

#include <pthread.h>
#include <stdio.h>

#define KEY_MAX 64 /* "inactive_split_bytes.small_pool.allocated" and the like */

static char names[TS_STATS_KEYS][KEY_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const POOLS[TESSERA_POOL_COUNT] = TESSERA_POOL_NAMES;
static const char *const SUBS[4] = {"current", "peak", "allocated", "freed"};

static void put(size_t *i, const char *name, const char *pool, const char *sub)
{
    if (*i >= TS_STATS_KEYS)
        return;
    if (pool)
        snprintf(names[*i], KEY_MAX, "%s.%s.%s", name, pool, sub);
    else if (sub)
        snprintf(names[*i], KEY_MAX, "%s.%s", name, sub);
    else
        snprintf(names[*i], KEY_MAX, "%s", name);
    (*i)++;
}

static void stat_array(size_t *i, const char *name)
{
    for (int p = 0; p < TESSERA_POOL_COUNT; p++)
        for (int s = 0; s < 4; s++)
            put(i, name, POOLS[p], SUBS[s]);
}

static void stat_single(size_t *i, const char *name)
{
    for (int s = 0; s < 4; s++)
        put(i, name, NULL, SUBS[s]);
}

static void build(void)
{
    size_t i = 0;
#define X_ARRAY(n, u, h) stat_array(&i, #n);
    TESSERA_STAT_ARRAYS(X_ARRAY)
#undef X_ARRAY
#define X_SINGLE(n, h) stat_single(&i, #n);
    TESSERA_STAT_SINGLES(X_SINGLE)
#undef X_SINGLE
#define X_WORD(n, h) put(&i, #n, NULL, NULL);
    TESSERA_COUNTERS(X_WORD)
#define X_GAUGE(n, u, h) put(&i, #n, NULL, NULL);
    TESSERA_GAUGES(X_GAUGE)
#undef X_GAUGE
#define X_HOST_STAT(n, u, h) stat_single(&i, #n);
    TESSERA_HOST_STATS(X_HOST_STAT)
#undef X_HOST_STAT
    TESSERA_HOST_COUNTERS(X_WORD)
    TESSERA_LEND_COUNTERS(X_WORD)
    TESSERA_PAUSE_COUNTERS(X_WORD)
#undef X_WORD
}

const char *ts_stats_key_name(size_t i)
{
    if (i >= TS_STATS_KEYS)
        return NULL;
    pthread_once(&once, build);
    return names[i];
}
