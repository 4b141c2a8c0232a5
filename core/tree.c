/* Intrusive AVL tree: see tree.h for the invariants. */
#include "core/tree.h"

#include <stdbool.h>

static inline int32_t node_height(const ts_node *n)
{
    return n ? n->height : 0;
}

static inline void node_update(ts_node *n)
{
    int32_t hl = node_height(n->left), hr = node_height(n->right);
    n->height = 1 + (hl > hr ? hl : hr);
}

static inline void tree_replace_child(ts_tree *t, ts_node *parent, ts_node *old, ts_node *repl)
{
    if (!parent)
        t->root = repl;
    else if (parent->left == old)
        parent->left = repl;
    else
        parent->right = repl;
    if (repl)
        repl->parent = parent;
}

static ts_node *tree_rotate_left(ts_tree *t, ts_node *x)
{
    ts_node *y = x->right;
    x->right = y->left;
    if (y->left)
        y->left->parent = x;
    tree_replace_child(t, x->parent, x, y);
    y->left = x;
    x->parent = y;
    node_update(x);
    node_update(y);
    return y;
}

static ts_node *tree_rotate_right(ts_tree *t, ts_node *x)
{
    ts_node *y = x->left;
    x->left = y->right;
    if (y->right)
        y->right->parent = x;
    tree_replace_child(t, x->parent, x, y);
    y->right = x;
    x->parent = y;
    node_update(x);
    node_update(y);
    return y;
}

/* Restore heights and balance from n up to the root. Stops early once a subtree's height is
 * unchanged: nothing above it can have changed either. */
static void tree_rebalance(ts_tree *t, ts_node *n)
{
    while (n) {
        int32_t old = n->height;
        int32_t hl = node_height(n->left), hr = node_height(n->right);
        if (hl - hr > 1) {
            if (node_height(n->left->left) < node_height(n->left->right))
                tree_rotate_left(t, n->left);
            n = tree_rotate_right(t, n);
        } else if (hr - hl > 1) {
            if (node_height(n->right->right) < node_height(n->right->left))
                tree_rotate_right(t, n->right);
            n = tree_rotate_left(t, n);
        } else {
            node_update(n);
        }
        if (n->height == old)
            return;
        n = n->parent;
    }
}

void ts_tree_insert(ts_tree *t, ts_node *n)
{
    ts_node *parent = NULL, **link = &t->root;
    while (*link) {
        parent = *link;
        link = ts_node_cmp(parent, n->k0, n->k1, n->k2) > 0 ? &parent->left : &parent->right;
    }
    n->left = n->right = NULL;
    n->parent = parent;
    n->height = 1;
    *link = n;
    t->count++;
    tree_rebalance(t, parent);
}

void ts_tree_remove(ts_tree *t, ts_node *n)
{
    ts_node *start;
    if (n->left && n->right) {
        /* Put the in-order successor s where n was; s has no left child. */
        ts_node *s = n->right;
        while (s->left)
            s = s->left;
        ts_node *sp = s->parent;
        if (sp == n) {
            start = s;
        } else {
            sp->left = s->right;
            if (s->right)
                s->right->parent = sp;
            s->right = n->right;
            s->right->parent = s;
            start = sp;
        }
        s->left = n->left;
        s->left->parent = s;
        s->height = n->height;
        tree_replace_child(t, n->parent, n, s);
    } else {
        ts_node *child = n->left ? n->left : n->right;
        start = n->parent;
        tree_replace_child(t, n->parent, n, child);
    }
    n->left = n->right = n->parent = NULL;
    t->count--;
    tree_rebalance(t, start);
}

ts_node *ts_tree_lower_bound(const ts_tree *t, uint64_t k0, uint64_t k1, uint64_t k2)
{
    ts_node *n = t->root, *best = NULL;
    while (n) {
        if (ts_node_cmp(n, k0, k1, k2) >= 0) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

ts_node *ts_tree_floor(const ts_tree *t, uint64_t k0, uint64_t k1, uint64_t k2)
{
    ts_node *n = t->root, *best = NULL;
    while (n) {
        if (ts_node_cmp(n, k0, k1, k2) <= 0) {
            best = n;
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return best;
}

ts_node *ts_tree_first(const ts_tree *t)
{
    ts_node *n = t->root;
    if (n)
        while (n->left)
            n = n->left;
    return n;
}

ts_node *ts_tree_last(const ts_tree *t)
{
    ts_node *n = t->root;
    if (n)
        while (n->right)
            n = n->right;
    return n;
}

ts_node *ts_tree_next(const ts_node *n)
{
    if (n->right) {
        n = n->right;
        while (n->left)
            n = n->left;
        return (ts_node *)n;
    }
    while (n->parent && n->parent->right == n)
        n = n->parent;
    return n->parent;
}

ts_node *ts_tree_prev(const ts_node *n)
{
    if (n->left) {
        n = n->left;
        while (n->right)
            n = n->right;
        return (ts_node *)n;
    }
    while (n->parent && n->parent->left == n)
        n = n->parent;
    return n->parent;
}

static int32_t tree_check_node(const ts_node *n, const ts_node *parent, size_t *count, bool *ok)
{
    if (!n)
        return 0;
    if (n->parent != parent)
        *ok = false;
    (*count)++;
    int32_t hl = tree_check_node(n->left, n, count, ok);
    int32_t hr = tree_check_node(n->right, n, count, ok);
    if (n->left && ts_node_cmp(n->left, n->k0, n->k1, n->k2) >= 0)
        *ok = false;
    if (n->right && ts_node_cmp(n->right, n->k0, n->k1, n->k2) <= 0)
        *ok = false;
    if (hl - hr > 1 || hr - hl > 1)
        *ok = false;
    int32_t h = 1 + (hl > hr ? hl : hr);
    if (n->height != h)
        *ok = false;
    return h;
}

int ts_tree_check(const ts_tree *t)
{
    size_t count = 0;
    bool ok = true;
    tree_check_node(t->root, NULL, &count, &ok);
    /* Global order: in-order walk must be strictly increasing. */
    const ts_node *prev = NULL;
    for (const ts_node *n = ts_tree_first(t); n; n = ts_tree_next(n)) {
        if (prev && ts_node_cmp(prev, n->k0, n->k1, n->k2) >= 0)
            ok = false;
        prev = n;
    }
    if (count != t->count)
        ok = false;
    return ok ? 0 : -1;
}
