/* The free-block index of a pool: segregated size classes, each an intrusive AVL tree, found
 * through a two-level bitmap.
 *
 * It answers the same ordered questions as one tree keyed (stream, size, address) would, so
 * PyTorch's best fit stays exact ("the smallest block on this stream that is large enough, lowest
 * address first"), but the hot path touches one small tree instead of one tree of every free
 * block: a request's own class first, then the next non-empty class by two bit scans.
 *
 * Classes: exact 512-byte steps below 1 MiB (classes 0..2047, one size each: tessera's sizes are
 * multiples of 512 there), then 8 classes per power of two (2048 + 8 * (log2 - 20) + the next
 * three bits). The class of a size never decreases as the size grows, so every block of class c
 * is smaller than every block of class c + 1.
 *
 * Invariants (ts_freeidx_check): each node sits in the tree of the class of its k1 (the size it
 * was inserted with); bit c of words[] is set iff class c's tree is non-empty; bit w of summary
 * is set iff words[w] != 0; count is the sum of the trees' counts.
 */
#ifndef TS_FREEIDX_H
#define TS_FREEIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tree.h"

#ifndef TS_FREEIDX_SUB_BITS
#define TS_FREEIDX_SUB_BITS 3u
#endif
#define TS_FREEIDX_SUB (1u << TS_FREEIDX_SUB_BITS)
#define TS_FREEIDX_CLASSES (2048u + 44u * TS_FREEIDX_SUB)
#define TS_FREEIDX_WORDS ((TS_FREEIDX_CLASSES + 63u) / 64u)

typedef struct ts_freeidx {
    uint64_t summary;
    uint64_t words[TS_FREEIDX_WORDS];
    size_t count;
    ts_tree cls[TS_FREEIDX_CLASSES];
} ts_freeidx;

static inline unsigned ts_freeidx_class(uint64_t size)
{
    if (size < ((uint64_t)1 << 20))
        return (unsigned)(size >> 9);
    unsigned l = 63u - (unsigned)__builtin_clzll(size);
    return 2048u + (l - 20u) * TS_FREEIDX_SUB +
           (unsigned)((size >> (l - TS_FREEIDX_SUB_BITS)) & (TS_FREEIDX_SUB - 1u));
}

/* The caller sets n->k0..k2 = (stream, size, address) first; the key must not be present. */
void ts_freeidx_insert(ts_freeidx *x, ts_node *n);
void ts_freeidx_remove(ts_freeidx *x, ts_node *n);

/* The best fit on one stream: the first node >= (stream, size, 0) with that stream, or NULL.
 * The hot path: never looks at other streams' classes beyond the bit scans. */
ts_node *ts_freeidx_find(const ts_freeidx *x, uint64_t stream, uint64_t size);

/* The node after n on n's stream (NULL at the end of the stream): the best-fit walks, which
 * never cross to another stream and so never pay for the crossing. */
ts_node *ts_freeidx_next_on_stream(const ts_freeidx *x, const ts_node *n);

/* As ts_tree_lower_bound / ts_tree_floor / first / last / next / prev over the whole index, in
 * (stream, size, address) order. Crossing from one stream to the next scans every non-empty
 * class: cheap with few streams, and only the slow paths (release, GC) cross. */
ts_node *ts_freeidx_lower_bound(const ts_freeidx *x, uint64_t k0, uint64_t k1, uint64_t k2);
ts_node *ts_freeidx_floor(const ts_freeidx *x, uint64_t k0, uint64_t k1, uint64_t k2);
ts_node *ts_freeidx_first(const ts_freeidx *x);
ts_node *ts_freeidx_last(const ts_freeidx *x);
ts_node *ts_freeidx_next(const ts_freeidx *x, const ts_node *n);
ts_node *ts_freeidx_prev(const ts_freeidx *x, const ts_node *n);

/* The largest k1 (size) of any node, any stream; 0 when empty. */
uint64_t ts_freeidx_max_size(const ts_freeidx *x);

/* Validate every tree and the invariants above. Returns 0 when sound. O(n + classes). */
int ts_freeidx_check(const ts_freeidx *x);

#endif /* TS_FREEIDX_H */
