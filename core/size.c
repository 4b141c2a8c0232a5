/* Sizes: how a request is rounded, and how large a segment serves it (PyTorch's round_size and
 * get_allocation_size; reference section 2). The configuration only holds the values. */
#include "core/internal.h"

uint32_t ts_round_divisions(const ts_config *cfg, size_t size)
{
    /* entry 0 covers everything below 2 MiB, entry k [2^k MiB, 2^(k+1) MiB), the last the rest */
    unsigned lg = size ? 63u - (unsigned)__builtin_clzll((unsigned long long)size) : 0;
    unsigned idx = lg > 20 ? lg - 20 : 0;
    if (idx > TS_ROUNDUP_INTERVALS - 1)
        idx = TS_ROUNDUP_INTERVALS - 1;
    return cfg->roundup_power2_divisions[idx];
}

static size_t roundup_power2_next_division(size_t size, uint32_t divisions)
{
    if ((size & (size - 1)) == 0)
        return size;
    unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    size_t floor2 = (size_t)1 << lg;
    unsigned div_lg = 31u - (unsigned)__builtin_clz(divisions);
    size_t step = floor2 >> div_lg;
    if (step == 0)
        return floor2 << 1;
    size_t r = size & ~(step - 1);
    return r == size ? size : r + step;
}

size_t ts_round_size(const ts_config *cfg, size_t size)
{
    if (size < TS_MIN_BLOCK)
        return TS_MIN_BLOCK;
    uint32_t div = ts_round_divisions(cfg, size);
    if (div > 1 && size > TS_MIN_BLOCK * div)
        return roundup_power2_next_division(size, div);
    return (size + TS_MIN_BLOCK - 1) / TS_MIN_BLOCK * TS_MIN_BLOCK;
}

size_t ts_allocation_size(const ts_config *cfg, size_t rounded)
{
    if (rounded <= TS_SMALL_SIZE)
        return TS_SMALL_BUFFER;
    if (rounded < TS_MIN_LARGE_ALLOC)
        return cfg->large_segment_size;
    return (rounded + TS_ROUND_LARGE - 1) / TS_ROUND_LARGE * TS_ROUND_LARGE;
}
