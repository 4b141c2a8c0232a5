/* What follows from what: the configuration in force on a device (ts_config_resolve), and
 * equality of two configurations. */
#include "config/internal.h"

#include <string.h>

/* The granularity of device memory on every CUDA device to date: defragment's page before a
 * device is known, so that the configuration a process prints (its stats page, --json,
 * snapshots) is the one its devices use (verbose output, the trace), not a placeholder. */
#define TS_CONFIG_VM_PAGE (2 * MIB)

void ts_config_resolve(ts_config *cfg, const ts_config_device *dev)
{
    if (cfg->stitching)
        cfg->expandable_segments = true; /* stitching lends pages of expandable segments */
    /* defragment: the finest pages a device allows, so that any free hole of at least a page
     * can be given back or stitched (20 MiB pages leave holes below 20 MiB stuck) */
    if (cfg->expandable_segments && cfg->defragment && cfg->expandable_page == 0)
        cfg->expandable_page = TS_CONFIG_VM_PAGE;
    if (!dev)
        return;
    if (dev->vm_granularity == 0) {
        cfg->expandable_segments = cfg->stitching = false; /* no VM API: plain segments */
        return;
    }
    /* a page is whole granules of the device (what the allocator maps): said as it is used */
    size_t g = dev->vm_granularity;
    if (cfg->expandable_segments && cfg->expandable_page % g)
        cfg->expandable_page = (cfg->expandable_page / g + 1) * g;
}

bool ts_config_equal(const ts_config *a, const ts_config *b)
{
    const struct ts_config_not_applicable *x = &a->not_applicable, *y = &b->not_applicable;
    return a->max_split_size == b->max_split_size &&
           a->max_non_split_rounding == b->max_non_split_rounding &&
           a->garbage_collection_threshold == b->garbage_collection_threshold &&
           memcmp(a->roundup_power2_divisions, b->roundup_power2_divisions,
                  sizeof a->roundup_power2_divisions) == 0 &&
           a->expandable_segments == b->expandable_segments &&
           a->per_process_memory_fraction == b->per_process_memory_fraction &&
           a->large_segment_size == b->large_segment_size && a->backend == b->backend &&
           a->caching == b->caching && a->memory_limit == b->memory_limit &&
           a->stats == b->stats && a->oom_report == b->oom_report &&
           a->reuse_fence == b->reuse_fence && a->stitching == b->stitching &&
           a->stitch_when == b->stitch_when &&
           a->stitch_min_block == b->stitch_min_block &&
           a->stitch_max_ranges == b->stitch_max_ranges && a->defragment == b->defragment &&
           a->expandable_page == b->expandable_page && a->handle_policy == b->handle_policy &&
           a->growth_batch == b->growth_batch &&
           a->verbose == b->verbose && a->history_events == b->history_events &&
           a->history_frames == b->history_frames && a->lending == b->lending &&
           a->lending_wait_ms == b->lending_wait_ms &&
           a->lending_all_users == b->lending_all_users &&
           strncmp(a->snapshot_on_oom, b->snapshot_on_oom, TS_CONFIG_PATH_MAX) == 0 &&
           a->pinned_cache == b->pinned_cache && a->pinned_idle_s == b->pinned_idle_s &&
           a->not_applicable_mask == b->not_applicable_mask &&
           x->bools == y->bools &&
           x->pinned_num_register_threads == y->pinned_num_register_threads &&
           x->pinned_reserve_segment_size_mb == y->pinned_reserve_segment_size_mb &&
           strncmp(x->expandable_segments_reserve, y->expandable_segments_reserve,
                   TS_CONFIG_RAW_MAX) == 0 &&
           strncmp(x->expandable_segments_reserve_by_class,
                   y->expandable_segments_reserve_by_class, TS_CONFIG_RAW_MAX) == 0;
}
