/* Planned memory (plan:True, core/plan.c) over the device model. */
#include "tests/unit/fixture.h"

#include "core/plan.h"

/* --- the step every test runs ---------------------------------------------------------------
 * 16 allocations: L (8 MiB) lives through the step; then for i = 1..7 a pair A_i (i MiB) and
 * B_i (2 MiB), allocated in that order and freed in reverse; then C (1 MiB); C and L are freed
 * last. Positions: L 0, A_i 2i - 1, B_i 2i, C 15.
 *
 * What greedy by size with lifetimes makes of it (the rule in plan.h, by hand): L at 0; A_7..A_2
 * each overlap only L: 8 MiB; B_1 overlaps L and A_1 (not placed yet): 8; B_i (i >= 2) sits on
 * top of A_i: 8 + i; A_1 overlaps L and B_1 (8..10): 10; C overlaps only L: 8. The range ends at
 * B_7's end, 17 MiB (a 18 MiB segment), which is also the lower bound: L + A_7 + B_7. */
#define STEP 16
static const size_t expected_mib[STEP] = {0, 10, 8, 8, 10, 8, 11, 8, 12, 8, 13, 8, 14, 8, 15, 8};

/* Live allocations, to check that no two overlap: a byte written to one is never written
 * through another (the device model holds no data; disjointness is what keeps the bytes). */
typedef struct live_set {
    uintptr_t addr[64];
    size_t size[64];
    size_t n;
} live_set;

static void live_add(live_set *s, uintptr_t p, size_t size)
{
    for (size_t i = 0; i < s->n; i++)
        if (p < s->addr[i] + s->size[i] && s->addr[i] < p + size)
            fail_msg("%#lx (+%zu) overlaps the live %#lx (+%zu)", (unsigned long)p, size,
                     (unsigned long)s->addr[i], s->size[i]);
    assert_true(s->n < 64);
    s->addr[s->n] = p;
    s->size[s->n++] = size;
}

static void live_del(live_set *s, uintptr_t p)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->addr[i] == p) {
            s->addr[i] = s->addr[--s->n];
            s->size[i] = s->size[s->n];
            return;
        }
    fail_msg("%#lx is not live", (unsigned long)p);
}

static uintptr_t alloc_on(fixture *f, live_set *s, size_t size, uintptr_t stream)
{
    uintptr_t p = 0;
    assert_int_equal(ts_malloc(f->a, size, stream, &p), TS_OK);
    live_add(s, p, size);
    fx_check(f);
    return p;
}

static void free_of(fixture *f, live_set *s, uintptr_t p)
{
    live_del(s, p);
    fx_free(f, p);
}

/* Variations of the step: b_size replaces the B blocks' size when not 0 (a changed step), a3
 * A_3's (larger than planned), extra adds an unforeseen 3 MiB block after B_4, alive until C is
 * freed. B blocks go on stream b_stream, everything else on stream 1. */
typedef struct step_opts {
    size_t b_size, a3;
    bool extra;
    uintptr_t *carry; /* when set: a 4 MiB block allocated after C, freed after the next L */
    uintptr_t *keep;  /* when set: a block of keep_mib (2 MiB if 0) allocated after A_7, left live */
    size_t keep_mib;
    uintptr_t *hold;  /* when set: A_7 and B_7 are not freed, hold[0] and hold[1] receive them */
    bool hold_b7;     /* with hold: B_7 alone is kept (hold[1]), A_7 freed */
    uintptr_t b_stream;
} step_opts;

static void run_step(fixture *f, live_set *s, const step_opts *o, uintptr_t pos[STEP])
{
    const size_t b_size = o->b_size ? o->b_size : 2 * MiB;
    const uintptr_t bs = o->b_stream ? o->b_stream : 1;
    uintptr_t x = 0;
    uintptr_t L = pos[0] = alloc_on(f, s, 8 * MiB, 1);
    if (o->carry && *o->carry)
        free_of(f, s, *o->carry);
    for (size_t i = 1; i <= 7; i++) {
        size_t a_size = i == 3 && o->a3 ? o->a3 : i * MiB;
        uintptr_t A = pos[2 * i - 1] = alloc_on(f, s, a_size, 1);
        uintptr_t B = pos[2 * i] = alloc_on(f, s, b_size, bs);
        if (i == 4 && o->extra)
            x = alloc_on(f, s, 3 * MiB, 1);
        if (i == 7 && o->keep)
            *o->keep = alloc_on(f, s, (o->keep_mib ? o->keep_mib : 2) * MiB, 1);
        if (i == 7 && o->hold) {
            o->hold[0] = o->hold_b7 ? 0 : A;
            o->hold[1] = B;
            if (o->hold_b7)
                free_of(f, s, A);
            continue;
        }
        free_of(f, s, B);
        free_of(f, s, A);
    }
    uintptr_t C = pos[15] = alloc_on(f, s, 1 * MiB, 1);
    if (o->carry)
        *o->carry = alloc_on(f, s, 4 * MiB, 1);
    free_of(f, s, C);
    if (x)
        free_of(f, s, x);
    free_of(f, s, L);
}

/* The device model with its stream-ordering operations (reuse_fence:order, the default). */
static void open_plan(fixture *f)
{
    ts_config cfg;
    ts_config_defaults(&cfg);
    cfg.plan = true;
    fx_open(f, 4 * GiB, &cfg, false, true);
}

/* Steps 1..3 learn (a parameter allocated in step 1 stays with the normal policy). The first
 * boundary seen to repeat is the free of B_1 in step 3 (the bytes held then recur once a step).
 * The step is packed from the best boundary of that period, where the fewest bytes are held: the
 * end of step 2 (only the parameter). So it is step 2 as it was. Its range is made at the next
 * such boundary, the end of step 3, once step 3's blocks are freed and what the normal policy
 * cached for them can go back; step 4, run here too, is the first served, entirely, as
 * documented above. */
static uintptr_t learn(fixture *f, live_set *s, const step_opts *o)
{
    uintptr_t pos[STEP];
    uintptr_t param = alloc_on(f, s, 6 * MiB, 1);
    for (int k = 0; k < 4; k++)
        run_step(f, s, o, pos);
    return param;
}

static void assert_planned(fixture *f, const uintptr_t pos[STEP], const size_t mib[STEP],
                           size_t range_mib)
{
    ts_segment_info seg;
    assert_int_equal(ts_lookup(f->a, pos[0], &seg, NULL), TS_OK);
    assert_int_equal(seg.size, range_mib * MiB);
    for (int k = 0; k < STEP; k++)
        if (pos[k] != seg.addr + mib[k] * MiB)
            fail_msg("position %d at offset %ld MiB, planned %zu", k,
                     (long)((intptr_t)(pos[k] - seg.addr) / (intptr_t)MiB), mib[k]);
}

/* Run one more step and check that the plan served every position of it, at offsets mib of a
 * range of range_mib. */
static void step_served(fixture *f, live_set *s, const step_opts *o, uintptr_t pos[STEP],
                        const size_t mib[STEP], size_t range_mib)
{
    const int64_t hits = fx_stats(f)->num_plan_hits;
    run_step(f, s, o, pos);
    assert_int_equal(fx_stats(f)->num_plan_hits - hits, STEP);
    assert_planned(f, pos, mib, range_mib);
}

/* --- the packer alone ---------------------------------------------------------------------- */

static void test_pack_greedy_by_size(void **state)
{
    (void)state;
    /* the step above, in event times */
    ts_plan_item it[STEP];
    uint64_t t = 1;
    it[0] = (ts_plan_item){8 * MiB, t++, 0};
    for (size_t i = 1; i <= 7; i++) {
        it[2 * i - 1] = (ts_plan_item){i * MiB, t++, 0};
        it[2 * i] = (ts_plan_item){2 * MiB, t++, 0};
        it[2 * i].end = t++;
        it[2 * i - 1].end = t++;
    }
    it[15] = (ts_plan_item){1 * MiB, t++, 0};
    it[15].end = t++;
    it[0].end = t++;
    uint64_t off[STEP], lb = 0;
    assert_int_equal(ts_plan_pack(it, STEP, off, &lb), 17 * MiB);
    assert_int_equal(lb, 17 * MiB);
    for (int k = 0; k < STEP; k++)
        assert_int_equal(off[k], expected_mib[k] * MiB);
    /* ties: equal sizes at disjoint times share an offset; overlapping ones stack, the earlier
     * start lower */
    ts_plan_item two[3] = {{4096, 1, 3}, {4096, 2, 4}, {4096, 5, 6}};
    assert_int_equal(ts_plan_pack(two, 3, off, &lb), 8192);
    assert_int_equal(off[0], 0);
    assert_int_equal(off[1], 4096);
    assert_int_equal(off[2], 0);
    assert_int_equal(lb, 8192);
    /* best fit: the smallest gap that holds the block, not the lowest. T1, T2, T3, T4 and T5
     * stack up (0, 50, 90, 120, 140); once T2 and T4 are gone, T6 sees gaps of 40 at 50 and of
     * 20 at 120: it takes the one of 20 (first fit would take 50) */
    const uint64_t u = 512;
    ts_plan_item gap[6] = {
        {50 * u, 1, 100}, {40 * u, 1, 10}, {30 * u, 1, 100},
        {20 * u, 1, 10},  {18 * u, 1, 100}, {18 * u, 50, 100},
    };
    assert_int_equal(ts_plan_pack(gap, 6, off, &lb), 158 * u);
    const uint64_t want[6] = {0, 50, 90, 120, 140, 120};
    for (int k = 0; k < 6; k++)
        assert_int_equal(off[k], want[k] * u);
    assert_int_equal(lb, 158 * u);
}

/* --- live ------------------------------------------------------------------------------------ */

static void test_plan_serves_the_repeated_step_exactly(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t param = learn(&f, &s, &o);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->plan_range_bytes, 18 * MiB);
    assert_int_equal(st->plan_lower_bound_bytes, 17 * MiB);
    assert_int_equal(st->num_plan_hits, STEP);
    assert_int_equal(st->num_plan_replans, 0);
    ts_devmodel_counters before, after;
    ts_devmodel_counters_get(f.dev, &before);
    for (int k = 0; k < 3; k++) {
        uintptr_t pos[STEP];
        run_step(&f, &s, &o, pos);
        assert_planned(&f, pos, expected_mib, 18);
    }
    ts_devmodel_counters_get(f.dev, &after);
    assert_int_equal(after.seg_allocs, before.seg_allocs); /* no driver call in the steady state */
    st = fx_stats(&f);
    assert_int_equal(st->num_plan_hits, 4 * STEP);
    assert_int_equal(st->num_plan_misses, 0);
    assert_int_equal(st->num_plan_replans, 0);
    /* the parameter stayed with the normal policy, outside the range */
    ts_segment_info seg;
    uintptr_t pos[STEP];
    run_step(&f, &s, &o, pos);
    assert_int_equal(ts_lookup(f.a, pos[0], &seg, NULL), TS_OK);
    assert_true(param < seg.addr || param >= seg.addr + seg.size);
    free_of(&f, &s, param);
    assert_int_equal(ts_empty_cache(f.a) >= 18 * MiB, true); /* the idle range goes back too */
    assert_int_equal(fx_stats(&f)->plan_range_bytes, 0);
    fx_close(&f);
}

static void test_plan_divergence_falls_back(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP];
    int64_t hits = fx_stats(&f)->num_plan_hits;
    run_step(&f, &s, &o, pos); /* served from the plan */
    assert_int_equal(fx_stats(&f)->num_plan_hits - hits, STEP);
    /* A_3 larger than its slot, and a block the plan never saw in the middle of the step */
    step_opts odd = {.a3 = 5 * MiB, .extra = true};
    run_step(&f, &s, &odd, pos);
    const tessera_device_stats *st = fx_stats(&f);
    assert_true(st->num_plan_misses >= 1);
    ts_segment_info range;
    assert_int_equal(ts_lookup(f.a, pos[0], &range, NULL), TS_OK);
    assert_int_equal(range.size, 18 * MiB);
    assert_true(pos[5] < range.addr || pos[5] >= range.addr + range.size); /* A_3: elsewhere */
    /* the ordinary step again: served from the plan once it is seen to repeat */
    for (int k = 0; k < 4; k++)
        run_step(&f, &s, &o, pos);
    step_served(&f, &s, &o, pos, expected_mib, 18);
    free_of(&f, &s, param);
    fx_close(&f);
}

static void test_plan_orders_reuse_across_streams(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    ts_devmodel_set_order(f.dev, TS_DEVMODEL_STREAMS);
    step_opts o = {.b_stream = 2}; /* the B blocks on a second stream */
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP];
    ts_devmodel_counters before, after;
    int64_t hits = fx_stats(&f)->num_plan_hits;
    const int64_t st_before = fx_stats(&f)->num_fences_recorded;
    ts_devmodel_counters_get(f.dev, &before);
    run_step(&f, &s, &o, pos);
    ts_devmodel_counters_get(f.dev, &after);
    assert_int_equal(fx_stats(&f)->num_plan_hits - hits, STEP);
    assert_planned(&f, pos, expected_mib, 18);
    /* A slot whose last occupant was freed after the last order point is handed out only after
     * a new order point, which also covers every free before it. In this step: L (where the
     * last step's L was freed), A_2..A_7 at 8 MiB (where A_i-1, or B_1 on the other stream, was
     * just freed) and C (where A_7 was): 8. */
    assert_int_equal(after.order_points - before.order_points, 8);
    assert_int_equal(after.order_points - before.order_points,
                     fx_stats(&f)->num_fences_recorded - st_before);
    free_of(&f, &s, param);
    fx_close(&f);
}

/* A block alive across the step boundary (a gradient kept to the next step) stays with the
 * normal policy: planning it with the lifetime it had inside one step would put it where the next
 * step's first blocks go, while it is still alive. */
static void test_plan_leaves_blocks_crossing_the_boundary(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    uintptr_t carry = 0;
    step_opts o = {.carry = &carry};
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP];
    run_step(&f, &s, &o, pos);
    const int64_t hits = fx_stats(&f)->num_plan_hits, misses = fx_stats(&f)->num_plan_misses;
    for (int k = 0; k < 3; k++)
        run_step(&f, &s, &o, pos);
    assert_int_equal(fx_stats(&f)->num_plan_hits - hits, 3 * STEP);
    assert_int_equal(fx_stats(&f)->num_plan_misses - misses, 0);
    ts_segment_info range;
    assert_int_equal(ts_lookup(f.a, pos[0], &range, NULL), TS_OK);
    assert_true(carry < range.addr || carry >= range.addr + range.size);
    free_of(&f, &s, carry);
    free_of(&f, &s, param);
    fx_close(&f);
}

static void test_plan_replans_when_the_step_changes(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP];
    run_step(&f, &s, &o, pos);
    assert_int_equal(fx_stats(&f)->num_plan_replans, 0);
    /* every B grows to 3 MiB: the old plan misses, the new step is confirmed after two steps */
    step_opts big = {.b_size = 3 * MiB};
    for (int k = 0; k < 3; k++)
        run_step(&f, &s, &big, pos);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_plan_replans, 1);
    /* by the same rule: L 0; A_7..A_4 at 8; then the 3 MiB blocks by start: B_1, B_2 and A_3 at
     * 8, B_i (i >= 3) on top of A_i at 8 + i; A_2 and A_1 on top of B_2 and B_1, at 11; C at 8.
     * The end is B_7's, 18 MiB, also the lower bound (L + A_7 + B_7): the range is reused. */
    static const size_t big_mib[STEP] = {0, 11, 8, 11, 8, 8, 11, 8, 12, 8, 13, 8, 14, 8, 15, 8};
    assert_int_equal(st->plan_range_bytes, 18 * MiB);
    assert_int_equal(st->plan_lower_bound_bytes, 18 * MiB);
    step_served(&f, &s, &big, pos, big_mib, 18);
    free_of(&f, &s, param);
    fx_close(&f);
}

/* A changed step is planned when it is confirmed even while the range still holds a block: the
 * new plan fits the range and takes it as it is; the slots the block overlaps miss (the normal
 * policy serves them) until it is freed, and then every position is served. */
static void test_plan_replans_into_a_busy_range(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP], held[2];
    step_opts hold = {.hold = held, .hold_b7 = true};
    run_step(&f, &s, &hold, pos); /* B_7 stays, at [15, 17) of the range */
    assert_planned(&f, pos, expected_mib, 18);
    step_opts big = {.b_size = 3 * MiB};
    for (int k = 0; k < 3; k++)
        run_step(&f, &s, &big, pos);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->num_plan_replans, 1);
    /* the big plan's B_5 at [13, 16), B_6 at [14, 17) and B_7 at [15, 18) overlap it: three
     * misses a step */
    static const size_t big_mib[STEP] = {0, 11, 8, 11, 8, 8, 11, 8, 12, 8, 13, 8, 14, 8, 15, 8};
    int64_t hits = st->num_plan_hits, misses = st->num_plan_misses;
    run_step(&f, &s, &big, pos);
    assert_int_equal(fx_stats(&f)->num_plan_hits - hits, STEP - 3);
    assert_int_equal(fx_stats(&f)->num_plan_misses - misses, 3);
    free_of(&f, &s, held[1]);
    step_served(&f, &s, &big, pos, big_mib, 18);
    assert_int_equal(fx_stats(&f)->plan_range_bytes, 18 * MiB);
    assert_int_equal(fx_stats(&f)->num_plan_replans, 1);
    free_of(&f, &s, param);
    fx_close(&f);
}

/* A plan stopped by misses (blocks it did not foresee hold most of its slots) starts again when
 * the same step is confirmed, without packing it again, and serves every position once they are
 * gone. A 40 MiB block allocated and freed first makes room, so that the normal policy serves
 * the misses without passing the peak (which would give the range up instead). */
static void test_plan_restarts_without_packing_again(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t pos[STEP], held[2];
    uintptr_t param = alloc_on(&f, &s, 6 * MiB, 1);
    free_of(&f, &s, alloc_on(&f, &s, 40 * MiB, 1));
    for (int k = 0; k < 4; k++)
        run_step(&f, &s, &o, pos);
    assert_planned(&f, pos, expected_mib, 18);
    step_opts hold = {.hold = held};
    run_step(&f, &s, &hold, pos); /* A_7 and B_7 stay: [8, 17), where 15 of 16 slots lie */
    const int64_t misses = fx_stats(&f)->num_plan_misses;
    for (int k = 0; k < 3; k++)
        run_step(&f, &s, &o, pos);
    const tessera_device_stats *st = fx_stats(&f);
    assert_true(st->num_plan_misses - misses > STEP / 2);
    assert_int_equal(st->plan_range_bytes, 18 * MiB); /* no growth past the peak: kept */
    assert_int_equal(st->num_plan_replans, 0);
    free_of(&f, &s, held[0]);
    free_of(&f, &s, held[1]);
    run_step(&f, &s, &o, pos);
    step_served(&f, &s, &o, pos, expected_mib, 18);
    assert_int_equal(fx_stats(&f)->num_plan_replans, 0);
    free_of(&f, &s, param);
    fx_close(&f);
}

/* No room, no plan: when what stays with the normal policy and a range would pass the most memory
 * the program has held, the step is left to the normal policy, and it is not tried again while
 * that peak stands (each try gives the normal policy's cache back to the device).
 *
 * Here a 5 MiB block Q kept from step 1 on lands in the second 20 MiB segment, so both segments
 * stay at the boundary: 40 MiB, whose free pieces (14 MiB beside the parameter, 15 beside Q) hold
 * the whole step. The learning peak is 42 MiB: 2 MiB of room, in which no block of the packed
 * step fits (L alone is 8 MiB at offset 0). */
static void test_plan_not_made_without_room(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    uintptr_t pos[STEP];
    uintptr_t param = alloc_on(&f, &s, 6 * MiB, 1);
    uintptr_t q = 0;
    step_opts first = {.keep = &q, .keep_mib = 5}, o = {0};
    run_step(&f, &s, &first, pos);
    for (int k = 0; k < 3; k++)
        run_step(&f, &s, &o, pos);
    ts_devmodel_counters before, after;
    ts_devmodel_counters_get(f.dev, &before);
    for (int k = 0; k < 3; k++)
        run_step(&f, &s, &o, pos);
    ts_devmodel_counters_get(f.dev, &after);
    const tessera_device_stats *st = fx_stats(&f);
    assert_int_equal(st->plan_range_bytes, 0);
    assert_int_equal(st->num_plan_hits, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].peak, 42 * MiB);
    assert_int_equal(after.seg_allocs, before.seg_allocs); /* not tried again: no churn */
    assert_int_equal(after.seg_frees, before.seg_frees);
    free_of(&f, &s, q);
    free_of(&f, &s, param);
    fx_close(&f);
}

/* A plan gives way to growth: when the normal policy must grow past the most memory the program
 * has held while the range exists, the range goes first (given back when empty, else handed to
 * the normal policy), so the plan never adds its range on top of a new peak. The first time, the
 * step is planned again as before; from the second, the new range leaves the normal policy the
 * room it lacked, here none is left, and the loop runs without a plan and without driver calls. */
static void test_plan_gives_way_to_growth(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP];
    const tessera_device_stats *st = fx_stats(&f);
    /* the normal policy keeps the parameter's 20 MiB segment, the range is 18 */
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 38 * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].peak, 42 * MiB);
    ts_devmodel_counters before, after;
    ts_devmodel_counters_get(f.dev, &before);
    uintptr_t big = alloc_on(&f, &s, 30 * MiB, 1); /* 38 + 30 would pass 42 */
    ts_devmodel_counters_get(f.dev, &after);
    st = fx_stats(&f);
    assert_int_equal(st->plan_range_bytes, 0);
    assert_int_equal(after.seg_frees - before.seg_frees, 1); /* the idle range, given back */
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].current, 50 * MiB);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].peak, 50 * MiB);
    free_of(&f, &s, big);
    for (int k = 0; k < 2; k++)
        run_step(&f, &s, &o, pos);
    step_served(&f, &s, &o, pos, expected_mib, 18); /* planned again: 20 + 18 below 50 */
    /* the big block again, and again each step: the range gives way a second time (the normal
     * policy lacked 26 MiB the first time), and the next would leave too little: no plan, and
     * once that is found, no driver call */
    int64_t peak = 0;
    for (int k = 0; k < 7; k++) {
        if (k == 5) {
            ts_devmodel_counters_get(f.dev, &before);
            peak = fx_stats(&f)->reserved_bytes[TESSERA_POOL_ALL].peak;
        }
        big = alloc_on(&f, &s, 30 * MiB, 1);
        free_of(&f, &s, big);
        run_step(&f, &s, &o, pos);
    }
    ts_devmodel_counters_get(f.dev, &after);
    st = fx_stats(&f);
    assert_int_equal(st->plan_range_bytes, 0);
    assert_int_equal(st->reserved_bytes[TESSERA_POOL_ALL].peak, peak);
    assert_int_equal(after.seg_allocs, before.seg_allocs);
    assert_int_equal(after.seg_frees, before.seg_frees);
    free_of(&f, &s, param);
    fx_close(&f);
}

/* Growth past the peak while the range holds blocks: the range cannot go back, so it becomes the
 * normal policy's (its free memory at once, the held blocks once freed) and the plan stops. */
static void test_plan_hands_a_busy_range_over(void **state)
{
    (void)state;
    fixture f;
    live_set s = {0};
    open_plan(&f);
    step_opts o = {0};
    uintptr_t param = learn(&f, &s, &o);
    uintptr_t pos[STEP], held[2];
    step_opts hold = {.hold = held};
    run_step(&f, &s, &hold, pos);
    ts_segment_info range;
    assert_int_equal(ts_lookup(f.a, pos[0], &range, NULL), TS_OK);
    uintptr_t big = alloc_on(&f, &s, 30 * MiB, 1); /* 40 + 30 would pass 42 */
    assert_int_equal(fx_stats(&f)->plan_range_bytes, 0);
    ts_devmodel_counters before, after;
    ts_devmodel_counters_get(f.dev, &before);
    uintptr_t low = alloc_on(&f, &s, 8 * MiB, 1); /* the range's free [0, 8), no new memory */
    assert_int_equal(low, range.addr);
    free_of(&f, &s, held[0]);
    free_of(&f, &s, held[1]);
    uintptr_t high = alloc_on(&f, &s, 10 * MiB, 1); /* [8, 18) once the blocks are freed */
    assert_int_equal(high, range.addr + 8 * MiB);
    ts_devmodel_counters_get(f.dev, &after);
    assert_int_equal(after.seg_allocs, before.seg_allocs);
    free_of(&f, &s, low);
    free_of(&f, &s, high);
    free_of(&f, &s, big);
    free_of(&f, &s, param);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_greedy_by_size),
        cmocka_unit_test(test_plan_serves_the_repeated_step_exactly),
        cmocka_unit_test(test_plan_divergence_falls_back),
        cmocka_unit_test(test_plan_orders_reuse_across_streams),
        cmocka_unit_test(test_plan_leaves_blocks_crossing_the_boundary),
        cmocka_unit_test(test_plan_replans_when_the_step_changes),
        cmocka_unit_test(test_plan_replans_into_a_busy_range),
        cmocka_unit_test(test_plan_restarts_without_packing_again),
        cmocka_unit_test(test_plan_not_made_without_room),
        cmocka_unit_test(test_plan_gives_way_to_growth),
        cmocka_unit_test(test_plan_hands_a_busy_range_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
