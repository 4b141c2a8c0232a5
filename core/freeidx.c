/* Segregated free-block index: see freeidx.h for the classes and the invariants. */
#include "core/freeidx.h"

/* --- the bitmap --------------------------------------------------------------------------- */

static inline void class_mark(ts_freeidx *x, unsigned c)
{
    x->words[c >> 6] |= (uint64_t)1 << (c & 63u);
    x->summary |= (uint64_t)1 << (c >> 6);
}

static inline void class_unmark(ts_freeidx *x, unsigned c)
{
    x->words[c >> 6] &= ~((uint64_t)1 << (c & 63u));
    if (!x->words[c >> 6])
        x->summary &= ~((uint64_t)1 << (c >> 6));
}

/* The first non-empty class >= from, or -1. */
static inline int class_next(const ts_freeidx *x, unsigned from)
{
    if (from >= TS_FREEIDX_CLASSES)
        return -1;
    unsigned w = from >> 6;
    uint64_t m = x->words[w] & (~(uint64_t)0 << (from & 63u));
    if (m)
        return (int)(w * 64u + (unsigned)__builtin_ctzll(m));
    uint64_t s = x->summary & (~(uint64_t)0 << (w + 1u)); /* w + 1 <= TS_FREEIDX_WORDS < 64 */
    if (!s)
        return -1;
    w = (unsigned)__builtin_ctzll(s);
    return (int)(w * 64u + (unsigned)__builtin_ctzll(x->words[w]));
}

/* The last non-empty class <= from, or -1. */
static int class_prev(const ts_freeidx *x, int from)
{
    if (from < 0)
        return -1;
    if (from >= (int)TS_FREEIDX_CLASSES)
        from = (int)TS_FREEIDX_CLASSES - 1;
    unsigned w = (unsigned)from >> 6, bit = (unsigned)from & 63u;
    uint64_t keep = bit == 63u ? ~(uint64_t)0 : (((uint64_t)1 << (bit + 1u)) - 1u);
    uint64_t m = x->words[w] & keep;
    if (m)
        return (int)(w * 64u + 63u - (unsigned)__builtin_clzll(m));
    uint64_t s = x->summary & (((uint64_t)1 << w) - 1u);
    if (!s)
        return -1;
    w = 63u - (unsigned)__builtin_clzll(s);
    return (int)(w * 64u + 63u - (unsigned)__builtin_clzll(x->words[w]));
}

/* --- insert and remove ---------------------------------------------------------------------- */

void ts_freeidx_insert(ts_freeidx *x, ts_node *n)
{
    unsigned c = ts_freeidx_class(n->k1);
    ts_tree_insert(&x->cls[c], n);
    if (x->cls[c].count == 1)
        class_mark(x, c);
    x->count++;
}

void ts_freeidx_remove(ts_freeidx *x, ts_node *n)
{
    /* n->k1 is the size n was inserted with: callers change a block's size only out of the
     * index, so this is n's class. */
    unsigned c = ts_freeidx_class(n->k1);
    ts_tree_remove(&x->cls[c], n);
    if (x->cls[c].count == 0)
        class_unmark(x, c);
    x->count--;
}

/* --- ordered queries -------------------------------------------------------------------------- */

static inline ts_node *on_stream(ts_node *n, uint64_t stream)
{
    return n && n->k0 == stream ? n : NULL;
}

/* The smallest node of stream in a class after c, or NULL: every block there is larger than any
 * in class c. */
static ts_node *first_on_stream_after(const ts_freeidx *x, uint64_t stream, unsigned c)
{
    for (int k = class_next(x, c + 1u); k >= 0; k = class_next(x, (unsigned)k + 1u)) {
        ts_node *n = on_stream(ts_tree_lower_bound(&x->cls[k], stream, 0, 0), stream);
        if (n)
            return n;
    }
    return NULL;
}

/* The first node of stream at or above (stream, size, addr), or NULL. */
static ts_node *lower_bound_on_stream(const ts_freeidx *x, uint64_t stream, uint64_t size,
                                      uint64_t addr)
{
    unsigned c = ts_freeidx_class(size);
    /* The key's own class holds sizes on both sides of it: a real lower bound there. */
    if (x->cls[c].count) {
        ts_node *n = on_stream(ts_tree_lower_bound(&x->cls[c], stream, size, addr), stream);
        if (n)
            return n;
    }
    return first_on_stream_after(x, stream, c);
}

ts_node *ts_freeidx_find(const ts_freeidx *x, uint64_t stream, uint64_t size)
{
    return lower_bound_on_stream(x, stream, size, 0);
}

/* The last node of stream at or below (stream, size, addr), or NULL. */
static ts_node *floor_on_stream(const ts_freeidx *x, uint64_t stream, uint64_t size, uint64_t addr)
{
    int c = (int)ts_freeidx_class(size);
    if (x->cls[c].count) {
        ts_node *n = on_stream(ts_tree_floor(&x->cls[c], stream, size, addr), stream);
        if (n)
            return n;
    }
    for (int k = class_prev(x, c - 1); k >= 0; k = class_prev(x, k - 1)) {
        ts_node *n = on_stream(ts_tree_floor(&x->cls[k], stream, UINT64_MAX, UINT64_MAX), stream);
        if (n)
            return n;
    }
    return NULL;
}

/* The smallest stream > s (after = true) or largest stream < s (after = false) with a node. */
static bool stream_neighbour(const ts_freeidx *x, uint64_t s, bool after, uint64_t *out)
{
    if (after ? s == UINT64_MAX : s == 0)
        return false;
    bool found = false;
    uint64_t best = 0;
    for (int k = class_next(x, 0); k >= 0; k = class_next(x, (unsigned)k + 1u)) {
        ts_node *n = after ? ts_tree_lower_bound(&x->cls[k], s + 1u, 0, 0)
                           : ts_tree_floor(&x->cls[k], s - 1u, UINT64_MAX, UINT64_MAX);
        if (n && (!found || (after ? n->k0 < best : n->k0 > best))) {
            best = n->k0;
            found = true;
        }
    }
    *out = best;
    return found;
}

ts_node *ts_freeidx_lower_bound(const ts_freeidx *x, uint64_t k0, uint64_t k1, uint64_t k2)
{
    ts_node *n = lower_bound_on_stream(x, k0, k1, k2);
    if (n)
        return n;
    uint64_t s;
    if (!stream_neighbour(x, k0, true, &s))
        return NULL;
    return lower_bound_on_stream(x, s, 0, 0);
}

ts_node *ts_freeidx_floor(const ts_freeidx *x, uint64_t k0, uint64_t k1, uint64_t k2)
{
    ts_node *n = floor_on_stream(x, k0, k1, k2);
    if (n)
        return n;
    uint64_t s;
    if (!stream_neighbour(x, k0, false, &s))
        return NULL;
    return floor_on_stream(x, s, UINT64_MAX, UINT64_MAX);
}

ts_node *ts_freeidx_first(const ts_freeidx *x)
{
    return x->count ? ts_freeidx_lower_bound(x, 0, 0, 0) : NULL;
}

ts_node *ts_freeidx_last(const ts_freeidx *x)
{
    return x->count ? ts_freeidx_floor(x, UINT64_MAX, UINT64_MAX, UINT64_MAX) : NULL;
}

ts_node *ts_freeidx_next_on_stream(const ts_freeidx *x, const ts_node *n)
{
    ts_node *m = on_stream(ts_tree_next(n), n->k0);
    /* else n was its stream's last in its class */
    return m ? m : first_on_stream_after(x, n->k0, ts_freeidx_class(n->k1));
}

ts_node *ts_freeidx_next(const ts_freeidx *x, const ts_node *n)
{
    /* Within n's class tree, a node on the same stream is the next one overall: every other
     * class's sizes lie wholly below or above. */
    ts_node *m = on_stream(ts_tree_next(n), n->k0);
    if (m)
        return m;
    if (n->k2 != UINT64_MAX)
        return ts_freeidx_lower_bound(x, n->k0, n->k1, n->k2 + 1u);
    if (n->k1 != UINT64_MAX)
        return ts_freeidx_lower_bound(x, n->k0, n->k1 + 1u, 0);
    return n->k0 != UINT64_MAX ? ts_freeidx_lower_bound(x, n->k0 + 1u, 0, 0) : NULL;
}

ts_node *ts_freeidx_prev(const ts_freeidx *x, const ts_node *n)
{
    ts_node *m = on_stream(ts_tree_prev(n), n->k0);
    if (m)
        return m;
    if (n->k2 != 0)
        return ts_freeidx_floor(x, n->k0, n->k1, n->k2 - 1u);
    if (n->k1 != 0)
        return ts_freeidx_floor(x, n->k0, n->k1 - 1u, UINT64_MAX);
    return n->k0 != 0 ? ts_freeidx_floor(x, n->k0 - 1u, UINT64_MAX, UINT64_MAX) : NULL;
}

uint64_t ts_freeidx_max_size(const ts_freeidx *x)
{
    int c = class_prev(x, (int)TS_FREEIDX_CLASSES - 1);
    if (c < 0)
        return 0;
    /* The top class: its largest size on any stream (one small tree). */
    uint64_t best = 0;
    for (ts_node *n = ts_tree_first(&x->cls[c]); n; n = ts_tree_next(n))
        if (n->k1 > best)
            best = n->k1;
    return best;
}

int ts_freeidx_check(const ts_freeidx *x)
{
    size_t total = 0;
    for (unsigned c = 0; c < TS_FREEIDX_CLASSES; c++) {
        const ts_tree *t = &x->cls[c];
        if (ts_tree_check(t) != 0)
            return -1;
        bool bit = (x->words[c >> 6] >> (c & 63u)) & 1u;
        if (bit != (t->count != 0))
            return -1;
        for (const ts_node *n = ts_tree_first(t); n; n = ts_tree_next(n))
            if (ts_freeidx_class(n->k1) != c)
                return -1;
        total += t->count;
    }
    for (unsigned w = 0; w < TS_FREEIDX_WORDS; w++)
        if ((bool)((x->summary >> w) & 1u) != (x->words[w] != 0))
            return -1;
    if (x->summary >> TS_FREEIDX_WORDS)
        return -1;
    return total == x->count ? 0 : -1;
}
