/* The counters of a slot under their flattened torch.cuda.memory_stats() names
 * ("allocated_bytes.all.current", "num_alloc_retries", ...), one name per 64-bit word of
 * tessera_device_stats, in word order: key i is word i. Generated from the X-macros of
 * tessera/stats_fields.h, for every output that names counters (JSON, the Python module). */
#ifndef TS_STATSPAGE_KEYS_H
#define TS_STATSPAGE_KEYS_H

#include <stddef.h>

#include "tessera/stats_page.h"

/* Words of tessera_device_stats that are counters (the reserved tail is not). */
#define TS_STATS_KEYS                                                                              \
    ((sizeof(tessera_device_stats) - sizeof(((tessera_device_stats *)0)->reserved_tail)) /        \
     sizeof(int64_t))

/* The name of word i (NULL when i >= TS_STATS_KEYS). */
const char *ts_stats_key_name(size_t i);

#endif /* TS_STATSPAGE_KEYS_H */
