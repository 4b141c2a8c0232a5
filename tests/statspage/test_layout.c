/* Pins the stats page ABI: every offset and size of include/tessera/stats_page.h. A failure here
 * means the layout changed: bump TESSERA_PAGE_LAYOUT_VERSION and docs/stats-page.md, or undo. */
#include "tessera/stats_page.h" /* first: it must stand alone */

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define PIN(expr, want)                                                                            \
    do {                                                                                           \
        unsigned long long got_ = (unsigned long long)(expr);                                      \
        if (got_ != (unsigned long long)(want)) {                                                  \
            fprintf(stderr, "layout: %s is %llu, pinned at %llu\n", #expr, got_,                   \
                    (unsigned long long)(want));                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define OFF(type, field, want) PIN(offsetof(type, field), want)
#define SIZE(type, field, want) PIN(sizeof(((type *)0)->field), want)

int main(void)
{
    /* constants */
    PIN(TESSERA_PAGE_MAGIC, 0x0161726573736574ull);
    PIN(TESSERA_PAGE_LAYOUT_VERSION, 3);
    PIN(TESSERA_PAGE_LAYOUT_OLDEST, 2);
    PIN(TESSERA_PAGE_HEADER_SIZE, 4096);
    PIN(TESSERA_PAGE_SLOTS, 16);
    PIN(TESSERA_PAGE_MAX_SLOT_COUNT, 64);
    PIN(TESSERA_PAGE_MAX_SEGMENTS, 512);
    PIN(TESSERA_PAGE_MAX_BLOCKS, 4096);
    PIN(TESSERA_PAGE_SLOT_SIZE, 94208);
    PIN(TESSERA_SLOT_FREE, 0);
    PIN(TESSERA_SLOT_CLAIMING, 1);
    PIN(TESSERA_SLOT_ACTIVE, 2);
    PIN(TESSERA_MAP_VALID, 1);
    PIN(TESSERA_MAP_TRUNCATED, 2);
    PIN(TESSERA_PAGE_FLAG_CLOSED, 1);
    PIN(TESSERA_SEGMENT_PLAIN, 0);
    PIN(TESSERA_SEGMENT_EXPANDABLE, 1);
    PIN(TESSERA_SEGMENT_STITCHED, 2);
    PIN(TESSERA_BLOCK_ALLOCATED, 0);
    PIN(TESSERA_BLOCK_PENDING, 1);
    PIN(TESSERA_BLOCK_FREE, 2);
    PIN(TESSERA_BLOCK_UNMAPPED, 3);
    PIN(TESSERA_BLOCK_LENT, 4);
    PIN(TESSERA_BLOCK_STATE_COUNT, 5);
    PIN(TESSERA_POOL_ALL, 0);
    PIN(TESSERA_POOL_SMALL, 1);
    PIN(TESSERA_POOL_LARGE, 2);

    /* header */
    PIN(sizeof(tessera_page_header), 4096);
    OFF(tessera_page_header, magic, 0);
    OFF(tessera_page_header, layout_version, 8);
    OFF(tessera_page_header, header_size, 12);
    OFF(tessera_page_header, slot_size, 16);
    OFF(tessera_page_header, slot_count, 20);
    OFF(tessera_page_header, total_size, 24);
    OFF(tessera_page_header, pid, 32);
    OFF(tessera_page_header, flags, 36);
    OFF(tessera_page_header, start_time_ticks, 40);
    OFF(tessera_page_header, pid_namespace, 48);
    OFF(tessera_page_header, created_ns, 56);
    OFF(tessera_page_header, boot_id, 64);
    SIZE(tessera_page_header, boot_id, 40);
    OFF(tessera_page_header, clock_ticks_per_second, 104);
    OFF(tessera_page_header, identity_reserved, 108);
    OFF(tessera_page_header, max_segments, 128);
    OFF(tessera_page_header, max_blocks, 132);
    OFF(tessera_page_header, stats_words, 136);
    OFF(tessera_page_header, reserved0, 140);
    OFF(tessera_page_header, control_secret, 144);
    OFF(tessera_page_header, reserved1, 152);
    OFF(tessera_page_header, version, 160);
    SIZE(tessera_page_header, version, 32);
    OFF(tessera_page_header, cmdline, 192);
    SIZE(tessera_page_header, cmdline, 512);
    OFF(tessera_page_header, config, 704);
    SIZE(tessera_page_header, config, 2048);
    OFF(tessera_page_header, reserved_end, 2752);
    SIZE(tessera_page_header, reserved_end, 1344);

    /* slot */
    PIN(sizeof(tessera_page_slot), 94208);
    PIN(sizeof(tessera_page_slot_head), 2240);
    OFF(tessera_page_slot_head, state, 0);
    OFF(tessera_page_slot_head, device, 4);
    OFF(tessera_page_slot_head, context_id, 8);
    OFF(tessera_page_slot_head, seq, 16);
    OFF(tessera_page_slot_head, claimed_ns, 24);
    OFF(tessera_page_slot_head, map_request, 32);
    OFF(tessera_page_slot_head, device_uuid, 40);
    SIZE(tessera_page_slot_head, device_uuid, 16);
    OFF(tessera_page_slot_head, reserved, 56);
    OFF(tessera_page_slot_head, stats, 64);
    OFF(tessera_page_slot_head, map, 2112);
    OFF(tessera_page_slot, head, 0);
    OFF(tessera_page_slot, segments, 2240);
    OFF(tessera_page_slot, blocks, 26816);
    OFF(tessera_page_slot, reserved_end, 92352);
    SIZE(tessera_page_slot, reserved_end, 1856);

    /* map summary */
    PIN(sizeof(tessera_page_map), 128);
    OFF(tessera_page_map, ops, 0);
    OFF(tessera_page_map, time_ns, 8);
    OFF(tessera_page_map, largest_free, 16);
    OFF(tessera_page_map, free_bytes, 24);
    OFF(tessera_page_map, pending_bytes, 32);
    OFF(tessera_page_map, allocated_bytes, 40);
    OFF(tessera_page_map, unmapped_bytes, 48);
    OFF(tessera_page_map, segment_bytes, 56);
    OFF(tessera_page_map, mapped_bytes, 64);
    OFF(tessera_page_map, checksum, 72);
    OFF(tessera_page_map, nsegments, 80);
    OFF(tessera_page_map, nblocks, 84);
    OFF(tessera_page_map, total_segments, 88);
    OFF(tessera_page_map, total_blocks, 92);
    OFF(tessera_page_map, free_blocks, 96);
    OFF(tessera_page_map, flags, 100);
    OFF(tessera_page_map, request_served, 104);
    OFF(tessera_page_map, history_written, 112);
    OFF(tessera_page_map, reserved, 120);

    /* segment and block entries */
    PIN(sizeof(tessera_page_segment), 48);
    OFF(tessera_page_segment, address, 0);
    OFF(tessera_page_segment, size, 8);
    OFF(tessera_page_segment, mapped, 16);
    OFF(tessera_page_segment, stream, 24);
    OFF(tessera_page_segment, first_block, 32);
    OFF(tessera_page_segment, nblocks, 36);
    OFF(tessera_page_segment, nblocks_total, 40);
    OFF(tessera_page_segment, pool, 44);
    OFF(tessera_page_segment, kind, 45);
    OFF(tessera_page_segment, reserved, 46);
    PIN(sizeof(tessera_page_block), 16);
    OFF(tessera_page_block, size, 0);
    OFF(tessera_page_block, state, 8);
    OFF(tessera_page_block, slack, 12);

    /* the counters (tessera/stats_fields.h), as they sit at slot offset 64 */
    PIN(sizeof(tessera_stat), 32);
    PIN(sizeof(tessera_device_stats), 1432);
    OFF(tessera_device_stats, allocation, 0);
    OFF(tessera_device_stats, segment, 96);
    OFF(tessera_device_stats, active, 192);
    OFF(tessera_device_stats, inactive_split, 288);
    OFF(tessera_device_stats, allocated_bytes, 384);
    OFF(tessera_device_stats, reserved_bytes, 480);
    OFF(tessera_device_stats, active_bytes, 576);
    OFF(tessera_device_stats, inactive_split_bytes, 672);
    OFF(tessera_device_stats, requested_bytes, 768);
    OFF(tessera_device_stats, oversize_allocations, 864);
    OFF(tessera_device_stats, oversize_segments, 896);
    OFF(tessera_device_stats, num_alloc_retries, 928);
    OFF(tessera_device_stats, num_ooms, 936);
    OFF(tessera_device_stats, num_sync_all_streams, 944);
    OFF(tessera_device_stats, num_device_alloc, 952);
    OFF(tessera_device_stats, num_device_free, 960);
    OFF(tessera_device_stats, num_alloc_calls, 968);
    OFF(tessera_device_stats, num_free_calls, 976);
    OFF(tessera_device_stats, num_passthrough_calls, 984);
    OFF(tessera_device_stats, num_invalid_frees, 992);
    OFF(tessera_device_stats, num_fences_recorded, 1000);
    OFF(tessera_device_stats, num_fence_waits, 1008);
    OFF(tessera_device_stats, num_stitches, 1016);
    OFF(tessera_device_stats, num_empty_cache, 1024);
    OFF(tessera_device_stats, num_ops, 1032);
    OFF(tessera_device_stats, num_plan_hits, 1040);
    OFF(tessera_device_stats, num_plan_misses, 1048);
    OFF(tessera_device_stats, num_plan_replans, 1056);
    OFF(tessera_device_stats, max_split_size, 1064);
    OFF(tessera_device_stats, largest_free_block_bytes, 1072);
    OFF(tessera_device_stats, stitched_bytes, 1080);
    OFF(tessera_device_stats, memory_limit_bytes, 1088);
    OFF(tessera_device_stats, device_total_bytes, 1096);
    OFF(tessera_device_stats, driver_bytes, 1104);
    OFF(tessera_device_stats, plan_range_bytes, 1112);
    OFF(tessera_device_stats, plan_lower_bound_bytes, 1120);
    OFF(tessera_device_stats, host_allocations, 1128);
    OFF(tessera_device_stats, host_allocated_bytes, 1160);
    OFF(tessera_device_stats, host_active_requests, 1192);
    OFF(tessera_device_stats, host_active_bytes, 1224);
    OFF(tessera_device_stats, num_host_alloc, 1256);
    OFF(tessera_device_stats, num_host_free, 1264);
    OFF(tessera_device_stats, num_host_alloc_calls, 1272);
    OFF(tessera_device_stats, num_host_free_calls, 1280);
    OFF(tessera_device_stats, host_alloc_time, 1288);
    OFF(tessera_device_stats, host_free_time, 1296);
    OFF(tessera_device_stats, num_lend_asks, 1304);
    OFF(tessera_device_stats, num_lend_asks_served, 1312);
    OFF(tessera_device_stats, lend_received_bytes, 1320);
    OFF(tessera_device_stats, lend_wait_time, 1328);
    OFF(tessera_device_stats, num_lend_gives, 1336);
    OFF(tessera_device_stats, lend_given_bytes, 1344);
    OFF(tessera_device_stats, lend_give_time, 1352);
    OFF(tessera_device_stats, num_remote_releases, 1360);
    OFF(tessera_device_stats, num_pauses, 1368);
    OFF(tessera_device_stats, num_resumes, 1376);
    OFF(tessera_device_stats, pause_saved_bytes, 1384);
    OFF(tessera_device_stats, pause_time, 1392);
    OFF(tessera_device_stats, reserved_tail, 1400);
    OFF(tessera_stat, current, 0);
    OFF(tessera_stat, peak, 8);
    OFF(tessera_stat, allocated, 16);
    OFF(tessera_stat, freed, 24);

    /* the checksum is part of the ABI: pin it on a fixed input */
    tessera_page_map m;
    memset(&m, 0, sizeof m);
    m.nsegments = 1;
    m.nblocks = 1;
    tessera_page_segment s;
    memset(&s, 0, sizeof s);
    s.size = 4096;
    tessera_page_block b;
    memset(&b, 0, sizeof b);
    b.size = 4096;
    m.checksum = 12345; /* ignored by the checksum */
    PIN(tessera_page_map_checksum(&m, &s, &b), 0xb7276b7d92ee5bacull);

    if (failures)
        fprintf(stderr, "%d layout pins failed\n", failures);
    else
        printf("stats page layout 2: all pins hold\n");
    return failures ? 1 : 0;
}
