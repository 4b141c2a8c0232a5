/* Simulated CUDA driver: graphs made by stream capture (instantiate, launch, destroy) and their
 * memory nodes (cuMemAllocAsync / cuMemFreeAsync on a capturing stream; cuDeviceGraphMemTrim,
 * cuDeviceGetGraphMemAttribute / cuDeviceSetGraphMemAttribute).
 *
 * A graph is one chain of work, replayed on the stream it is launched on. An allocation node
 * gets its address when it is captured: a range of the device's address space that stays the
 * node's for the life of the graph and of its executable graph (a graph with memory nodes has
 * at most one at a time). The memory behind it exists from the launch that allocates it:
 * launching backs the range with device pages (counted like any allocation; the launch fails
 * with CUDA_ERROR_OUT_OF_MEMORY when they do not fit) and marks the allocation live. It is
 * freed by a free node of this or another graph, or by cuMemFree / cuMemFreeAsync outside any
 * graph, in stream order; a launch while the graph's allocation is still live fails with
 * CUDA_ERROR_INVALID_VALUE unless the executable graph was instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, which frees it first. Freed graph memory stays
 * reserved for the next launch (the graph_* attributes and bytes_in_use keep it) until
 * cuDeviceGraphMemTrim gives back what no live allocation uses. A free node may only free a
 * graph allocation: any other pointer is CUDA_ERROR_INVALID_VALUE. A graph with memory nodes
 * cannot be launched into a capture (as a child graph): CUDA_ERROR_NOT_SUPPORTED. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define INSTANTIATE_FLAGS                                                                       \
    (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |     \
     CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

/* ---- graph allocations ---------------------------------------------------------------- */

/* lock held: the graph allocation g names, or NULL once its context took it */
static struct sim_alloc *gref_alloc(struct sim_gref g)
{
    struct sim_alloc *a = sim_mem_alloc_at((CUdeviceptr)g.base);
    return a && a->kind == SIM_ALLOC_GRAPH && a->serial == g.serial ? a : NULL;
}

static uint64_t bytes_of(const struct sim_alloc *a)
{
    return (uint64_t)a->pages * SIM_PAGE;
}

/* the device's graph memory: used (live allocations) and reserved (backed), with their marks */
static void graph_account(struct sim_device *d, int64_t used, int64_t reserved)
{
    d->graph_used = (uint64_t)((int64_t)d->graph_used + used);
    d->graph_reserved = (uint64_t)((int64_t)d->graph_reserved + reserved);
    if (d->graph_used > d->graph_used_high)
        d->graph_used_high = d->graph_used;
    if (d->graph_reserved > d->graph_reserved_high)
        d->graph_reserved_high = d->graph_reserved;
}

static void set_live(struct sim_alloc *a, bool live)
{
    struct sim_device *d = &sim_g.dev[a->device];
    if (live == a->g_live)
        return;
    a->g_live = live;
    graph_account(d, live ? (int64_t)bytes_of(a) : -(int64_t)bytes_of(a), 0);
    if (live)
        d->ctr.graph_alloc_calls++;
    else
        d->ctr.graph_free_calls++;
}

void sim_graph_mem_forget(struct sim_alloc *a)
{
    struct sim_device *d = &sim_g.dev[a->device];
    if (a->g_live)
        graph_account(d, -(int64_t)bytes_of(a), 0);
    if (a->g_backed) {
        sim_mem_unback(d, a->base, a->pages);
        graph_account(d, 0, -(int64_t)bytes_of(a));
    }
}

/* lock held: one holder less; the record goes once nothing holds it and it is not allocated */
static void gref_put(struct sim_gref g)
{
    struct sim_alloc *a = gref_alloc(g);
    if (a && --a->g_refs == 0 && !a->g_live && !a->free_pending)
        sim_alloc_release(a, false);
}

void sim_graph_mem_free(struct sim_alloc *a, uint64_t gen)
{
    if (a->g_gen != gen) /* a later launch allocated it again meanwhile: that one stays */
        return;
    a->free_pending = false;
    set_live(a, false);
    if (a->g_refs == 0) /* its graphs are gone: so is its address */
        sim_alloc_release(a, true);
}

void sim_graph_op_finish(const struct sim_op *op)
{
    struct sim_alloc *a = gref_alloc(op->u.gnode.g);
    if (a)
        sim_graph_mem_free(a, op->u.gnode.gen);
}

/* ---- capture --------------------------------------------------------------------------- */

static CUresult capture_append(struct sim_capture *c, enum sim_op_type t, struct sim_gref g)
{
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    struct sim_op *op = sim_op_new(t);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.gnode.g = g;
    if (c->ops_tail)
        c->ops_tail->next = op;
    else
        c->ops_head = op;
    c->ops_tail = op;
    c->nops++;
    c->mem_nodes = true;
    return CUDA_SUCCESS;
}

CUresult sim_graph_capture_alloc(struct sim_stream *s, size_t size, CUdeviceptr *out)
{
    struct sim_capture *c = s->cap;
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    struct sim_gref *ng = sim_grow(c->grefs, &c->cap_grefs, c->ngrefs + 1, sizeof *ng);
    if (!ng)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->grefs = ng;
    /* the address now; the memory at each launch */
    struct sim_alloc *a = sim_mem_place_locked(&sim_g.dev[s->ctx->device], size, sim_pages(size));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->kind = SIM_ALLOC_GRAPH;
    a->ctx = s->ctx;
    a->g_refs = 1; /* the capture's, then its graph's */
    struct sim_gref g = {a->base, a->serial};
    CUresult r = capture_append(c, SIM_OP_GALLOC, g);
    if (r != CUDA_SUCCESS) {
        sim_alloc_release(a, false);
        return r;
    }
    c->grefs[c->ngrefs++] = g;
    *out = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

CUresult sim_graph_capture_free(struct sim_stream *s, CUdeviceptr p)
{
    struct sim_alloc *a = sim_mem_alloc_at(p);
    if (!a || a->kind != SIM_ALLOC_GRAPH) { /* a free node frees a graph allocation only */
        sim_log("cuMemFreeAsync of %#llx on a capturing stream: not a graph allocation",
                (unsigned long long)p);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return capture_append(s->cap, SIM_OP_GFREE, (struct sim_gref){a->base, a->serial});
}

void sim_graph_capture_drop(struct sim_capture *c)
{
    for (size_t i = 0; i < c->ngrefs; i++)
        gref_put(c->grefs[i]);
    c->ngrefs = 0;
}

/* ---- graphs ---------------------------------------------------------------------------- */

CUresult sim_graph_from_capture(struct sim_capture *c, struct sim_op *ops, size_t nops,
                                CUgraph *out)
{
    struct sim_graph *gr = calloc(1, sizeof *gr);
    if (!gr) {
        sim_ops_free(ops);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gr->magic = SIM_MAGIC_GRAPH;
    gr->nops = nops;
    gr->ops = ops;
    gr->grefs = c->grefs; /* the capture's holds become the graph's */
    gr->ngrefs = c->ngrefs;
    gr->mem_nodes = c->mem_nodes;
    c->grefs = NULL;
    c->ngrefs = c->cap_grefs = 0;
    *out = (CUgraph)gr;
    return CUDA_SUCCESS;
}

CUresult sim_graph_destroy(CUgraph g)
{
    struct sim_graph *gr = (struct sim_graph *)g;
    if (!gr || gr->magic != SIM_MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    gr->magic = 0;
    if (gr->exec)
        gr->exec->graph = NULL;
    for (size_t i = 0; i < gr->ngrefs; i++)
        gref_put(gr->grefs[i]);
    sim_unlock();
    free(gr->grefs);
    sim_ops_free(gr->ops);
    free(gr);
    return CUDA_SUCCESS;
}

static void exec_free(struct sim_graph_exec *x)
{
    if (x->graph)
        x->graph->exec = NULL;
    for (size_t i = 0; i < x->ngrefs; i++)
        gref_put(x->grefs[i]);
    free(x->grefs);
    sim_ops_free(x->ops);
    free(x);
}

CUresult sim_graph_instantiate(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_graph *gr = (struct sim_graph *)g;
    if (!exec || !gr || gr->magic != SIM_MAGIC_GRAPH || (flags & ~(unsigned long long)INSTANTIATE_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph_exec *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = SIM_MAGIC_GRAPH_EXEC;
    x->auto_free = flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
    sim_lock();
    if (gr->mem_nodes && gr->exec) {
        r = CUDA_ERROR_INVALID_VALUE; /* at most one executable graph with memory nodes */
    } else if (gr->ngrefs && !(x->grefs = malloc(gr->ngrefs * sizeof *x->grefs))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        for (size_t i = 0; i < gr->ngrefs; i++) { /* the executable graph holds them too */
            struct sim_alloc *a = gref_alloc(gr->grefs[i]);
            if (a)
                a->g_refs++;
            x->grefs[x->ngrefs++] = gr->grefs[i];
        }
        struct sim_op **tail = &x->ops;
        for (const struct sim_op *op = gr->ops; op && r == CUDA_SUCCESS; op = op->next) {
            if ((*tail = sim_op_clone(op)))
                tail = &(*tail)->next;
            else
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r == CUDA_SUCCESS && gr->mem_nodes) {
            gr->exec = x;
            x->graph = gr;
        }
    }
    if (r != CUDA_SUCCESS)
        exec_free(x);
    sim_unlock();
    if (r == CUDA_SUCCESS)
        *exec = (CUgraphExec)x;
    return r;
}

/* lock held: can this launch run its memory nodes? Walks them in order, as the launch will:
 * each allocation must not be live already (unless auto free, or a free of it is queued), each
 * free must find its allocation live; the memory to back must fit. */
static CUresult launch_check(const struct sim_graph_exec *x)
{
    enum { NONE, ALLOCATED, FREED };
    CUresult r = CUDA_SUCCESS;
    size_t need = 0;
    struct sim_device *d = NULL;
    for (const struct sim_op *op = x->ops; op && r == CUDA_SUCCESS; op = op->next) {
        if (op->type != SIM_OP_GALLOC && op->type != SIM_OP_GFREE)
            continue;
        struct sim_alloc *a = gref_alloc(op->u.gnode.g);
        if (!a) {
            r = CUDA_ERROR_INVALID_VALUE; /* its context is gone */
        } else if (op->type == SIM_OP_GALLOC) {
            if (a->g_mark == ALLOCATED ||
                (a->g_mark == NONE && a->g_live && !a->free_pending && !x->auto_free))
                r = CUDA_ERROR_INVALID_VALUE; /* still allocated from an earlier launch */
            if (!a->g_backed && a->g_mark == NONE)
                need += a->pages;
            a->g_mark = ALLOCATED;
            d = &sim_g.dev[a->device];
        } else {
            bool live = a->g_mark == ALLOCATED || (a->g_mark == NONE && a->g_live && !a->free_pending);
            if (!live)
                r = CUDA_ERROR_INVALID_VALUE; /* freeing what is not allocated */
            a->g_mark = FREED;
        }
    }
    for (const struct sim_op *op = x->ops; op; op = op->next) {
        struct sim_alloc *a = op->type == SIM_OP_GALLOC || op->type == SIM_OP_GFREE
                                  ? gref_alloc(op->u.gnode.g)
                                  : NULL;
        if (a)
            a->g_mark = NONE;
    }
    if (r == CUDA_SUCCESS && d && need > sim_device_free_pages(d)) {
        d->ctr.failed_allocs++;
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

/* lock held: an allocation node, as its launch is queued: the memory exists from here on */
static void launch_alloc(struct sim_alloc *a, bool *ok)
{
    struct sim_device *d = &sim_g.dev[a->device];
    if (a->g_live)
        set_live(a, false); /* auto free on launch: the last allocation is freed first */
    if (!a->g_backed) {
        if (!sim_mem_back(d, a->base, a->pages)) {
            *ok = false;
            return;
        }
        a->g_backed = true;
        graph_account(d, 0, (int64_t)bytes_of(a));
    }
    a->free_pending = false;
    a->g_gen++;
    set_live(a, true);
}

CUresult sim_graph_launch(CUgraphExec exec, CUstream h, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const struct sim_graph_exec *x = (const struct sim_graph_exec *)exec;
    if (!x || x->magic != SIM_MAGIC_GRAPH_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = sim_resolve_locked(h, ptsz, &s);
    bool mem = false;
    for (const struct sim_op *op = x->ops; op && !mem; op = op->next)
        mem = op->type == SIM_OP_GALLOC || op->type == SIM_OP_GFREE;
    if (r == CUDA_SUCCESS && mem && s->cap)
        r = CUDA_ERROR_NOT_SUPPORTED; /* memory nodes in a child graph */
    if (r == CUDA_SUCCESS)
        r = launch_check(x);
    /* each op is queued as the stream's own async work: stream order, the legacy stream's
     * implicit synchronisation and TESSERA_SIM_OP_DELAY_US apply as to any other */
    for (const struct sim_op *op = x->ops; op && r == CUDA_SUCCESS; op = op->next) {
        struct sim_alloc *a = op->type == SIM_OP_GALLOC || op->type == SIM_OP_GFREE
                                  ? gref_alloc(op->u.gnode.g)
                                  : NULL;
        if (op->type == SIM_OP_GALLOC) {
            bool ok = true;
            launch_alloc(a, &ok);
            if (!ok)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            continue;
        }
        struct sim_op *n = sim_op_clone(op);
        if (!n) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (a) { /* a free node: frees this allocation when the stream reaches it */
            a->free_pending = true;
            n->u.gnode.gen = a->g_gen;
        }
        r = sim_submit_locked(s, n, false);
    }
    sim_unlock();
    return r;
}

CUresult sim_graph_exec_destroy(CUgraphExec exec)
{
    struct sim_graph_exec *x = (struct sim_graph_exec *)exec;
    if (!x || x->magic != SIM_MAGIC_GRAPH_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    x->magic = 0;
    exec_free(x);
    sim_unlock();
    return CUDA_SUCCESS;
}

/* ---- the device's graph memory --------------------------------------------------------- */

CUresult sim_graph_mem_trim(CUdevice dev)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    sim_wait_ctx_idle(NULL); /* nothing queued may still use what is given back */
    struct sim_device *d = &sim_g.dev[dev];
    for (size_t i = 0; i < d->nallocs; i++) {
        struct sim_alloc *a = d->allocs[i];
        if (a->kind == SIM_ALLOC_GRAPH && a->g_backed && !a->g_live) {
            sim_mem_unback(d, a->base, a->pages);
            a->g_backed = false;
            graph_account(d, 0, -(int64_t)bytes_of(a));
        }
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

/* The four attributes, 64-bit values; a high mark is reset with 0 only, to the current value. */
CUresult sim_graph_mem_attribute(CUdevice dev, CUgraphMem_attribute attr, void *value, bool set)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_device *d = &sim_g.dev[dev];
    uint64_t *field = attr == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT       ? &d->graph_used
                      : attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH        ? &d->graph_used_high
                      : attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ? &d->graph_reserved
                      : attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH    ? &d->graph_reserved_high
                                                                       : NULL;
    cuuint64_t v = 0;
    if (!field) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (!set) {
        v = *field;
        memcpy(value, &v, sizeof v);
    } else {
        memcpy(&v, value, sizeof v);
        if (v != 0 || (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH &&
                       attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
            r = CUDA_ERROR_INVALID_VALUE; /* only the marks, only reset */
        else
            *field = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH ? d->graph_used : d->graph_reserved;
    }
    sim_unlock();
    return r;
}
