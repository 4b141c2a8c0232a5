/* An intrusive AVL tree keyed by three unsigned 64-bit words, compared lexicographically.
 *
 * The nodes live inside the objects they index (blocks, segments), so inserting or removing
 * never allocates. The free-block sets use the key (stream, size, address): lower_bound of
 * (stream, request, 0) is then exactly PyTorch's best fit, "the smallest block on this stream that
 * is large enough, lowest address first", in O(log n).
 *
 * Invariants: in-order traversal is strictly increasing in key (keys are unique: every key ends
 * in an address); every node's height is 1 + max(child heights); child heights differ by <= 1.
 */
#ifndef TS_TREE_H
#define TS_TREE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts_node {
    struct ts_node *left, *right, *parent;
    uint64_t k0, k1, k2;
    int32_t height;
} ts_node;

typedef struct ts_tree {
    ts_node *root;
    size_t count;
} ts_tree;

/* Key comparison: <0, 0, >0 for node key versus (k0, k1, k2). */
static inline int ts_node_cmp(const ts_node *n, uint64_t k0, uint64_t k1, uint64_t k2)
{
    if (n->k0 != k0)
        return n->k0 < k0 ? -1 : 1;
    if (n->k1 != k1)
        return n->k1 < k1 ? -1 : 1;
    if (n->k2 != k2)
        return n->k2 < k2 ? -1 : 1;
    return 0;
}

/* The caller sets n->k0..k2 first. The key must not already be present. */
void ts_tree_insert(ts_tree *t, ts_node *n);
void ts_tree_remove(ts_tree *t, ts_node *n);

/* First node whose key is >= (k0, k1, k2), or NULL. */
ts_node *ts_tree_lower_bound(const ts_tree *t, uint64_t k0, uint64_t k1, uint64_t k2);
/* Last node whose key is <= (k0, k1, k2), or NULL. */
ts_node *ts_tree_floor(const ts_tree *t, uint64_t k0, uint64_t k1, uint64_t k2);

ts_node *ts_tree_first(const ts_tree *t);
ts_node *ts_tree_last(const ts_tree *t);
ts_node *ts_tree_next(const ts_node *n);
ts_node *ts_tree_prev(const ts_node *n);

/* Validate ordering, parent links, heights and balance. Returns 0 when sound. O(n). */
int ts_tree_check(const ts_tree *t);

#endif /* TS_TREE_H */
