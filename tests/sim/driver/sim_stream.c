/* Simulated CUDA driver: streams (one worker thread each), events, stream capture.
 *
 * Every stream has a FIFO of operations executed in order by its own worker thread.
 * An operation may carry dependencies (stream, sequence number): the worker starts it only
 * when each named stream has completed that many operations. Legacy default stream
 * semantics are expressed with such dependencies, computed when the operation is queued:
 *   - an op on the legacy stream depends on all work queued so far on the blocking streams
 *     (user streams without CU_STREAM_NON_BLOCKING and per-thread default streams) of its
 *     context;
 *   - an op on a blocking stream depends on all work queued so far on the legacy stream.
 * One mutex (sim_g.mu) protects everything; one condition variable is broadcast whenever a
 * stream completes an operation. Operations run without the lock. */
#include "sim.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool is_blocking(const struct sim_stream *s)
{
    return s->kind == SIM_STREAM_PTDS ||
           (s->kind == SIM_STREAM_USER && !(s->flags & CU_STREAM_NON_BLOCKING));
}

static void ops_free(struct sim_op *op)
{
    while (op) {
        struct sim_op *next = op->next;
        free(op);
        op = next;
    }
}

static void capture_unref(struct sim_capture *c)
{
    if (c && --c->refs == 0) {
        sim_graph_capture_drop(c); /* allocation nodes no graph took */
        ops_free(c->ops_head);
        free(c->grefs);
        free(c);
    }
}

/* A copy of a recorded op, to queue or to keep: the work only, no deps, no place in a list. */
static struct sim_op *op_clone(const struct sim_op *op)
{
    struct sim_op *n = sim_op_new(op->type);
    if (n)
        n->u = op->u;
    return n;
}

/* Graphs replay work that computes on memory and host functions, nothing that holds a
 * reference (events, frees). */
static bool op_replayable(const struct sim_op *op)
{
    return op->type == SIM_OP_COPY || op->type == SIM_OP_SET8 || op->type == SIM_OP_SET32 ||
           op->type == SIM_OP_KERNEL || op->type == SIM_OP_HOSTFN;
}

static void event_unref(struct sim_event *e)
{
    if (--e->refs == 0) {
        if (e->rec_stream)
            sim_stream_unref(e->rec_stream);
        sim_xevent_release(e);
        capture_unref(e->cap);
        e->magic = 0;
        free(e);
    }
}

void sim_stream_unref(struct sim_stream *s)
{
    if (--s->refs == 0) {
        capture_unref(s->cap);
        s->magic = 0;
        free(s);
    }
}

struct sim_op *sim_op_new(enum sim_op_type t)
{
    struct sim_op *op = calloc(1, sizeof *op);
    if (op)
        op->type = t;
    return op;
}

static void op_release(struct sim_op *op)
{
    for (size_t i = 0; i < op->ndeps; i++)
        sim_stream_unref(op->deps[i].s);
    free(op->deps);
    free(op);
}

/* An op that will never run: give back what it holds. */
static void op_discard(struct sim_op *op)
{
    if (op->type == SIM_OP_EVENT)
        event_unref(op->u.ev.ev);
    else if (op->type == SIM_OP_WAIT && op->u.wait.ev)
        event_unref(op->u.wait.ev);
    else if (op->type == SIM_OP_FREE)
        op->u.free.a->free_pending = false;
    else if (op->type == SIM_OP_GFREE) { /* the launch that queued it failed here */
        struct sim_alloc *a = sim_mem_alloc_at((CUdeviceptr)op->u.gnode.g.base);
        if (a && a->serial == op->u.gnode.g.serial && a->g_gen == op->u.gnode.gen)
            a->free_pending = false;
    }
    op_release(op);
}

static CUresult add_dep(struct sim_op *op, struct sim_stream *d, uint64_t seq)
{
    if (d->completed >= seq)
        return CUDA_SUCCESS;
    struct sim_dep *nd = sim_grow(op->deps, &op->cap_deps, op->ndeps + 1, sizeof *nd);
    if (!nd)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->deps = nd;
    nd[op->ndeps++] = (struct sim_dep){d, seq};
    d->refs++;
    return CUDA_SUCCESS;
}

static bool deps_ready(const struct sim_op *op)
{
    for (size_t i = 0; i < op->ndeps; i++)
        if (op->deps[i].s->completed < op->deps[i].seq)
            return false;
    return true;
}

static void op_execute(struct sim_op *op)
{
    switch (op->type) {
    case SIM_OP_COPY:
        memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
        break;
    case SIM_OP_SET8:
        memset(op->u.set.dst, (int)(op->u.set.val & 0xffu), op->u.set.count);
        break;
    case SIM_OP_SET32: {
        uint32_t *p = op->u.set.dst;
        for (size_t i = 0; i < op->u.set.count; i++)
            p[i] = op->u.set.val;
        break;
    }
    case SIM_OP_HOSTFN: {
        struct sim_tls *t = sim_tls();
        t->in_callback = true;
        if (op->u.host.cb)
            op->u.host.cb(op->u.host.stream, CUDA_SUCCESS, op->u.host.data);
        else
            op->u.host.fn(op->u.host.data);
        t->in_callback = false;
        break;
    }
    case SIM_OP_WAIT:
        if (op->u.wait.ev) /* another process's record: its stream is not one of ours */
            sim_xevent_wait(op->u.wait.ev, op->u.wait.xgen);
        break;
    case SIM_OP_EVENT:
    case SIM_OP_FREE:
    case SIM_OP_KERNEL:
    case SIM_OP_GALLOC:
    case SIM_OP_GFREE:
        break;
    }
}

/* lock held */
static void op_finish(struct sim_op *op)
{
    if (op->type == SIM_OP_EVENT) {
        struct sim_event *e = op->u.ev.ev;
        if (e->gen == op->u.ev.gen)
            e->timed = true; /* its timestamp is modelled (sim_order.c) */
        if (op->u.ev.xgen)
            sim_xevent_done(e, op->u.ev.xgen);
        event_unref(e);
    } else if (op->type == SIM_OP_WAIT && op->u.wait.ev) {
        event_unref(op->u.wait.ev);
    } else if (op->type == SIM_OP_FREE) {
        sim_alloc_free(op->u.free.a, op->u.free.gen);
    } else if (op->type == SIM_OP_GFREE) {
        sim_graph_op_finish(op);
    }
}

static void ctx_remove_stream(struct sim_ctx *c, struct sim_stream *s)
{
    for (size_t i = 0; i < c->nstreams; i++) {
        if (c->streams[i] == s) {
            c->streams[i] = c->streams[--c->nstreams];
            return;
        }
    }
}

static void *worker(void *arg)
{
    struct sim_stream *s = arg;
    sim_lock();
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&sim_g.cv, &sim_g.mu);
        if (!s->head)
            break;
        struct sim_op *op = s->head;
        while (!deps_ready(op))
            pthread_cond_wait(&sim_g.cv, &sim_g.mu);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        /* Markers (event records, stream waits) take next to no device time on a GPU: only
         * work pays TESSERA_SIM_OP_DELAY_US, or else two streams ordered by events would look
         * serialised where a GPU overlaps them. TESSERA_SIM_MARKER_DELAY=1 charges them too. */
        bool marker = op->type == SIM_OP_EVENT || op->type == SIM_OP_WAIT;
        unsigned delay = op->sync || (marker && !sim_g.marker_delay) ? 0 : sim_g.op_delay_us;
        sim_unlock();
        sim_sleep_us(delay);
        op_execute(op);
        sim_lock();
        op_finish(op);
        s->completed = op->seq;
        op_release(op);
        pthread_cond_broadcast(&sim_g.cv);
    }
    if (s->ctx) {
        ctx_remove_stream(s->ctx, s);
        s->ctx = NULL;
    }
    sim_stream_unref(s);
    sim_unlock();
    return NULL;
}

struct sim_stream *sim_stream_new(struct sim_ctx *ctx, enum sim_stream_kind kind,
                                  unsigned flags, int priority, CUresult *err)
{
    if (kind != SIM_STREAM_LEGACY) {
        struct sim_stream **ns =
            sim_grow(ctx->streams, &ctx->cap_streams, ctx->nstreams + 1, sizeof *ns);
        if (!ns) {
            *err = CUDA_ERROR_OUT_OF_MEMORY;
            return NULL;
        }
        ctx->streams = ns;
    }
    struct sim_stream *s = calloc(1, sizeof *s);
    if (!s) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    s->magic = SIM_MAGIC_STREAM;
    s->kind = kind;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->refs = 2; /* owner + worker */
    sim_order_stream_init(s);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    int rc = pthread_create(&th, &attr, worker, s);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        sim_log("pthread_create: %s", strerror(rc));
        free(s);
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    if (kind != SIM_STREAM_LEGACY)
        ctx->streams[ctx->nstreams++] = s;
    return s;
}

void sim_stream_stop(struct sim_stream *s)
{
    s->stop = true;
    pthread_cond_broadcast(&sim_g.cv);
}

/* ---- handles ------------------------------------------------------------------------- */

static bool registry_remove_stream(struct sim_stream *s)
{
    for (struct sim_stream **pp = &sim_g.streams; *pp; pp = &(*pp)->reg_next) {
        if (*pp == s) {
            *pp = s->reg_next;
            s->reg_next = NULL;
            return true;
        }
    }
    return false;
}

static bool registry_remove_event(struct sim_event *e)
{
    for (struct sim_event **pp = &sim_g.events; *pp; pp = &(*pp)->reg_next) {
        if (*pp == e) {
            *pp = e->reg_next;
            e->reg_next = NULL;
            return true;
        }
    }
    return false;
}

static struct sim_event *event_lookup(CUevent h)
{
    for (struct sim_event *e = sim_g.events; e; e = e->reg_next)
        if (e == (struct sim_event *)h)
            return e;
    return NULL;
}

static struct sim_stream *ptds_get(struct sim_ctx *cur, CUresult *err)
{
    struct sim_tls *t = sim_tls();
    struct sim_stream *found = NULL;
    size_t w = 0;
    for (size_t i = 0; i < t->nptds; i++) {
        struct sim_ptds e = t->ptds[i];
        if (!e.s->ctx) { /* its context went away */
            sim_stream_unref(e.s);
            continue;
        }
        if (e.ctx_uid == cur->uid && e.s->ctx == cur)
            found = e.s;
        t->ptds[w++] = e;
    }
    t->nptds = w;
    if (found)
        return found;
    struct sim_ptds *np = sim_grow(t->ptds, &t->cap_ptds, t->nptds + 1, sizeof *np);
    if (!np) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    t->ptds = np;
    struct sim_stream *s = sim_stream_new(cur, SIM_STREAM_PTDS, 0, 0, err);
    if (!s)
        return NULL;
    t->ptds[t->nptds++] = (struct sim_ptds){cur->uid, s};
    sim_tls_arm(t);
    return s;
}

void sim_tls_release(struct sim_tls *t)
{
    sim_lock();
    for (size_t i = 0; i < t->nptds; i++) {
        sim_stream_stop(t->ptds[i].s);
        sim_stream_unref(t->ptds[i].s);
    }
    free(t->ptds);
    t->ptds = NULL;
    t->nptds = t->cap_ptds = 0;
    t->key_set = false;
    sim_unlock();
}

/* lock held */
static CUresult resolve_locked(CUstream h, bool ptsz, struct sim_stream **out)
{
    if (!h)
        h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        struct sim_ctx *cur;
        CUresult r = sim_current_ctx(&cur);
        if (r != CUDA_SUCCESS)
            return r;
        if (h == CU_STREAM_LEGACY) {
            if (!cur->legacy) {
                cur->legacy = sim_stream_new(cur, SIM_STREAM_LEGACY, 0, 0, &r);
                if (!cur->legacy)
                    return r;
            }
            *out = cur->legacy;
            return CUDA_SUCCESS;
        }
        *out = ptds_get(cur, &r);
        return *out ? CUDA_SUCCESS : r;
    }
    for (struct sim_stream *s = sim_g.streams; s; s = s->reg_next) {
        if (s == (struct sim_stream *)h) {
            if (!s->ctx || !s->ctx->active)
                return CUDA_ERROR_INVALID_CONTEXT;
            *out = s;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

/* ---- capture rules ------------------------------------------------------------------- */

/* cuStreamCaptureMode documentation: a thread in GLOBAL mode may not make unsafe calls
 * while it has an ongoing non-relaxed capture or any other thread has an ongoing GLOBAL
 * capture; THREAD_LOCAL only considers its own captures; RELAXED is never prohibited. */
static bool cap_forbids(const struct sim_capture *c, const struct sim_tls *t)
{
    if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return false;
    if (t->capmode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    if (c->owner_tid == t->tid)
        return c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return t->capmode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
}

static void invalidate(struct sim_capture *c)
{
    if (c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        sim_log("capture %llu invalidated", (unsigned long long)c->id);
    c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

CUresult sim_capture_unsafe(CUresult code)
{
    struct sim_tls *t = sim_tls();
    bool hit = false;
    for (struct sim_capture *c = sim_g.captures; c; c = c->next) {
        if (cap_forbids(c, t)) {
            invalidate(c);
            hit = true;
        }
    }
    return hit ? code : CUDA_SUCCESS;
}

static bool capture_has_blocking_stream(const struct sim_capture *c)
{
    if (!c->ctx)
        return false;
    for (size_t i = 0; i < c->ctx->nstreams; i++) {
        const struct sim_stream *s = c->ctx->streams[i];
        if (s->cap == c && is_blocking(s))
            return true;
    }
    return false;
}

/* Work on the legacy stream would depend on every capturing blocking stream of its context
 * (whatever the capture mode). Queueing legacy work is fine otherwise, as on a real GPU;
 * synchronising with the legacy stream is an unsafe call besides (see stream_sync_check). */
CUresult sim_capture_legacy(struct sim_ctx *ctx)
{
    bool hit = false;
    for (struct sim_capture *c = sim_g.captures; c; c = c->next) {
        if (c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE && c->ctx == ctx &&
            capture_has_blocking_stream(c)) {
            invalidate(c);
            hit = true;
        }
    }
    return hit ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

/* End capture c: every stream leaves it, it leaves the active list. */
static void capture_end(struct sim_capture *c)
{
    for (struct sim_capture **pp = &sim_g.captures; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            capture_unref(c); /* the active list's reference */
            break;
        }
    }
    c->ended = true;
    for (struct sim_ctx *x = sim_g.ctxs; x; x = x->next_all) {
        for (size_t i = 0; i < x->nstreams; i++) {
            struct sim_stream *s = x->streams[i];
            if (s->cap == c) {
                s->cap = NULL;
                capture_unref(c);
            }
        }
    }
}

/* ---- queueing ------------------------------------------------------------------------ */

static CUresult submit_locked(struct sim_stream *s, struct sim_op *op, bool sync)
{
    CUresult r = CUDA_SUCCESS;
    struct sim_ctx *ctx = s->ctx;
    op->sync = sync;
    if (s->kind == SIM_STREAM_LEGACY) {
        r = sim_capture_legacy(ctx);
        if (r != CUDA_SUCCESS)
            goto fail;
    }
    if (s->cap) {
        struct sim_capture *c = s->cap;
        if (sync) {
            invalidate(c);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            goto fail;
        }
        if (c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            goto fail;
        }
        /* recorded into the capture, executed only when a graph made from it is launched */
        c->nops++;
        if (op->type == SIM_OP_EVENT) {
            struct sim_event *e = op->u.ev.ev;
            capture_unref(e->cap);
            e->cap = c;
            c->refs++;
        }
        struct sim_op *kept = op_replayable(op) ? op_clone(op) : NULL;
        if (kept) {
            if (c->ops_tail)
                c->ops_tail->next = kept;
            else
                c->ops_head = kept;
            c->ops_tail = kept;
        }
        op_discard(op);
        return CUDA_SUCCESS;
    }
    struct sim_order_op o;
    sim_order_begin(&o, s);
    if (s->kind == SIM_STREAM_LEGACY) {
        for (size_t i = 0; i < ctx->nstreams && r == CUDA_SUCCESS; i++) {
            struct sim_stream *b = ctx->streams[i];
            if (is_blocking(b)) {
                sim_order_after_stream(&o, b);
                r = add_dep(op, b, b->submitted);
            }
        }
    } else if (is_blocking(s) && ctx->legacy) {
        sim_order_after_stream(&o, ctx->legacy);
        r = add_dep(op, ctx->legacy, ctx->legacy->submitted);
    }
    if (r != CUDA_SUCCESS)
        goto fail;
    if (op->type == SIM_OP_WAIT && op->after_event)
        sim_order_after_event(&o, op->after_event);
    uint64_t seq = op->seq = ++s->submitted;
    if (op->type == SIM_OP_EVENT) {
        struct sim_event *e = op->u.ev.ev;
        e->gen++;
        op->u.ev.gen = e->gen;
        e->recorded = true;
        e->timed = false;
        if (e->rec_stream)
            sim_stream_unref(e->rec_stream);
        e->rec_stream = s;
        s->refs++;
        e->rec_seq = seq;
        capture_unref(e->cap);
        e->cap = NULL;
        if (e->x) /* and in the completion every process sees */
            op->u.ev.xgen = sim_xevent_record(e);
    }
    sim_order_commit(&o, s, op);
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&sim_g.cv);
    if (sync) {
        s->refs++;
        while (s->completed < seq)
            pthread_cond_wait(&sim_g.cv, &sim_g.mu);
        sim_stream_unref(s);
        sim_order_host_after(&o);
    }
    return CUDA_SUCCESS;
fail:
    op_discard(op);
    return r;
}

CUresult sim_submit(CUstream h, bool ptsz, struct sim_op *op, bool sync)
{
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (sync && sim_tls()->in_callback) {
        free(op);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    sim_lock();
    struct sim_stream *s;
    CUresult r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = submit_locked(s, op, sync);
    else
        free(op);
    sim_unlock();
    return r;
}

static void snap_push(struct sim_dep **snap, size_t *n, size_t *cap, struct sim_stream *s,
                      bool *overflow)
{
    if (s->completed >= s->submitted)
        return;
    struct sim_dep *ns = sim_grow(*snap, cap, *n + 1, sizeof *ns);
    if (!ns) {
        *overflow = true;
        return;
    }
    *snap = ns;
    ns[(*n)++] = (struct sim_dep){s, s->submitted};
    s->refs++;
}

static void snap_ctx(struct sim_ctx *c, struct sim_dep **snap, size_t *n, size_t *cap,
                     bool *overflow)
{
    if (c->legacy)
        snap_push(snap, n, cap, c->legacy, overflow);
    for (size_t i = 0; i < c->nstreams; i++)
        snap_push(snap, n, cap, c->streams[i], overflow);
}

static bool ctx_busy(const struct sim_ctx *c)
{
    if (c->legacy && c->legacy->completed < c->legacy->submitted)
        return true;
    for (size_t i = 0; i < c->nstreams; i++)
        if (c->streams[i]->completed < c->streams[i]->submitted)
            return true;
    return false;
}

/* The host waited for every stream of c: it knows their work finished. */
static void order_host_after_ctx(const struct sim_ctx *c)
{
    if (c->legacy)
        sim_order_host_after_stream(c->legacy);
    for (size_t i = 0; i < c->nstreams; i++)
        sim_order_host_after_stream(c->streams[i]);
}

void sim_wait_ctx_idle(struct sim_ctx *ctx)
{
    struct sim_dep *snap = NULL;
    size_t n = 0, cap = 0;
    bool overflow = false;
    if (ctx) {
        snap_ctx(ctx, &snap, &n, &cap, &overflow);
        order_host_after_ctx(ctx);
    } else {
        for (struct sim_ctx *c = sim_g.ctxs; c; c = c->next_all) {
            snap_ctx(c, &snap, &n, &cap, &overflow);
            order_host_after_ctx(c);
        }
    }
    for (size_t i = 0; i < n; i++)
        while (snap[i].s->completed < snap[i].seq)
            pthread_cond_wait(&sim_g.cv, &sim_g.mu);
    for (size_t i = 0; i < n; i++)
        sim_stream_unref(snap[i].s);
    free(snap);
    if (overflow) { /* out of memory for the snapshot: wait for complete idleness */
        for (;;) {
            bool busy = false;
            for (struct sim_ctx *c = sim_g.ctxs; c && !busy; c = c->next_all)
                if (!ctx || c == ctx)
                    busy = ctx_busy(c);
            if (!busy)
                break;
            pthread_cond_wait(&sim_g.cv, &sim_g.mu);
        }
    }
}

void sim_ctx_drop_streams(struct sim_ctx *ctx)
{
    for (struct sim_capture *c = sim_g.captures, *next; c; c = next) {
        next = c->next;
        if (c->ctx == ctx)
            capture_end(c);
    }
    if (ctx->legacy) {
        struct sim_stream *l = ctx->legacy;
        ctx->legacy = NULL;
        l->ctx = NULL;
        sim_stream_stop(l);
        sim_stream_unref(l);
    }
    for (size_t i = 0; i < ctx->nstreams; i++) {
        struct sim_stream *s = ctx->streams[i];
        s->ctx = NULL;
        sim_stream_stop(s);
        if (s->kind == SIM_STREAM_USER && registry_remove_stream(s))
            sim_stream_unref(s); /* the handle's reference */
    }
    ctx->nstreams = 0;
    for (struct sim_event *e = sim_g.events, *next; e; e = next) {
        next = e->reg_next;
        if (e->ctx == ctx) {
            registry_remove_event(e);
            event_unref(e);
        }
    }
}

/* ---- stream API ---------------------------------------------------------------------- */

CUresult sim_stream_create(CUstream *ph, unsigned flags, int priority)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if (priority < -5) /* H100 range: [-5, 0], clamped like the driver does */
        priority = -5;
    if (priority > 0)
        priority = 0;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS) {
        struct sim_stream *s = sim_stream_new(cur, SIM_STREAM_USER, flags, priority, &r);
        if (s) {
            s->reg_next = sim_g.streams;
            sim_g.streams = s;
            *ph = (CUstream)s;
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_stream_destroy(CUstream h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_stream *s = (struct sim_stream *)h;
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD || !registry_remove_stream(s)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s->cap) { /* destroying a capturing stream ends its capture, invalidated */
        struct sim_capture *c = s->cap;
        invalidate(c);
        if (c->origin == s)
            capture_end(c);
    }
    /* queued work still completes; the worker exits once the queue is empty */
    sim_stream_stop(s);
    sim_stream_unref(s);
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult sim_stream_get_flags(CUstream h, bool ptsz, unsigned *flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        *flags = s->flags;
    sim_unlock();
    return r;
}

static bool legacy_idle(const struct sim_stream *s)
{
    if (s->completed < s->submitted)
        return false;
    if (s->kind == SIM_STREAM_LEGACY && s->ctx) {
        for (size_t i = 0; i < s->ctx->nstreams; i++) {
            const struct sim_stream *b = s->ctx->streams[i];
            if (is_blocking(b) && b->completed < b->submitted)
                return false;
        }
    }
    return true;
}

/* capture checks shared by stream query / synchronize */
static CUresult stream_sync_capture_check(struct sim_stream *s)
{
    if (s->cap) {
        invalidate(s->cap);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->kind == SIM_STREAM_LEGACY) {
        CUresult r = sim_capture_legacy(s->ctx);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

CUresult sim_stream_query(CUstream h, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = stream_sync_capture_check(s);
    if (r == CUDA_SUCCESS && !legacy_idle(s))
        r = CUDA_ERROR_NOT_READY;
    if (r == CUDA_SUCCESS) { /* the host learns that the work finished */
        sim_order_host_after_stream(s);
        if (s->kind == SIM_STREAM_LEGACY && s->ctx)
            for (size_t i = 0; i < s->ctx->nstreams; i++)
                if (is_blocking(s->ctx->streams[i]))
                    sim_order_host_after_stream(s->ctx->streams[i]);
    }
    sim_unlock();
    return r;
}

CUresult sim_stream_synchronize(CUstream h, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS)
        r = stream_sync_capture_check(s);
    if (r == CUDA_SUCCESS) {
        struct sim_dep *snap = NULL;
        size_t n = 0, cap = 0;
        bool overflow = false;
        snap_push(&snap, &n, &cap, s, &overflow);
        sim_order_host_after_stream(s);
        if (s->kind == SIM_STREAM_LEGACY) /* the legacy stream also waits for blocking ones */
            for (size_t i = 0; i < s->ctx->nstreams; i++)
                if (is_blocking(s->ctx->streams[i])) {
                    snap_push(&snap, &n, &cap, s->ctx->streams[i], &overflow);
                    sim_order_host_after_stream(s->ctx->streams[i]);
                }
        for (size_t i = 0; i < n; i++)
            while (snap[i].s->completed < snap[i].seq)
                pthread_cond_wait(&sim_g.cv, &sim_g.mu);
        for (size_t i = 0; i < n; i++)
            sim_stream_unref(snap[i].s);
        free(snap);
        if (overflow) {
            s->refs++;
            while (!legacy_idle(s))
                pthread_cond_wait(&sim_g.cv, &sim_g.mu);
            sim_stream_unref(s);
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_WAIT);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    struct sim_stream *s;
    struct sim_event *e = event_lookup(ev);
    r = e ? resolve_locked(h, ptsz, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (r != CUDA_SUCCESS) {
        free(op);
        goto out;
    }
    if (e->cap && !e->cap->ended) {
        /* waiting on an event recorded in a capture: the stream joins that capture */
        struct sim_capture *c = e->cap;
        free(op);
        if (s->cap == c) {
            c->nops++;
        } else if (s->cap) {
            r = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        } else if (s->kind == SIM_STREAM_LEGACY) {
            invalidate(c);
            r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else {
            s->cap = c;
            c->refs++;
            c->nops++;
        }
        goto out;
    }
    uint32_t xgen = e->x ? sim_xevent_pending(e) : 0;
    if (s->cap && (e->recorded || xgen) && !(flags & CU_EVENT_WAIT_EXTERNAL)) {
        /* a dependency on work outside the capture (an H100 refuses it and invalidates) */
        free(op);
        invalidate(s->cap);
        r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        goto out;
    }
    if (xgen) { /* the record to wait for may run in another process: the worker waits */
        e->refs++;
        op->u.wait.ev = e;
        op->u.wait.xgen = xgen;
    } else if (e->recorded && !e->x) {
        r = add_dep(op, e->rec_stream, e->rec_seq);
        op->after_event = e;
    }
    if (r == CUDA_SUCCESS)
        r = submit_locked(s, op, false);
    else
        op_release(op);
out:
    sim_unlock();
    return r;
}

CUresult sim_stream_is_capturing(CUstream h, bool ptsz, CUstreamCaptureStatus *st)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS) {
        *st = CU_STREAM_CAPTURE_STATUS_NONE;
        if (s->kind == SIM_STREAM_LEGACY) {
            for (struct sim_capture *c = sim_g.captures; c; c = c->next)
                if (c->ctx == s->ctx && c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE &&
                    capture_has_blocking_stream(c))
                    r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        } else if (s->cap) {
            *st = s->cap->status == CU_STREAM_CAPTURE_STATUS_ACTIVE
                      ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                      : CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_stream_begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS && s->kind == SIM_STREAM_LEGACY)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS && s->cap)
        r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS) {
        struct sim_capture *c = calloc(1, sizeof *c);
        if (!c) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
            c->mode = mode;
            c->owner_tid = sim_tls()->tid;
            c->id = ++sim_g.capture_ids;
            c->refs = 2; /* the stream + the active list */
            c->ctx = s->ctx;
            c->origin = s;
            c->next = sim_g.captures;
            sim_g.captures = c;
            s->cap = c;
            sim_log("capture %llu begins (mode %d)", (unsigned long long)c->id, (int)mode);
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_stream_end_capture(CUstream h, CUgraph *g, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    struct sim_capture *c = r == CUDA_SUCCESS ? s->cap : NULL;
    if (r == CUDA_SUCCESS && !c)
        r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && c->origin != s) {
        invalidate(c);
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    if (r == CUDA_SUCCESS && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        c->owner_tid != sim_tls()->tid) {
        /* the real driver terminates the capture too: the owner's end finds none */
        invalidate(c);
        capture_end(c);
        *g = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    if (r == CUDA_SUCCESS) {
        bool ok = c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
        size_t nops = c->nops;
        struct sim_op *ops = c->ops_head; /* the graph's from here on */
        c->ops_head = c->ops_tail = NULL;
        c->refs++;
        capture_end(c);
        sim_log("capture %llu ends: %s, %zu ops", (unsigned long long)c->id,
                ok ? "ok" : "invalidated", nops);
        *g = NULL;
        if (!ok) {
            ops_free(ops);
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            r = sim_graph_from_capture(c, ops, nops, g);
        }
        capture_unref(c);
    }
    sim_unlock();
    return r;
}

CUresult sim_thread_exchange_capture_mode(CUstreamCaptureMode *mode)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_tls *t = sim_tls();
    CUstreamCaptureMode old = t->capmode;
    t->capmode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- memory operations --------------------------------------------------------------- */

CUresult sim_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n, int dir, CUstream h, bool ptsz,
                    bool sync)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sync && sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    if (n && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS && n) {
        bool ddev = dir == SIM_HTOD || dir == SIM_DTOD;
        bool sdev = dir == SIM_DTOH || dir == SIM_DTOD;
        r = sim_check_range((uintptr_t)dst, n, ddev, true);
        if (r == CUDA_SUCCESS)
            r = sim_check_range((uintptr_t)src, n, sdev, false);
    }
    if (r == CUDA_SUCCESS && n) {
        struct sim_op *op = sim_op_new(SIM_OP_COPY);
        if (!op) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->u.copy.dst = (void *)(uintptr_t)dst;
            op->u.copy.src = (const void *)(uintptr_t)src;
            op->u.copy.n = n;
            r = submit_locked(s, op, sync);
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_memset(CUdeviceptr dst, uint32_t val, size_t count, int width, CUstream h,
                    bool ptsz, bool sync)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sync && sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    if (count && (!dst || (width == 4 && (dst & 3u)) || count > SIZE_MAX / (size_t)width))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS && count)
        r = sim_check_range((uintptr_t)dst, count * (size_t)width, true, true);
    if (r == CUDA_SUCCESS && count) {
        struct sim_op *op = sim_op_new(width == 4 ? SIM_OP_SET32 : SIM_OP_SET8);
        if (!op) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->u.set.dst = (void *)(uintptr_t)dst;
            op->u.set.val = val;
            op->u.set.count = count;
            r = submit_locked(s, op, sync);
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_launch_host_func(CUstream h, CUhostFn fn, void *data, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = fn;
    op->u.host.data = data;
    return sim_submit(h, ptsz, op, false);
}

CUresult sim_stream_add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned flags,
                                 bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!cb || flags != 0) /* flags are reserved: 0 */
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.cb = cb;
    op->u.host.stream = h;
    op->u.host.data = data;
    return sim_submit(h, ptsz, op, false);
}

/* Said once per process, whatever TESSERA_SIM_VERBOSE says: a program that checks its kernels'
 * results will find them wrong here, and the reason must not be a mystery. */
static void kernels_announce(void)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&said))
        return;
    static const char line[] = "tessera-sim: kernels are not executed on the simulated device: "
                               "launches are queued in stream order and compute nothing\n";
    ssize_t n = write(STDERR_FILENO, line, sizeof line - 1);
    (void)n;
}

CUresult sim_launch_kernel(CUfunction f, const unsigned dims[6], CUstream h, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < 6; i++)
        if (dims[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
    kernels_announce();
    struct sim_op *op = sim_op_new(SIM_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return sim_submit(h, ptsz, op, false);
}

CUresult sim_mem_alloc_async(CUdeviceptr *out, size_t size, CUstream h, bool ptsz)
{
    return sim_mem_alloc_pool(out, size, NULL, h, ptsz);
}

/* cuMemAllocFromPoolAsync (pool NULL: the device's current pool, cuMemAllocAsync): the pool must
 * be live and on the stream's device. */
CUresult sim_mem_alloc_pool(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream h,
                            bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    r = resolve_locked(h, ptsz, &s);
    struct sim_mempool *mp = NULL;
    if (r == CUDA_SUCCESS && pool &&
        (!(mp = sim_pool_lookup(pool)) || mp->destroyed || mp->imported ||
         mp->device != s->ctx->device))
        r = CUDA_ERROR_INVALID_VALUE; /* an imported pool serves no allocations */
    if (r == CUDA_SUCCESS && s->cap) { /* an allocation node of the graph being captured */
        r = sim_graph_capture_alloc(s, size, out);
        sim_unlock();
        return r;
    }
    if (r == CUDA_SUCCESS && s->kind == SIM_STREAM_LEGACY)
        r = sim_capture_legacy(s->ctx);
    if (r == CUDA_SUCCESS)
        r = sim_mem_alloc_locked(s->ctx, size, SIM_ALLOC_ASYNC, out);
    struct sim_alloc *a = r == CUDA_SUCCESS && mp ? sim_mem_alloc_at(*out) : NULL;
    if (a && a->mpool != mp) {
        sim_pool_charge(a, -1);
        a->mpool = mp;
        sim_pool_charge(a, 1);
    }
    sim_unlock();
    return r;
}

CUresult sim_mem_free_async(CUdeviceptr p, CUstream h, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_op *op = sim_op_new(SIM_OP_FREE);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    struct sim_stream *s;
    struct sim_alloc *a = NULL;
    r = resolve_locked(h, ptsz, &s);
    if (r == CUDA_SUCCESS && s->cap) { /* a free node: of a graph allocation only */
        free(op);
        r = sim_graph_capture_free(s, p);
        sim_unlock();
        return r;
    }
    if (r == CUDA_SUCCESS)
        r = sim_mem_free_async_prepare(p, &a);
    if (r == CUDA_SUCCESS) {
        op->u.free.a = a;
        op->u.free.gen = a->g_gen;
        r = submit_locked(s, op, false); /* discards (and un-marks a) on failure */
    } else {
        free(op);
    }
    sim_unlock();
    return r;
}

/* ---- events -------------------------------------------------------------------------- */

CUresult sim_event_create(CUevent *pe, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned valid = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!pe || (flags & ~valid) ||
        ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *cur;
    struct sim_event *e = NULL;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        r = sim_event_new_locked(cur, flags, &e);
    if (r == CUDA_SUCCESS && (flags & CU_EVENT_INTERPROCESS)) {
        r = sim_xevent_create(e);
        if (r != CUDA_SUCCESS) {
            registry_remove_event(e);
            event_unref(e);
        }
    }
    if (r == CUDA_SUCCESS)
        *pe = (CUevent)e;
    sim_unlock();
    return r;
}

CUresult sim_event_new_locked(struct sim_ctx *ctx, unsigned flags, struct sim_event **out)
{
    struct sim_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = SIM_MAGIC_EVENT;
    e->ctx = ctx;
    e->flags = flags;
    e->refs = 1;
    e->reg_next = sim_g.events;
    sim_g.events = e;
    *out = e;
    return CUDA_SUCCESS;
}

CUresult sim_event_destroy(CUevent h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_event *e = event_lookup(h);
    if (e) {
        registry_remove_event(e);
        event_unref(e); /* pending records keep it alive until they ran */
    } else {
        r = CUDA_ERROR_INVALID_HANDLE;
    }
    sim_unlock();
    return r;
}

CUresult sim_event_record(CUevent h, CUstream st, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_op *op = sim_op_new(SIM_OP_EVENT);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    struct sim_stream *s;
    struct sim_event *e = event_lookup(h);
    r = e ? resolve_locked(st, ptsz, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS) {
        e->refs++;
        op->u.ev.ev = e;
        r = submit_locked(s, op, false);
    } else {
        free(op);
    }
    sim_unlock();
    return r;
}

static CUresult event_check(struct sim_event *e)
{
    if (e->cap && !e->cap->ended) { /* an H100 also invalidates that capture */
        invalidate(e->cap);
        return CUDA_ERROR_CAPTURED_EVENT;
    }
    return sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

static bool event_done(const struct sim_event *e)
{
    if (e->x) /* its last record may be another process's */
        return sim_xevent_pending(e) == 0;
    return !e->recorded || e->rec_stream->completed >= e->rec_seq;
}

CUresult sim_event_query(CUevent h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_event *e = event_lookup(h);
    r = e ? event_check(e) : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS && !event_done(e))
        r = CUDA_ERROR_NOT_READY;
    if (r == CUDA_SUCCESS)
        sim_order_host_after_event(e);
    sim_unlock();
    return r;
}

CUresult sim_event_synchronize(CUevent h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_event *e = event_lookup(h);
    r = e ? event_check(e) : CUDA_ERROR_INVALID_HANDLE;
    uint32_t xgen = r == CUDA_SUCCESS && e->x ? sim_xevent_pending(e) : 0;
    if (xgen) { /* wait without the lock: the record may run in another process */
        e->refs++;
        sim_unlock();
        sim_xevent_wait(e, xgen);
        sim_lock();
        event_unref(e);
    } else if (r == CUDA_SUCCESS && e->recorded && !e->x) {
        struct sim_stream *s = e->rec_stream;
        uint64_t seq = e->rec_seq;
        s->refs++;
        while (s->completed < seq)
            pthread_cond_wait(&sim_g.cv, &sim_g.mu);
        sim_stream_unref(s);
        sim_order_host_after_event(e);
    }
    sim_unlock();
    return r;
}

CUresult sim_event_elapsed(float *ms, CUevent ha, CUevent hb)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_event *a = event_lookup(ha), *b = event_lookup(hb);
    if (!a || !b || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || !a->recorded ||
        !b->recorded)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if ((a->cap && !a->cap->ended) || (b->cap && !b->cap->ended))
        r = CUDA_ERROR_CAPTURED_EVENT;
    else if (!event_done(a) || !event_done(b) || !a->timed || !b->timed)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(((double)b->order.time_ns - (double)a->order.time_ns) / 1e6);
    sim_unlock();
    return r;
}

/* ---- what sim_graph.c, sim_limits.c and sim_ipc_event.c use ------------------------------- */

struct sim_event *sim_event_lookup(CUevent h)
{
    return event_lookup(h);
}

CUresult sim_resolve_locked(CUstream h, bool ptsz, struct sim_stream **out)
{
    return resolve_locked(h, ptsz, out);
}

CUresult sim_submit_locked(struct sim_stream *s, struct sim_op *op, bool sync)
{
    return submit_locked(s, op, sync);
}

struct sim_op *sim_op_clone(const struct sim_op *op)
{
    return op_clone(op);
}

void sim_ops_free(struct sim_op *op)
{
    ops_free(op);
}
