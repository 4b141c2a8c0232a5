/* bench-core: the allocator core's cached path, timed over the device model (no CUDA, no GPU).
 *
 * What one "pair" is:
 *   fixed SIZE  ts_malloc(SIZE) then ts_free of that pointer (after warm-up the block is cached:
 *               no device call happens while timing; the run checks and reports it)
 *   mix         a live set of --live allocations (1000) with sizes drawn from every allocation
 *               of the shared real traces (trace_sizes.h); one pair frees a random live one and
 *               allocates a random size in its place
 * Baselines, timed the same way: the loop's own cost (random numbers and indexing, no allocator),
 * one clock_gettime, an uncontended pthread mutex lock+unlock, glibc malloc+free of 64 B, and a
 * mutex lock+unlock with two threads contending (the default mutex the core uses, and glibc's
 * adaptive one, which spins briefly before sleeping).
 *
 * Timing: clock_gettime(CLOCK_MONOTONIC) around batches of --batch pairs (64); a sample is the
 * batch's time divided by its size, so percentiles are of 64-pair means (the timer's cost is
 * spread over 64 pairs). The "batch 1" rows time every pair alone: their tail is the real
 * per-pair tail, but every sample also carries one clock read (the "timer" row).
 * With --threads 2, both threads use ONE allocator (one mutex): rows give the per-thread
 * distribution (both threads' samples pooled) and the aggregate (wall time / all pairs).
 *
 * Usage: bench-core [--pairs N] [--batch N] [--live N] [--conf STR]... [--threads-max N]
 *                   [--repeat N] [--quick] [--json] [--json-file PATH] [--seed N] [--only SUBSTR]
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/allocator.h"
#include "core/history.h"
#include "tests/bench/trace_sizes.h"
#include "devmodel/devmodel.h"
#include "tools/json_out.h"

#define NTRACE_SIZES (sizeof trace_sizes / sizeof trace_sizes[0])
#define MAX_CONFS 8
#define MAX_THREADS 8
#define MAX_ROWS 1024
#define MAX_REPEAT 9

/* Targets the project set for the cached path (per pair, one thread). */
#define TARGET_P50_NS 60.0
#define TARGET_P99_NS 1000.0

typedef enum kind { K_LOOP, K_TIMER, K_MUTEX, K_MUTEX_ADAPTIVE, K_MALLOC64, K_FIXED, K_MIX } kind;

typedef struct opts {
    size_t pairs, batch, live, threads_max, repeat;
    uint64_t seed;
    bool json, quick;
    const char *json_file;
    const char *only; /* run only scenarios whose name contains this */
    int cur_round;
    const char *confs[MAX_CONFS];
    int nconf;
} opts;

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: a few ns, deterministic per seed. */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

/* --- one thread's work ------------------------------------------------------------------------ */

typedef struct worker {
    /* in */
    kind k;
    ts_allocator *a;
    size_t size;     /* K_FIXED */
    size_t live;     /* K_MIX, K_LOOP */
    size_t nbatches, batch, warm_pairs;
    uint64_t seed;
    uintptr_t stream;
    pthread_barrier_t *b1, *b2;
    /* out */
    double *samples; /* ns per pair, one per batch */
    uint64_t t_start, t_end;
    uint64_t failures;
    int err;
} worker;

static pthread_mutex_t bench_mutex = PTHREAD_MUTEX_INITIALIZER; /* what the core uses */
static pthread_mutex_t bench_mutex_adaptive; /* PTHREAD_MUTEX_ADAPTIVE_NP: spins a little first */
static volatile uintptr_t sink_word; /* keeps the loops' results alive */

/* The pair itself. Inlined into the timed loop; the switch is on a loop-invariant value. */
static inline void one_pair(worker *w, uintptr_t *slots, uint64_t *rng)
{
    switch (w->k) {
    case K_LOOP: {
        uint64_t r = rng_next(rng);
        size_t victim = (size_t)(r % w->live);
        slots[victim] += trace_sizes[(r >> 32) % NTRACE_SIZES];
        break;
    }
    case K_TIMER:
        sink_word += (uintptr_t)now_ns();
        break;
    case K_MUTEX:
        pthread_mutex_lock(&bench_mutex);
        pthread_mutex_unlock(&bench_mutex);
        break;
    case K_MUTEX_ADAPTIVE:
        pthread_mutex_lock(&bench_mutex_adaptive);
        pthread_mutex_unlock(&bench_mutex_adaptive);
        break;
    case K_MALLOC64: {
        void *volatile p = malloc(64);
        free(p);
        break;
    }
    case K_FIXED: {
        uintptr_t p = 0;
        if (ts_malloc(w->a, w->size, w->stream, &p) != TS_OK) {
            w->failures++;
            break;
        }
        if (ts_free(w->a, p) != TS_OK)
            w->failures++;
        break;
    }
    case K_MIX: {
        uint64_t r = rng_next(rng);
        size_t victim = (size_t)(r % w->live);
        if (ts_free(w->a, slots[victim]) != TS_OK)
            w->failures++;
        slots[victim] = 0;
        if (ts_malloc(w->a, trace_sizes[(r >> 32) % NTRACE_SIZES], w->stream, &slots[victim]) !=
            TS_OK)
            w->failures++;
        break;
    }
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    uint64_t rng = w->seed ? w->seed : 1;
    size_t nslots = w->live ? w->live : 1;
    uintptr_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) {
        w->err = ENOMEM;
        w->nbatches = 0;
    }
    if (slots && w->k == K_MIX) {
        for (size_t i = 0; i < w->live; i++) {
            uint64_t r = rng_next(&rng);
            if (ts_malloc(w->a, trace_sizes[r % NTRACE_SIZES], w->stream, &slots[i]) != TS_OK)
                w->failures++;
        }
    }
    if (slots)
        for (size_t i = 0; i < w->warm_pairs; i++)
            one_pair(w, slots, &rng);

    pthread_barrier_wait(w->b1); /* the main thread reads the device counters now */
    pthread_barrier_wait(w->b2);
    const size_t batch = w->batch;
    w->t_start = now_ns();
    for (size_t s = 0; s < w->nbatches; s++) {
        uint64_t t0 = now_ns();
        for (size_t j = 0; j < batch; j++)
            one_pair(w, slots, &rng);
        w->samples[s] = (double)(now_ns() - t0) / (double)batch;
    }
    w->t_end = now_ns();
    pthread_barrier_wait(w->b1); /* the main thread reads the device counters again */
    pthread_barrier_wait(w->b2);

    if (slots && w->k == K_MIX)
        for (size_t i = 0; i < w->live; i++)
            if (slots[i] && ts_free(w->a, slots[i]) != TS_OK)
                w->failures++;
    if (slots && w->k == K_LOOP)
        sink_word += slots[0];
    free(slots);
    return NULL;
}

/* --- results ------------------------------------------------------------------------------------ */

typedef struct row {
    char scenario[48];
    char conf[64];
    int threads;
    size_t batch;
    size_t pairs;          /* timed pairs, all threads */
    double p50, p99, p999, mean, max; /* per pair, per thread (samples pooled) */
    double thread_mean[MAX_THREADS];
    double agg_ns;         /* wall time / all pairs */
    double mpairs_per_s;   /* all threads */
    uint64_t device_calls; /* backend calls reaching the model while timing */
    uint64_t failures;
    bool judged;           /* a cached-path row the targets apply to */
    int round;
    /* over the rounds (--repeat): this row is the round with the median p50 */
    int nrounds;
    double round_p50[MAX_REPEAT];
} row;

static row rows[MAX_ROWS];
static int nrows;

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double pct(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)ceil(q * (double)n) - 1;
    if (i >= n)
        i = n - 1;
    return sorted[i];
}

static uint64_t device_calls(ts_devmodel *m)
{
    if (!m)
        return 0;
    ts_devmodel_counters c;
    ts_devmodel_counters_get(m, &c);
    return c.seg_allocs + c.seg_alloc_failures + c.seg_frees + c.vm_reserves + c.vm_releases +
           c.vm_creates + c.vm_destroys + c.vm_maps + c.vm_unmaps + c.synchronizes;
}

/* Run one scenario on nthreads threads; append a row. conf NULL: no allocator. */
static int run_scenario(const opts *o, const char *scenario, kind k, const char *conf,
                        size_t size, int nthreads, size_t batch, size_t pairs, bool judged)
{
    ts_devmodel *m = NULL;
    ts_allocator *a = NULL;
    ts_history *hist = NULL;
    if (o->only && !strstr(scenario, o->only))
        return 0;
    if (conf) {
        ts_config cfg;
        ts_config_diag diag;
        if (strcmp(conf, "default") == 0)
            ts_config_defaults(&cfg);
        else if (ts_config_parse(&cfg, conf, "--conf", TS_CONFIG_STRICT, &diag, NULL, NULL) != 0) {
            fprintf(stderr, "bench-core: %s\n", diag.message);
            return -1;
        }
        cfg.stats = false;
        m = ts_devmodel_create((size_t)1 << 50, 0); /* 1 PiB: never the limit */
        if (!m)
            return -1;
        ts_backend be = ts_devmodel_backend(m, true, false); /* VM on, no fences */
        ts_stats_sink sink = {NULL, NULL};
        a = ts_allocator_create(&cfg, &be, 0, sink);
        if (!a) {
            ts_devmodel_destroy(m);
            return -1;
        }
        if (cfg.history_events) {
            /* history_events:N: the ring the shim would attach, in $TMPDIR (or /tmp) */
            const char *dir = getenv("TMPDIR");
            char err[600];
            if (ts_history_create(dir && *dir ? dir : "/tmp", 0, 0, cfg.history_events,
                                  cfg.history_frames, &hist, err, sizeof err) != 0) {
                fprintf(stderr, "bench-core: %s\n", err);
                ts_allocator_destroy(a, true);
                ts_devmodel_destroy(m);
                return -1;
            }
            ts_history_attach(hist, a);
        }
    }
    if (batch == 0)
        batch = 1;
    size_t per_thread = pairs / (size_t)nthreads;
    size_t nbatches = per_thread / batch;
    if (nbatches == 0)
        nbatches = 1;
    size_t live = o->live / (size_t)nthreads; /* the same total live set as one thread */
    if (live == 0)
        live = 1;

    worker w[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    pthread_barrier_t b1, b2;
    pthread_barrier_init(&b1, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&b2, NULL, (unsigned)nthreads + 1);
    int rc = 0;
    for (int t = 0; t < nthreads; t++) {
        w[t] = (worker){.k = k, .a = a, .size = size, .live = live, .nbatches = nbatches,
                        .batch = batch, .seed = o->seed * 1000003u + (uint64_t)t * 7919u + 1,
                        .stream = 0, .b1 = &b1, .b2 = &b2};
        /* warm-up: fill the cache and the branch predictors (a tenth of the timed pairs) */
        w[t].warm_pairs = k == K_MIX ? (per_thread / 10 > 100000 ? per_thread / 10 : 100000)
                                     : per_thread / 20 + 1000;
        w[t].samples = calloc(nbatches, sizeof(double));
        if (!w[t].samples)
            rc = -1;
    }
    if (rc == 0) {
        for (int t = 0; t < nthreads; t++)
            pthread_create(&tid[t], NULL, worker_main, &w[t]);
        pthread_barrier_wait(&b1);
        uint64_t calls0 = device_calls(m);
        pthread_barrier_wait(&b2);
        pthread_barrier_wait(&b1);
        uint64_t calls1 = device_calls(m);
        pthread_barrier_wait(&b2);
        for (int t = 0; t < nthreads; t++)
            pthread_join(tid[t], NULL);

        row *r = &rows[nrows < MAX_ROWS ? nrows++ : MAX_ROWS - 1];
        memset(r, 0, sizeof *r);
        snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
        snprintf(r->conf, sizeof r->conf, "%s", conf ? conf : "-");
        r->threads = nthreads;
        r->round = o->cur_round;
        r->batch = batch;
        r->judged = judged;
        r->device_calls = calls1 - calls0;
        size_t n = nbatches * (size_t)nthreads;
        double *all = malloc(n * sizeof *all);
        uint64_t t0 = UINT64_MAX, t1 = 0;
        double sum = 0;
        for (int t = 0; t < nthreads; t++) {
            double ts = 0;
            for (size_t i = 0; i < nbatches; i++)
                ts += w[t].samples[i];
            r->thread_mean[t] = ts / (double)nbatches;
            sum += ts;
            if (all)
                memcpy(all + (size_t)t * nbatches, w[t].samples, nbatches * sizeof *all);
            t0 = w[t].t_start < t0 ? w[t].t_start : t0;
            t1 = w[t].t_end > t1 ? w[t].t_end : t1;
            r->failures += w[t].failures;
            if (w[t].err)
                rc = -1;
        }
        r->pairs = n * batch;
        r->mean = sum / (double)n;
        if (all) {
            qsort(all, n, sizeof *all, cmp_double);
            r->p50 = pct(all, n, 0.50);
            r->p99 = pct(all, n, 0.99);
            r->p999 = pct(all, n, 0.999);
            r->max = all[n - 1];
            free(all);
        }
        r->agg_ns = (double)(t1 - t0) / (double)r->pairs;
        r->mpairs_per_s = r->agg_ns > 0 ? 1e3 / r->agg_ns : 0;
        if (r->failures) {
            fprintf(stderr, "bench-core: %s [%s]: %llu allocator calls failed\n", scenario,
                    r->conf, (unsigned long long)r->failures);
            rc = -1;
        }
    }
    for (int t = 0; t < nthreads; t++)
        free(w[t].samples);
    pthread_barrier_destroy(&b1);
    pthread_barrier_destroy(&b2);
    if (a)
        ts_allocator_destroy(a, true);
    ts_history_close(hist, true);
    if (m)
        ts_devmodel_destroy(m);
    return rc;
}

/* --- machine description ---------------------------------------------------------------------- */

static void read_line_field(const char *path, const char *key, char *out, size_t len)
{
    snprintf(out, len, "unknown");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, strlen(key)) != 0)
            continue;
        char *v = key ? strchr(line, ':') : line;
        if (!v)
            continue;
        if (key)
            v++;
        while (*v == ' ' || *v == '\t')
            v++;
        v[strcspn(v, "\n")] = '\0';
        size_t n = strlen(v) < len - 1 ? strlen(v) : len - 1;
        memcpy(out, v, n);
        out[n] = '\0';
        break;
    }
    fclose(f);
}

static char cpu_model[256], loadavg[128], clocksource[64], cmdline[1024];

static bool same_row(const row *a, const row *b)
{
    return strcmp(a->scenario, b->scenario) == 0 && strcmp(a->conf, b->conf) == 0 &&
           a->threads == b->threads && a->batch == b->batch;
}

/* Fold the rounds: one row per scenario, the round whose p50 is the median, with every round's
 * p50 kept (their spread is the run-to-run noise). */
static void fold_rounds(void)
{
    static row out[MAX_ROWS];
    int nout = 0;
    bool used[MAX_ROWS] = {false};
    for (int i = 0; i < nrows; i++) {
        if (used[i])
            continue;
        int idx[MAX_REPEAT] = {0}, n = 0;
        for (int j = i; j < nrows && n < MAX_REPEAT; j++)
            if (!used[j] && same_row(&rows[i], &rows[j])) {
                idx[n++] = j;
                used[j] = true;
            }
        /* sort the rounds by p50 (insertion sort: n <= MAX_REPEAT) */
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && rows[idx[b]].p50 < rows[idx[b - 1]].p50; b--) {
                int t = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = t;
            }
        row r = rows[idx[n / 2]];
        r.nrounds = n;
        for (int a = 0; a < n; a++)
            r.round_p50[a] = rows[idx[a]].p50;
        out[nout++] = r;
    }
    memcpy(rows, out, (size_t)nout * sizeof *rows);
    nrows = nout;
}

static void print_json(FILE *f, const opts *o)
{
    fprintf(f, "{\"tool\": \"bench-core\", \"command\": ");
    json_put_string(f, cmdline);
    fprintf(f, ", \"machine\": {\"nproc\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
    json_put_string(f, cpu_model);
    fprintf(f, ", \"loadavg_at_start\": ");
    json_put_string(f, loadavg);
    fprintf(f, ", \"clocksource\": ");
    json_put_string(f, clocksource);
    fprintf(f,
            "}, \"params\": {\"pairs\": %zu, \"batch\": %zu, \"live\": %zu, \"seed\": %llu, "
            "\"trace_sizes\": %zu, \"repeat\": %zu}, \"targets\": {\"p50_ns\": %.0f, \"p99_ns\": %.0f}, "
            "\"results\": [",
            o->pairs, o->batch, o->live, (unsigned long long)o->seed, (size_t)NTRACE_SIZES,
            o->repeat, TARGET_P50_NS, TARGET_P99_NS);
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        fprintf(f, "%s\n  {\"scenario\": ", i ? "," : "");
        json_put_string(f, r->scenario);
        fprintf(f, ", \"conf\": ");
        json_put_string(f, r->conf);
        fprintf(f,
                ", \"threads\": %d, \"batch\": %zu, \"pairs\": %zu, \"p50_ns\": %.2f, "
                "\"p99_ns\": %.2f, \"p999_ns\": %.2f, \"mean_ns\": %.2f, \"max_ns\": %.2f, "
                "\"thread_mean_ns\": [",
                r->threads, r->batch, r->pairs, r->p50, r->p99, r->p999, r->mean, r->max);
        for (int t = 0; t < r->threads; t++)
            fprintf(f, "%s%.2f", t ? ", " : "", r->thread_mean[t]);
        fprintf(f,
                "], \"aggregate_ns_per_pair\": %.2f, \"mpairs_per_s\": %.3f, "
                "\"device_calls_while_timing\": %llu, \"rounds_p50_ns\": [",
                r->agg_ns, r->mpairs_per_s, (unsigned long long)r->device_calls);
        for (int t = 0; t < r->nrounds; t++)
            fprintf(f, "%s%.2f", t ? ", " : "", r->round_p50[t]);
        fputc(']', f);
        if (r->judged)
            fprintf(f, ", \"p50_target_met\": %s, \"p99_target_met\": %s",
                    r->p50 <= TARGET_P50_NS ? "true" : "false",
                    r->p99 <= TARGET_P99_NS ? "true" : "false");
        fputc('}', f);
    }
    fprintf(f, "\n]}\n");
}

static void print_table(FILE *f, const opts *o)
{
    fprintf(f, "command: %s\n", cmdline);
    fprintf(f, "machine: %ld CPUs, %s; load average at start %s; clocksource %s\n",
            sysconf(_SC_NPROCESSORS_ONLN), cpu_model, loadavg, clocksource);
    fprintf(f,
            "pairs per scenario %zu, batch %zu (batch-1 rows: %zu pairs), live set %zu, "
            "size mix: %zu allocations of tests/data/traces, seed %llu; %zu rounds, each row is "
            "the round with the median p50\n\n",
            o->pairs, o->batch, o->pairs / 4, o->live, (size_t)NTRACE_SIZES,
            (unsigned long long)o->seed, o->repeat);
    fprintf(f,
            "| scenario | config | threads | batch | p50 ns | p50 over rounds | p99 ns | p99.9 ns | "
            "mean ns | per-thread mean ns | aggregate ns/pair | Mpairs/s | "
            "device calls while timing | targets (p50<=%.0f, p99<=%.0f) |\n",
            TARGET_P50_NS, TARGET_P99_NS);
    fprintf(f, "|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---|\n");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        char tm[96] = "";
        size_t off = 0;
        for (int t = 0; t < r->threads; t++)
            off += (size_t)snprintf(tm + off, sizeof tm - off, "%s%.1f", t ? " / " : "",
                                    r->thread_mean[t]);
        const char *verdict = "";
        if (r->judged)
            verdict = r->p50 <= TARGET_P50_NS
                          ? (r->p99 <= TARGET_P99_NS ? "both met" : "p99 MISSED")
                          : (r->p99 <= TARGET_P99_NS ? "p50 MISSED" : "both MISSED");
        char rp[64];
        snprintf(rp, sizeof rp, "%.1f-%.1f", r->round_p50[0], r->round_p50[r->nrounds - 1]);
        fprintf(f, "| %s | %s | %d | %zu | %.1f | %s | %.1f | %.1f | %.1f | %s | %.1f | %.2f | %llu | %s |\n",
                r->scenario, r->conf, r->threads, r->batch, r->p50, rp, r->p99, r->p999, r->mean, tm,
                r->agg_ns, r->mpairs_per_s, (unsigned long long)r->device_calls, verdict);
    }
}

static void usage(FILE *f)
{
    fputs("usage: bench-core [--pairs N] [--batch N] [--live N] [--conf STR]... [--threads-max N]\n"
          "                  [--repeat N] [--quick] [--json] [--json-file PATH] [--seed N] [--only SUBSTR]\n"
          "Times the allocator core's cached malloc+free path over the device model.\n"
          "  --pairs N        timed pairs per scenario (default 2000000; --quick: 200000)\n"
          "  --batch N        pairs per timed sample (default 64)\n"
          "  --live N         live allocations in the size-mix scenario (default 1000, split\n"
          "                   between threads)\n"
          "  --conf STR       configuration (repeatable; default: default and defragment:True)\n"
          "  --threads-max N  also run 2..N threads on one allocator (default 2)\n"
          "  --repeat N       rounds of the whole list, interleaved; each row reports the round\n"
          "                   with the median p50 (default 3; --quick: 1)\n"
          "  --only SUBSTR    run only the scenarios whose name contains SUBSTR (profiling)\n"
          "  --json           print JSON instead of the table\n"
          "  --json-file P    also write the JSON to P\n",
          f);
}

int main(int argc, char **argv)
{
    opts o = {.pairs = 2000000, .batch = 64, .live = 1000, .threads_max = 2, .seed = 1,
              .repeat = 3};
    size_t off = 0;
    for (int i = 0; i < argc && off < sizeof cmdline; i++)
        off += (size_t)snprintf(cmdline + off, sizeof cmdline - off, "%s%s", i ? " " : "", argv[i]);
    bool pairs_given = false, repeat_given = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VAL()                                                                                 \
    do {                                                                                           \
        if (!val) {                                                                                \
            fprintf(stderr, "bench-core: %s needs a value\n", arg);                                \
            return 2;                                                                              \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        if (strcmp(arg, "--pairs") == 0) {
            NEED_VAL();
            o.pairs = strtoull(val, NULL, 10);
            pairs_given = true;
        } else if (strcmp(arg, "--batch") == 0) {
            NEED_VAL();
            o.batch = strtoull(val, NULL, 10);
        } else if (strcmp(arg, "--live") == 0) {
            NEED_VAL();
            o.live = strtoull(val, NULL, 10);
        } else if (strcmp(arg, "--threads-max") == 0) {
            NEED_VAL();
            o.threads_max = strtoull(val, NULL, 10);
        } else if (strcmp(arg, "--repeat") == 0) {
            NEED_VAL();
            o.repeat = strtoull(val, NULL, 10);
            repeat_given = true;
        } else if (strcmp(arg, "--seed") == 0) {
            NEED_VAL();
            o.seed = strtoull(val, NULL, 10);
        } else if (strcmp(arg, "--conf") == 0) {
            NEED_VAL();
            if (o.nconf == MAX_CONFS) {
                fprintf(stderr, "bench-core: at most %d --conf\n", MAX_CONFS);
                return 2;
            }
            o.confs[o.nconf++] = val;
        } else if (strcmp(arg, "--only") == 0) {
            NEED_VAL();
            o.only = val;
        } else if (strcmp(arg, "--json-file") == 0) {
            NEED_VAL();
            o.json_file = val;
        } else if (strcmp(arg, "--json") == 0) {
            o.json = true;
        } else if (strcmp(arg, "--quick") == 0) {
            o.quick = true;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
#undef NEED_VAL
    }
    if (o.quick && !pairs_given)
        o.pairs = 200000;
    if (o.quick && !repeat_given)
        o.repeat = 1;
    if (o.pairs < 1000 || o.batch == 0 || o.live == 0 || o.threads_max < 1 ||
        o.threads_max > MAX_THREADS || o.repeat < 1 || o.repeat > MAX_REPEAT) {
        fprintf(stderr, "bench-core: need --pairs >= 1000, --batch >= 1, --live >= 1, "
                        "--threads-max 1..%d, --repeat 1..%d\n", MAX_THREADS, MAX_REPEAT);
        return 2;
    }
    if (o.nconf == 0) {
        o.confs[o.nconf++] = "default";
        o.confs[o.nconf++] = "defragment:True";
    }
    read_line_field("/proc/cpuinfo", "model name", cpu_model, sizeof cpu_model);
    read_line_field("/proc/loadavg", NULL, loadavg, sizeof loadavg);
    {
        /* keep the three load averages only */
        char *p = loadavg;
        for (int sp = 0; *p; p++)
            if (*p == ' ' && ++sp == 3) {
                *p = '\0';
                break;
            }
    }
    read_line_field("/sys/devices/system/clocksource/clocksource0/current_clocksource", NULL,
                    clocksource, sizeof clocksource);

    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&bench_mutex_adaptive, &ma);
    pthread_mutexattr_destroy(&ma);

    int rc = 0;
    const size_t P = o.pairs, B = o.batch;
    for (size_t round = 0; round < o.repeat; round++) {
        o.cur_round = (int)round;
        /* baselines: the yardsticks */
        rc |= run_scenario(&o, "baseline: loop overhead (rng+index)", K_LOOP, NULL, 0, 1, B, P,
                           false);
        rc |= run_scenario(&o, "baseline: clock_gettime", K_TIMER, NULL, 0, 1, B, P, false);
        rc |= run_scenario(&o, "baseline: pthread mutex lock+unlock", K_MUTEX, NULL, 0, 1, B, P,
                           false);
        rc |= run_scenario(&o, "baseline: glibc malloc+free 64 B", K_MALLOC64, NULL, 0, 1, B, P,
                           false);
        /* one mutex, both threads hammering it: what threads on one allocator pay at least */
        for (size_t t = 2; t <= o.threads_max; t++) {
            rc |= run_scenario(&o, "baseline: pthread mutex lock+unlock", K_MUTEX, NULL, 0,
                               (int)t, B, P, false);
            rc |= run_scenario(&o, "baseline: adaptive mutex lock+unlock", K_MUTEX_ADAPTIVE,
                               NULL, 0, (int)t, B, P, false);
        }
        /* the configurations side by side, scenario by scenario (so that a change in the
         * machine's load hits both alike) */
        for (int c = 0; c < o.nconf; c++)
            rc |= run_scenario(&o, "fixed 4 KiB", K_FIXED, o.confs[c], 4096, 1, B, P, true);
        for (int c = 0; c < o.nconf; c++)
            rc |= run_scenario(&o, "fixed 64 MiB", K_FIXED, o.confs[c], (size_t)64 << 20, 1, B, P,
                               true);
        for (int c = 0; c < o.nconf; c++)
            rc |= run_scenario(&o, "trace mix, live set", K_MIX, o.confs[c], 0, 1, B, P, true);
        for (int c = 0; c < o.nconf; c++)
            rc |= run_scenario(&o, "fixed 4 KiB", K_FIXED, o.confs[c], 4096, 1, 1, P / 4, false);
        for (int c = 0; c < o.nconf; c++)
            rc |= run_scenario(&o, "trace mix, live set", K_MIX, o.confs[c], 0, 1, 1, P / 4,
                               false);
        for (size_t t = 2; t <= o.threads_max; t++) {
            for (int c = 0; c < o.nconf; c++)
                rc |= run_scenario(&o, "fixed 4 KiB", K_FIXED, o.confs[c], 4096, (int)t, B, P,
                                   false);
            for (int c = 0; c < o.nconf; c++)
                rc |= run_scenario(&o, "trace mix, live set", K_MIX, o.confs[c], 0, (int)t, B, P,
                                   false);
        }
    }
    fold_rounds();
    if (o.json)
        print_json(stdout, &o);
    else
        print_table(stdout, &o);
    if (o.json_file) {
        FILE *f = fopen(o.json_file, "w");
        if (!f) {
            fprintf(stderr, "bench-core: %s: %s\n", o.json_file, strerror(errno));
            return 1;
        }
        print_json(f, &o);
        fclose(f);
    }
    return rc ? 1 : 0;
}
