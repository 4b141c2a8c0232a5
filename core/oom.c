/* The out-of-memory diagnostic line. */
#include <stdio.h>

#include "core/allocator.h"

/* PyTorch's format_size: bytes, KiB, MiB, GiB with two decimals; beyond 1 TiB (PyTorch would
 * print 8589934592.00 GiB for 2^63 bytes) TiB, PiB and EiB. */
static const char *size_text(size_t v, char *buf, size_t len)
{
    static const char *const big[] = {"GiB", "TiB", "PiB", "EiB"};
    if (v <= 1024) {
        snprintf(buf, len, "%zu bytes", v);
    } else if (v <= ((size_t)1 << 20)) {
        snprintf(buf, len, "%.2f KiB", (double)v / 1024.0);
    } else if (v <= ((size_t)1 << 30)) {
        snprintf(buf, len, "%.2f MiB", (double)v / (1024.0 * 1024.0));
    } else {
        double d = (double)v / (1024.0 * 1024.0 * 1024.0);
        size_t u = 0;
        while (d > 1024.0 && u + 1 < sizeof big / sizeof big[0]) {
            d /= 1024.0;
            u++;
        }
        snprintf(buf, len, "%.2f %s", d, big[u]);
    }
    return buf;
}

/* The advice names what would have served this request, in the order that costs least, and
 * only what this configuration and device can still do (a test pins each line):
 * - fragmentation first: the request is no larger than the memory reserved but unallocated (it
 *   exists, in pieces or on another stream), or, under a cap, allocated + request fits under the
 *   cap and only the new segment's rounding (a 20 MiB segment for an 11 MiB request) crossed
 *   it. Raising the cap would hide this, at the price of more memory; expandable segments and
 *   stitching use the memory already reserved, where the device has virtual memory and they are
 *   off. With stitching on, a request below stitch_min_block_mb is not stitched: lowering the key
 *   helps only when it is above its least value and the request is at least that least value.
 *   Otherwise the free memory is in pieces this configuration cannot join (smaller than a page, on
 *   other streams and pools, or in handles that also hold live blocks: a handle goes back whole);
 * - the cap, only when allocated + request really exceeds it, and the device is larger;
 * - otherwise the device itself is full. */
static const char *oom_advice(const ts_oom_info *o)
{
    static const size_t least = (size_t)TS_CONFIG_STITCH_MIN_BLOCK_LEAST_MB << 20;
    size_t unallocated = o->reserved > o->allocated ? o->reserved - o->allocated : 0;
    /* allocated + rounded <= limit, written so a huge request cannot wrap around. */
    bool fits_cap = o->limit && o->allocated <= o->limit && o->rounded <= o->limit - o->allocated;
    bool fragmented = unallocated >= o->rounded || (o->limit_reached && fits_cap);
    if (fragmented && !o->vm_available)
        return "reserved but unallocated memory could serve it (fragmentation), but this device "
               "has no virtual-memory API to join its pieces: the program needs less memory or a "
               "larger device";
    if (fragmented && !o->expandable_segments)
        return "reserved but unallocated memory could serve it (fragmentation): set "
               "TESSERA_ALLOC_CONF=defragment:True (expandable segments and stitching) or "
               "expandable_segments:True";
    if (fragmented && !o->stitching)
        return "reserved but unallocated memory could serve it (fragmentation): set "
               "TESSERA_ALLOC_CONF=defragment:True to stitch its free pages together";
    /* (a request of at least the least value below the key: the key is above its least value) */
    if (fragmented && o->rounded >= least && o->rounded < o->stitch_min_block)
        return "the request is below stitch_min_block_mb, so its free pages were not stitched: "
               "lower stitch_min_block_mb (2 is the least)";
    if (fragmented && unallocated >= o->rounded)
        return "free memory is in pieces that cannot be joined (smaller than a page, held by "
               "other streams, or in handles that also hold live blocks): the program needs less "
               "memory or a larger device";
    if (o->limit_reached && o->limit < o->capacity)
        return "allocated memory plus this request exceeds the allocator's cap: raise "
               "memory_limit or per_process_memory_fraction";
    return "the device is full: the program needs less memory or a larger device";
}

int ts_format_oom(const ts_oom_info *o, char *buf, size_t len)
{
    char req[32], seg[32], cap[32], fre[32], alc[32], unalloc[32], lfb[32], lim[32];
    size_t unallocated = o->reserved > o->allocated ? o->reserved - o->allocated : 0;
    char limit_text[64] = "";
    if (o->limit)
        snprintf(limit_text, sizeof limit_text, " (cap %s)", size_text(o->limit, lim, sizeof lim));
    return snprintf(buf, len,
                    "out of memory on device %d: tried to allocate %s (segment %s); capacity %s%s, "
                    "%s free; %s allocated, %s reserved but unallocated, largest free block %s; "
                    "%s",
                    o->device, size_text(o->requested, req, sizeof req),
                    size_text(o->segment_size, seg, sizeof seg),
                    size_text(o->capacity, cap, sizeof cap), limit_text,
                    size_text(o->device_free, fre, sizeof fre),
                    size_text(o->allocated, alc, sizeof alc),
                    size_text(unallocated, unalloc, sizeof unalloc),
                    size_text(o->largest_free_block, lfb, sizeof lfb), oom_advice(o));
}
