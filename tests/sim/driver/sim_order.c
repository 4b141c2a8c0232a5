/* Simulated CUDA driver: the device's order, modelled.
 *
 * The worker threads run each stream's work for real (bytes move), but when that happens
 * depends on how the host schedules threads: on a loaded machine two streams that a GPU would
 * run side by side may run one after the other, and a race that a GPU would lose may be won.
 * So the simulator also models, when work is queued, what a device would do with it:
 *
 * - Time. Every op gets a modelled start and end: it starts when its stream's previous op
 *   ended, after every op it was made to wait for (legacy stream rules, stream waits), and not
 *   before the host last learnt that work had finished (a synchronise, a successful query);
 *   work costs TESSERA_SIM_OP_DELAY_US (1 us when unset); markers (event records, stream
 *   waits), stream-ordered frees, graph memory nodes and the parts of synchronous calls cost
 *   nothing
 *   (TESSERA_SIM_MARKER_DELAY=1 charges markers). Event timestamps are modelled ends, so cuEventElapsedTime answers what a device
 *   with those costs would, whatever the host's load.
 * - Happens-before. Each stream carries a vector clock over the streams (one component per
 *   stream, counting its ops); an op takes its stream's clock, merges the clocks of what it
 *   waits for and of what the host knew finished, and ticks its own component. Events keep the
 *   clock of their record, and the host merges the clocks of what it synchronised
 *   with (one clock for all host threads: see host_vc).
 * - Races. Copies and memsets log the device bytes they read and write (the last
 *   SIM_ORDER_LOG accesses). An access that overlaps a logged one of another stream, where one
 *   of them writes and neither happens before the other, is a race: counted on the device
 *   (tessera_sim_counters.races, TESSERA_SIM_REPORT) and, with TESSERA_SIM_VERBOSE, described.
 *   This is what a reuse of memory still in use by queued work is, found from the order the
 *   program and its allocator set up, not from the bytes a lucky schedule left behind.
 *
 * Limits: the first SIM_ORDER_STREAMS streams of a process are tracked (later ones keep time
 * but take part in no race check, counted in untracked_streams); host functions and kernels
 * touch no modelled bytes; the host's own reads and writes of pinned or managed memory are not
 * logged. Everything here runs with sim_g.mu held. */
#include "sim.h"

#include <string.h>

/* One logged access: [lo, hi) on device memory, by stream ix at its clock value tick. */
struct order_access {
    uintptr_t lo, hi;
    uint32_t tick;
    uint16_t ix;
    bool write;
};

static struct {
    unsigned nstreams;                           /* indices handed out */
    /* What the host knows finished, for all its threads together: threads of a program pass
     * what they learnt to each other (locks, joins, the allocator's own lock) in ways the
     * driver cannot see, so one thread's synchronise counts for all. Races between host threads
     * that never synchronise with each other are therefore not found, and none is invented. */
    struct sim_vclock host_vc;
    uint64_t host_now_ns;                        /* the latest modelled end it waited for */
    struct order_access log[SIM_ORDER_LOG];      /* a ring of the last accesses */
    size_t head, count;
} order;

void sim_order_stream_init(struct sim_stream *s)
{
    memset(&s->order, 0, sizeof s->order);
    s->order.ix = order.nstreams < SIM_ORDER_STREAMS ? (int)order.nstreams++ : -1;
}

static void clock_merge(struct sim_vclock *dst, const struct sim_vclock *src)
{
    for (unsigned i = 0; i < order.nstreams; i++)
        if (src->c[i] > dst->c[i])
            dst->c[i] = src->c[i];
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

void sim_order_begin(struct sim_order_op *o, const struct sim_stream *s)
{
    o->vc = s->order.vc;
    clock_merge(&o->vc, &order.host_vc);
    o->start = max_u64(s->order.end_ns, order.host_now_ns);
}

void sim_order_after_stream(struct sim_order_op *o, const struct sim_stream *d)
{
    clock_merge(&o->vc, &d->order.vc);
    o->start = max_u64(o->start, d->order.end_ns);
}

void sim_order_after_event(struct sim_order_op *o, const struct sim_event *e)
{
    if (!e->recorded)
        return;
    clock_merge(&o->vc, &e->order.vc);
    o->start = max_u64(o->start, e->order.time_ns);
}

/* The device bytes an op reads (r) and writes (w); false when it touches none. */
static bool op_ranges(const struct sim_op *op, uintptr_t r[2], uintptr_t w[2])
{
    r[0] = r[1] = 0;
    switch (op->type) {
    case SIM_OP_COPY:
        r[0] = (uintptr_t)op->u.copy.src;
        r[1] = r[0] + op->u.copy.n;
        w[0] = (uintptr_t)op->u.copy.dst;
        w[1] = w[0] + op->u.copy.n;
        return op->u.copy.n > 0;
    case SIM_OP_SET8:
    case SIM_OP_SET32:
        w[0] = (uintptr_t)op->u.set.dst;
        w[1] = w[0] + op->u.set.count * (op->type == SIM_OP_SET32 ? 4 : 1);
        return op->u.set.count > 0;
    default:
        return false;
    }
}

static void race_found(const struct sim_stream *s, const struct order_access *x, uintptr_t lo,
                       uintptr_t hi, bool write)
{
    int dev = s->ctx ? s->ctx->device : 0;
    sim_g.dev[dev].ctr.races++;
    if (sim_g.verbose && sim_g.dev[dev].ctr.races <= 8)
        sim_log("race on device %d: stream #%d %s [%#lx, %#lx) while stream #%u's %s of "
                "[%#lx, %#lx) is not ordered before it", dev, s->order.ix,
                write ? "writes" : "reads", (unsigned long)lo, (unsigned long)hi,
                (unsigned)x->ix, x->write ? "write" : "read", (unsigned long)x->lo,
                (unsigned long)x->hi);
}

static void check_and_log(const struct sim_stream *s, const struct sim_vclock *vc, uint32_t tick,
                          uintptr_t lo, uintptr_t hi, bool write)
{
    if (lo >= hi)
        return;
    for (size_t k = 0; k < order.count; k++) {
        const struct order_access *x =
            &order.log[(order.head + SIM_ORDER_LOG - 1 - k) % SIM_ORDER_LOG];
        if (x->ix == (unsigned)s->order.ix || !(x->write || write) || x->hi <= lo ||
            hi <= x->lo)
            continue;
        if (x->tick > vc->c[x->ix]) {
            race_found(s, x, lo, hi, write);
            break; /* one race per access is enough to count */
        }
    }
    order.log[order.head] = (struct order_access){lo, hi, tick, (uint16_t)s->order.ix, write};
    order.head = (order.head + 1) % SIM_ORDER_LOG;
    if (order.count < SIM_ORDER_LOG)
        order.count++;
}

uint64_t sim_order_cost_ns(const struct sim_op *op)
{
    bool marker = op->type == SIM_OP_EVENT || op->type == SIM_OP_WAIT;
    /* stream-ordered frees and graph memory nodes give or take memory: bookkeeping, no work */
    bool memory = op->type == SIM_OP_FREE || op->type == SIM_OP_GALLOC || op->type == SIM_OP_GFREE;
    if (op->sync || memory || (marker && !sim_g.marker_delay))
        return 0;
    return (uint64_t)(sim_g.op_delay_us ? sim_g.op_delay_us : 1) * 1000u;
}

void sim_order_commit(struct sim_order_op *o, struct sim_stream *s, struct sim_op *op)
{
    o->end = o->start + sim_order_cost_ns(op);
    if (s->order.ix >= 0) {
        uint32_t tick = ++o->vc.c[s->order.ix];
        uintptr_t r[2], w[2];
        if (op_ranges(op, r, w)) {
            check_and_log(s, &o->vc, tick, r[0], r[1], false);
            check_and_log(s, &o->vc, tick, w[0], w[1], true);
        }
    } else if (s->ctx) {
        sim_g.dev[s->ctx->device].ctr.untracked_streams += s->order.counted ? 0 : 1;
        s->order.counted = true;
    }
    s->order.vc = o->vc;
    s->order.end_ns = o->end;
    if (op->type == SIM_OP_EVENT) {
        op->u.ev.ev->order.vc = o->vc;
        op->u.ev.ev->order.time_ns = o->end;
    }
}

void sim_order_host_after(const struct sim_order_op *o)
{
    clock_merge(&order.host_vc, &o->vc);
    order.host_now_ns = max_u64(order.host_now_ns, o->end);
}

void sim_order_host_after_stream(const struct sim_stream *s)
{
    clock_merge(&order.host_vc, &s->order.vc);
    order.host_now_ns = max_u64(order.host_now_ns, s->order.end_ns);
}

void sim_order_host_after_event(const struct sim_event *e)
{
    if (!e->recorded)
        return;
    clock_merge(&order.host_vc, &e->order.vc);
    order.host_now_ns = max_u64(order.host_now_ns, e->order.time_ns);
}
