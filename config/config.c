/* placeholder: the parser is being written; defaults only */
#include "config/config.h"
#include <string.h>
void ts_config_defaults(ts_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_split_size = SIZE_MAX;
    cfg->large_segment_size = 20u << 20;
    cfg->max_non_split_rounding = 20u << 20;
    cfg->per_process_memory_fraction = 1.0;
    cfg->caching = true;
    cfg->stats = true;
    cfg->oom_report = true;
    cfg->stitch_min_block = 2u << 20;
    cfg->stitch_max_ranges = 64;
}
uint32_t ts_config_divisions_for(const ts_config *cfg, size_t size)
{
    unsigned lg = 0;
    while ((size >> lg) > 1) lg++;
    int idx = (int)lg - 20;
    if (idx < 0) idx = 0;
    if (idx > TS_ROUNDUP_INTERVALS - 1) idx = TS_ROUNDUP_INTERVALS - 1;
    return cfg->roundup_power2_divisions[idx];
}
