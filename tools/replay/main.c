/* tessera-replay: would tessera (or this setting) have saved my run? Answered offline, from a
 * trace, on the CPU: the allocator core replays the trace over a model of the device. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "tools/json_out.h"
#include "tools/replay/replay.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

#define MAX_CONFS 16

static void usage(FILE *f)
{
    fputs("usage: tessera-replay [options] TRACE\n"
          "       tessera-replay --compare TRACE CONF1 CONF2 ...\n"
          "       tessera-replay --check-pytorch SNAPSHOT.pickle\n"
          "\n"
          "Replays an allocation trace through tessera's allocator core on a model of the device\n"
          "(no GPU needed) and reports what the allocator would have done. TRACE is an RMM log\n"
          "(Thread,Time,Action,Pointer,Size,Stream: what TESSERA_TRACE writes; columns are\n"
          "read by header name, in any order, quoted or not, extra columns ignored) or a PyTorch\n"
          "memory snapshot (.pickle, read with scripts/snapshot2trace). Replays start from an\n"
          "empty device: what a snapshot held before its trace began is reported, not replayed.\n"
          "\n"
          "A run that died: the requests it failed (RMM's 'allocate failure' rows, a snapshot's\n"
          "'oom' events) are replayed too, on the device the run had (its total and its\n"
          "memory_limit, as TESSERA_TRACE and snapshot_on_oom record them), and each\n"
          "configuration says whether it would have served the request that failed, and with\n"
          "how much to spare. Other traces replay on an unlimited device.\n"
          "\n"
          "  --conf STR         allocator configuration, TESSERA_ALLOC_CONF syntax; 'default' is\n"
          "                     tessera's default, 'pytorch' PyTorch's policy (default: 'default';\n"
          "                     with --check-pytorch: 'pytorch')\n"
          "  --capacity SIZE    device size, e.g. 80G; replaces the device and the limit a run\n"
          "                     that died recorded (default: those, else unlimited)\n"
          "  --min-capacity     also find the smallest device (2 MiB steps) that runs the trace\n"
          "                     without an out-of-memory error\n"
          "  --compare C1 C2 .. replay under each configuration; print a side-by-side table\n"
          "                     (out-of-memory errors and the first allocation that failed\n"
          "                     included) and a verdict for each configuration against the\n"
          "                     first\n"
          "  --json             one JSON object (an array with --compare)\n"
          "  --driver-costs NAME|FILE  driver-call latencies for the estimated driver time:\n"
          "                     h100 (the default: measured on an NVIDIA H100, 2 MiB to\n"
          "                     1 GiB), h200 (measured on an NVIDIA H200 at 2 and 20 MiB) or\n"
          "                     a100 (the published A100 figures), or a costs file (what\n"
          "                     tessera-costs writes: lines 'CALL SIZE:US ...', e.g.\n"
          "                     'cuMemCreate 2M:13.7 20M:12.3', or 'CALL US_PER_CALL\n"
          "                     [US_PER_MIB]'; '#'\n"
          "                     comments) over the table so far: calls it does not name keep\n"
          "                     their latencies\n"
          "  --repeat N         replay the trace as N consecutive steps: what it never frees is\n"
          "                     allocated once, in the first step; implies --steps N\n"
          "  --steps N          the trace is N steps of a loop (equal event counts): also report\n"
          "                     the estimated driver time per step once memory stopped growing\n"
          "  --check-pytorch    check that every allocation lands at the address PyTorch chose\n"
          "  -v, --verbose      more detail on stderr\n"
          "  -h, --help, --version\n"
          "\n"
          "Driver calls: every call the device model receives for memory (segment allocations\n"
          "and frees, address reservations, physical handles, maps and unmaps, synchronisations);\n"
          "'dev alloc' and 'dev free' are the num_device_alloc and num_device_free counters that\n"
          "tessera run --summary and tessera-stat show for a live run.\n"
          "\n"
          "Exit status:\n"
          "  0  replayed; with a device size (--capacity, or the one a run that died recorded),\n"
          "     no configuration ran out of memory on it\n"
          "  1  the trace could not be read, or host memory ran out; --check-pytorch: an\n"
          "     allocation or segment did not land where PyTorch put it\n"
          "  2  bad usage: an unknown option, a bad size, number or configuration\n"
          "  3  with a device size (as for 0), a configuration ran out of memory on it (not\n"
          "     with --min-capacity)\n",
          f);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end)
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

/* A configuration string, or a policy name ("pytorch", "default": the parser takes both). */
static int conf_parse(const char *text, ts_config *cfg)
{
    ts_config_diag diag;
    if (ts_config_parse(cfg, text, "--conf", TS_CONFIG_STRICT, &diag, NULL, NULL) != 0) {
        fprintf(stderr, "tessera-replay: %s\n", diag.message);
        return -1;
    }
    return 0;
}

static void print_size(char *buf, size_t len, size_t v)
{
    const double g = 1024.0 * 1024 * 1024, m = 1024.0 * 1024;
    if ((double)v >= g)
        snprintf(buf, len, "%.2f GiB", (double)v / g);
    else
        snprintf(buf, len, "%.1f MiB", (double)v / m);
}

/* The first allocation that failed: "#1234 512.0 MiB" (allocation number, requested size). */
static void first_oom_text(char *buf, size_t len, const replay_result *r)
{
    char size[32];
    print_size(size, sizeof size, (size_t)r->first_failed_size);
    if (r->failed_allocs)
        snprintf(buf, len, "#%zu %s", r->first_failed, size);
    else
        snprintf(buf, len, "-");
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

/* One closing line for a configuration against the first one: the smallest device each needs,
 * the out-of-memory errors on the given device (when either had one, or a capacity was given),
 * and the driver calls that cost. Every number it quotes is one the table shows. */
static void print_verdict(const char *conf, const replay_result *r, size_t min, const char *base,
                          const replay_result *b, size_t bmin, size_t capacity)
{
    char x[32], y[32], c[32];
    print_size(x, sizeof x, min);
    print_size(y, sizeof y, bmin);
    print_size(c, sizeof c, capacity);
    printf("%s: ", conf);
    if (min < bmin)
        printf("runs in %s where %s needs %s", x, base, y);
    else if (min > bmin)
        printf("needs %s where %s runs in %s", x, base, y);
    else
        printf("needs %s, as %s does", x, base);
    size_t n = r->failed_allocs, bn = b->failed_allocs;
    if (n == 0 && bn == 0) {
        if (capacity)
            printf("; no OOM on %s, as %s", c, base);
    } else if (n == 0) {
        printf("; no OOM where %s had %zu", base, bn);
    } else if (bn == 0) {
        printf("; %zu OOM%s where %s had none", n, plural(n), base);
    } else {
        printf("; %zu OOM%s where %s had %zu", n, plural(n), base, bn);
    }
    printf("; %llu driver calls against %llu (drv time %.1fms against %.1fms)\n",
           (unsigned long long)r->device_calls, (unsigned long long)b->device_calls,
           r->driver_ns / 1e6, b->driver_ns / 1e6);
}

/* Where the replay ran: "unlimited capacity", "1.00 GiB device (--capacity)", "1.00 GiB device
 * and a 900.0 MiB memory_limit, as the run had". */
static void device_text(char *buf, size_t len, size_t capacity, size_t limit, bool recorded)
{
    char c[32], l[32];
    print_size(c, sizeof c, capacity);
    print_size(l, sizeof l, limit);
    if (!capacity)
        snprintf(buf, len, "unlimited capacity");
    else if (!recorded)
        snprintf(buf, len, "%s device (--capacity)", c);
    else if (limit)
        snprintf(buf, len, "%s device and a %s memory_limit, as the run had", c, l);
    else
        snprintf(buf, len, "%s device, as the run had", c);
}

/* For a run that died: whether this configuration would have served the request that failed,
 * on that device, and with how much to spare; then the run's other failed requests, and the
 * requests the run served that fail here (never left unsaid). */
static void print_run_verdict(const char *conf, const replay_result *r)
{
    char size[32], spare[32];
    print_size(size, sizeof size, (size_t)r->run_first_size);
    printf("%s: ", conf);
    if (r->run_first_served && r->run_first_bounded) {
        print_size(spare, sizeof spare, (size_t)r->run_first_spare);
        printf("would have served the request that failed (#%zu, %s), with %s to spare",
               r->run_first_failed, size, spare);
    } else if (r->run_first_served) {
        printf("would have served the request that failed (#%zu, %s) on an unlimited device",
               r->run_first_failed, size);
    } else {
        printf("would not have served the request that failed (#%zu, %s)", r->run_first_failed,
               size);
    }
    if (r->run_failures > 1)
        printf("; serves %zu of the run's %zu failed requests", r->run_failures_served,
               r->run_failures);
    size_t again = r->run_failures - r->run_failures_served;
    size_t others = r->failed_allocs > again ? r->failed_allocs - again : 0;
    if (others)
        printf("; %zu request%s the run served fail%s here", others, plural(others),
               others == 1 ? "s" : "");
    printf("\n");
}

/* Peak allocated is PyTorch's allocated_bytes: whole blocks. It differs between configurations
 * of one trace for two reasons, said under the table when it does. */
static void print_peak_note(const replay_result *res, int n)
{
    bool differs = false, oom = false, same_requested = true;
    size_t requested = 0;
    for (int i = 0; i < n; i++) {
        differs |= res[i].peak_allocated != res[0].peak_allocated;
        if (res[i].failed_allocs) {
            oom = true;
            continue;
        }
        if (requested && res[i].peak_requested != requested)
            same_requested = false;
        requested = res[i].peak_requested;
    }
    if (!differs)
        return;
    puts("peak alloc counts whole blocks, as PyTorch's allocated_bytes: without expandable "
         "segments a large-pool block\n"
         "  at most 1 MiB larger than the request (or an oversize block, with max_split_size_mb) "
         "is handed out whole\n"
         "  (PyTorch's split rule), so its peak is higher.");
    if (requested && same_requested) {
        char r[32];
        print_size(r, sizeof r, requested);
        printf("  The program's own peak (requested bytes) is %s under every configuration%s.\n", r,
               oom ? " without OOMs" : "");
    }
    if (oom)
        puts("  A configuration with OOMs leaves the allocations that failed out of its peaks.");
}

static void print_json(FILE *f, const trace *t, const char *conf, size_t capacity,
                       size_t limit, const char *capacity_source, const replay_result *r,
                       size_t min_cap)
{
    fputs("{\"trace\": ", f);
    json_put_string(f, t->source);
    fputs(", \"conf\": ", f);
    json_put_string(f, conf);
    fprintf(f, ", \"memory_limit_bytes\": %zu, \"capacity_source\": \"%s\"", limit,
            capacity_source);
    fprintf(f,
            ", \"capacity_bytes\": %zu, \"events\": %zu, \"allocations\": %zu, \"frees\": %zu, "
            "\"skipped_frees\": %zu, \"peak_allocated_bytes\": %zu, \"peak_reserved_bytes\": %zu, "
            "\"peak_requested_bytes\": %zu, \"utilization\": %.6f, \"num_device_alloc\": %llu, "
            "\"num_device_free\": %llu, \"num_alloc_retries\": %llu, \"num_ooms\": %llu, "
            "\"num_stitches\": %llu, \"vm_maps\": %llu, \"vm_unmaps\": %llu, \"device_calls\": %llu",
            capacity, t->n, t->allocations, t->frees, t->skipped_frees, r->peak_allocated,
            r->peak_reserved, r->peak_requested, r->utilization,
            (unsigned long long)r->num_device_alloc, (unsigned long long)r->num_device_free,
            (unsigned long long)r->num_alloc_retries, (unsigned long long)r->num_ooms,
            (unsigned long long)r->num_stitches, (unsigned long long)r->vm_maps,
            (unsigned long long)r->vm_unmaps, (unsigned long long)r->device_calls);
    fprintf(f, ", \"preexisting_blocks\": %zu, \"preexisting_bytes\": %llu", t->preexisting_blocks,
            (unsigned long long)t->preexisting_bytes);
    fprintf(f, ", \"failed_allocations\": %zu, \"run_failed_requests\": %zu, "
            "\"run_failed_requests_served\": %zu",
            r->failed_allocs, r->run_failures, r->run_failures_served);
    if (r->run_failures) {
        fprintf(f, ", \"run_first_failed_allocation\": %zu, \"run_first_failed_bytes\": %llu, "
                "\"run_first_failed_served\": %s",
                r->run_first_failed, (unsigned long long)r->run_first_size,
                r->run_first_served ? "true" : "false");
        if (r->run_first_served && r->run_first_bounded)
            fprintf(f, ", \"run_first_failed_spare_bytes\": %llu",
                    (unsigned long long)r->run_first_spare);
    }
    if (r->failed_allocs)
        fprintf(f, ", \"first_oom_allocation\": %zu, \"first_oom_bytes\": %llu", r->first_failed,
                (unsigned long long)r->first_failed_size);
    if (min_cap)
        fprintf(f, ", \"min_capacity_bytes\": %zu, \"min_capacity_checked\": {\"steps\": %zu, "
                "\"samples\": %zu, \"to_bytes\": %zu, \"raised\": %zu}",
                min_cap, r->min_check.steps, r->min_check.samples, r->min_check.checked_to,
                r->min_check.raised);
    fprintf(f,
            ", \"driver_ms\": %.3f, \"driver_ms_growth\": %.3f, \"growth_events\": %zu, "
            "\"driver_ms_after_growth\": %.3f",
            r->driver_ns / 1e6, r->driver_ns_growth / 1e6, r->growth_events,
            (r->driver_ns - r->driver_ns_growth) / 1e6);
    fprintf(f, ", \"device_calls_growth\": %llu", (unsigned long long)r->device_calls_growth);
    if (r->driver_ns_per_step >= 0)
        fprintf(f, ", \"steady_steps\": %zu, \"driver_ms_per_step\": %.3f, "
                "\"device_calls_per_step\": %.2f", r->steady_steps,
                r->driver_ns_per_step / 1e6, r->device_calls_per_step);
    if (r->driver_ns_last_step >= 0)
        fprintf(f, ", \"device_calls_last_step\": %llu, \"driver_ms_last_step\": %.3f, "
                "\"tail_steps\": %zu, \"ns_per_op_tail\": %.1f",
                (unsigned long long)r->device_calls_last_step, r->driver_ns_last_step / 1e6,
                r->tail_steps, r->ns_per_op_tail);
    fprintf(f, ", \"ns_per_op\": %.1f}", r->ns_per_op);
}

/* "0.125 ms per step (12 steps after growth)", or "-" without --steps. */
static void step_text(char *buf, size_t len, const replay_result *r)
{
    if (r->driver_ns_per_step >= 0)
        snprintf(buf, len, "%.3f ms per step (%zu steps after growth)", r->driver_ns_per_step / 1e6,
                 r->steady_steps);
    else
        snprintf(buf, len, "-");
}

static void print_report(const trace *t, const char *conf, const char *device,
                         const replay_result *r, size_t min_cap)
{
    char a[32], b[32], m[32];
    print_size(a, sizeof a, r->peak_allocated);
    print_size(b, sizeof b, r->peak_reserved);
    printf("trace              %s\n", t->source);
    printf("configuration      %s\n", conf);
    printf("device             %s\n", device);
    printf("events             %zu (%zu allocations, %zu frees, %zu requests the run failed; "
           "%zu frees of unknown addresses skipped)\n",
           t->n, t->allocations, t->frees, t->run_failures, t->skipped_frees);
    printf("peak allocated     %s\n", a);
    printf("peak reserved      %s\n", b);
    printf("utilization        %.2f%% (peak allocated / peak reserved)\n", 100 * r->utilization);
    printf("device calls       %llu allocations, %llu frees (%llu maps, %llu unmaps; %llu driver "
           "calls in all)\n",
           (unsigned long long)r->num_device_alloc, (unsigned long long)r->num_device_free,
           (unsigned long long)r->vm_maps, (unsigned long long)r->vm_unmaps,
           (unsigned long long)r->device_calls);
    char first[48];
    first_oom_text(first, sizeof first, r);
    printf("retries / OOMs     %llu / %llu%s%s\n", (unsigned long long)r->num_alloc_retries,
           (unsigned long long)r->num_ooms, r->failed_allocs ? ", first: " : "",
           r->failed_allocs ? first : "");
    if (min_cap) {
        print_size(m, sizeof m, min_cap);
        char to[32];
        print_size(to, sizeof to, r->min_check.checked_to);
        printf("min capacity       %s (%.2f%% above peak allocated)\n", m,
               r->peak_allocated ? 100.0 * ((double)min_cap / (double)r->peak_allocated - 1) : 0);
        printf("                   checked, not assumed: %zu capacities 2 MiB apart above it and "
               "%zu more up to %s run too", r->min_check.steps, r->min_check.samples, to);
        if (r->min_check.raised)
            printf("; a capacity above the bisection's answer failed, so the answer was moved "
                   "above it (%zu time%s)", r->min_check.raised, plural(r->min_check.raised));
        printf("\n");
    }
    char step[64];
    step_text(step, sizeof step, r);
    printf("driver time (est.) %.1f ms: %.1f ms growing (events 1-%zu), %.1f ms after%s%s\n",
           r->driver_ns / 1e6, r->driver_ns_growth / 1e6, r->growth_events,
           (r->driver_ns - r->driver_ns_growth) / 1e6, r->driver_ns_per_step >= 0 ? "; " : "",
           r->driver_ns_per_step >= 0 ? step : "");
    printf("host time          %.1f ns per operation\n", r->ns_per_op);
    if (r->run_failures) {
        printf("the run failed     %zu request%s; ", r->run_failures, plural(r->run_failures));
        print_run_verdict(conf, r);
    }
}

/* Does cfg set a cap of its own (then a recorded limit does not replace it)? */
static bool conf_has_cap(const ts_config *cfg)
{
    return cfg->memory_limit > 0 || cfg->per_process_memory_fraction < 1.0;
}

/* What the command line asked for. */
typedef struct replay_args {
    const char *conf_text;  /* --conf */
    size_t capacity;        /* --capacity, else (after choose_device) the recorded device */
    bool capacity_given;
    bool min_cap, compare, json, check, verbose;
    ts_driver_costs costs;
    replay_opts ro;
    const char *costs_file; /* --driver-costs */
    size_t repeat;          /* --repeat: the trace as this many consecutive steps (0: once) */
    const char *path;       /* the trace */
    const char *confs[MAX_CONFS];
    int nconf;
} replay_args;

/* --steps N and --repeat N: 1 to 100000000. */
static int parse_steps(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v == 0 || v > 100000000)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* The options. Returns -1 to go on, else the exit status (--help, a bad option or value). */
static int parse_options(int argc, char **argv, replay_args *a)
{
    static const struct option opts[] = {
        {"conf", required_argument, NULL, 'c'},
        {"capacity", required_argument, NULL, 'C'},
        {"min-capacity", no_argument, NULL, 'm'},
        {"compare", no_argument, NULL, 'x'},
        {"json", no_argument, NULL, 'j'},
        {"check-pytorch", no_argument, NULL, 'p'},
        {"driver-costs", required_argument, NULL, 'D'},
        {"steps", required_argument, NULL, 'S'},
        {"repeat", required_argument, NULL, 'R'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': a->conf_text = optarg; break;
        case 'C':
            if (parse_size(optarg, &a->capacity) != 0) {
                fprintf(stderr, "tessera-replay: --capacity: '%s' is not a size (e.g. 80G)\n",
                        optarg);
                return 2;
            }
            a->capacity_given = true;
            break;
        case 'm': a->min_cap = true; break;
        case 'D': {
            char err[512];
            if (ts_driver_costs_builtin(&a->costs, optarg) == 0) {
                a->costs_file = optarg;
                break;
            }
            if (ts_driver_costs_load(&a->costs, optarg, err, sizeof err) != 0) {
                fprintf(stderr, "tessera-replay: --driver-costs: %s\n", err);
                return 2;
            }
            a->costs_file = optarg;
            break;
        }
        case 'S':
        case 'R':
            if (parse_steps(optarg, c == 'S' ? &a->ro.steps : &a->repeat) != 0) {
                fprintf(stderr, "tessera-replay: %s: '%s' is not a number of steps "
                        "(1 to 100000000)\n", c == 'S' ? "--steps" : "--repeat", optarg);
                return 2;
            }
            break;
        case 'x': a->compare = true; break;
        case 'j': a->json = true; break;
        case 'p': a->check = true; break;
        case 'v': a->verbose = true; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tessera-replay %s\n", TESSERA_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    return -1;
}

/* The trace and the configurations: with --compare the trace is the first word and the
 * configurations follow; else one trace, under --conf. -1 to go on, else the exit status. */
static int parse_operands(int argc, char **argv, replay_args *a)
{
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    a->path = argv[optind];
    if (a->compare) {
        for (int i = optind + 1; i < argc && a->nconf < MAX_CONFS; i++)
            a->confs[a->nconf++] = argv[i];
        if (a->nconf == 0) {
            fprintf(stderr, "tessera-replay: --compare needs configurations after the trace\n");
            return 2;
        }
    } else {
        if (optind + 1 != argc) {
            fprintf(stderr, "tessera-replay: one trace at a time (or use --compare)\n");
            return 2;
        }
        a->confs[a->nconf++] = a->conf_text ? a->conf_text : a->check ? "pytorch" : "default";
    }
    return -1;
}

/* What the trace holds that a replay cannot: frees skipped, blocks from before its history. */
static void print_trace_notes(const trace *t, const char *path, bool verbose)
{
    if (verbose || t->skipped_frees)
        fprintf(stderr,
                "tessera-replay: %s: %zu allocations, %zu frees, %zu frees of addresses the trace "
                "never allocated skipped, %zu allocations never freed\n",
                path, t->allocations, t->frees, t->skipped_frees, t->never_freed);
    if (t->preexisting_blocks) {
        char b[32];
        print_size(b, sizeof b, (size_t)t->preexisting_bytes);
        fprintf(stderr,
                "tessera-replay: %s: %zu block%s in use (%s) at the snapshot were allocated "
                "before its history began: not replayed, so the replay holds less than the run "
                "did (record it with a larger history_events)\n",
                path, t->preexisting_blocks, plural(t->preexisting_blocks), b);
    }
}

/* The device: --capacity, else what a run that died ran on (a->capacity and *limit set, and
 * *recorded), else unlimited. */
static void choose_device(replay_args *a, const trace *t, size_t *limit, bool *recorded)
{
    *limit = 0;
    *recorded = false;
    if (!a->capacity_given && t->run_failures && t->has_capacity) {
        a->capacity = (size_t)t->run_device_total;
        *limit = (size_t)t->run_limit;
        *recorded = true;
    } else if (!a->capacity_given && t->run_failures) {
        fprintf(stderr,
                "tessera-replay: %s: the run failed %zu request%s, but the trace does not say "
                "what device it ran on: replayed on an unlimited device (give --capacity)\n",
                a->path, t->run_failures, plural(t->run_failures));
    }
    if (a->verbose && *recorded && t->run_conf[0])
        fprintf(stderr, "tessera-replay: %s: the run's configuration: %s\n", a->path, t->run_conf);
}

/* Replay t under each configuration on the device (capacity, and the run's limit for those
 * without a cap of their own: limits[i]); with --min-capacity or --compare also the smallest
 * device each needs (mins[i]). 0, or 1 when host memory ran out. */
static int replay_all(const replay_args *a, const trace *t, const ts_config *cfgs, size_t limit,
                      replay_result *res, size_t *mins, size_t *limits)
{
    for (int i = 0; i < a->nconf; i++) {
        /* The run's cap applies to a configuration that sets none of its own, as it did live. */
        ts_config run_cfg = cfgs[i];
        if (limit && !conf_has_cap(&run_cfg))
            run_cfg.memory_limit = limits[i] = limit;
        if (replay_run(t, &run_cfg, a->capacity, &a->ro, &res[i]) != 0) {
            fprintf(stderr, "tessera-replay: out of host memory\n");
            return 1;
        }
        if (a->min_cap || a->compare) {
            replay_result unlimited = res[i];
            if ((a->capacity || limit) && replay_run(t, &cfgs[i], 0, &a->ro, &unlimited) != 0)
                return 1;
            mins[i] = replay_min_capacity(t, &cfgs[i], &unlimited, &res[i].min_check);
        }
    }
    return 0;
}

/* --json: one object, or an array of them with --compare. */
static void print_json_all(const replay_args *a, const trace *t, size_t limits[],
                           const char *capacity_source, const replay_result *res,
                           const size_t *mins)
{
    if (a->compare)
        fputs("[", stdout);
    for (int i = 0; i < a->nconf; i++) {
        if (i)
            fputs(",\n ", stdout);
        print_json(stdout, t, a->confs[i], a->capacity, limits[i], capacity_source, &res[i],
                   mins[i]);
    }
    puts(a->compare ? "]" : "");
}

/* The --compare table: one row per configuration. */
static void print_compare_table(const replay_args *a, const replay_result *res, const size_t *mins)
{
    /* the configuration column is as wide as the longest name: names are never cut */
    int w = (int)strlen("configuration");
    for (int i = 0; i < a->nconf; i++)
        if ((int)strlen(a->confs[i]) > w)
            w = (int)strlen(a->confs[i]);
    printf("%-*s %11s %11s %8s %12s %9s %9s %9s %9s %9s %9s %7s %5s %-16s %7s\n", w,
           "configuration", "peak alloc", "peak resv", "util", "min capacity", "dev alloc",
           "dev free", "drv calls", "drv time", "drv grow", "drv/step", "retries", "OOMs",
           "first OOM", "ns/op");
    for (int i = 0; i < a->nconf; i++) {
        char pa[32], pr[32], m[32], first[48];
        print_size(pa, sizeof pa, res[i].peak_allocated);
        print_size(pr, sizeof pr, res[i].peak_reserved);
        print_size(m, sizeof m, mins[i]);
        first_oom_text(first, sizeof first, &res[i]);
        char total[32], grow[32], per_step[32] = "-";
        snprintf(total, sizeof total, "%.1fms", res[i].driver_ns / 1e6);
        snprintf(grow, sizeof grow, "%.1fms", res[i].driver_ns_growth / 1e6);
        if (res[i].driver_ns_per_step >= 0)
            snprintf(per_step, sizeof per_step, "%.3fms", res[i].driver_ns_per_step / 1e6);
        printf("%-*s %11s %11s %7.2f%% %12s %9llu %9llu %9llu %9s %9s %9s %7llu %5zu %-16s "
               "%7.1f\n",
               w, a->confs[i], pa, pr, 100 * res[i].utilization, m,
               (unsigned long long)res[i].num_device_alloc,
               (unsigned long long)res[i].num_device_free,
               (unsigned long long)res[i].device_calls, total, grow, per_step,
               (unsigned long long)res[i].num_alloc_retries, res[i].failed_allocs, first,
               res[i].ns_per_op);
    }
}

/* --compare without --json: the heading, the table and its notes, the verdicts on the request
 * the run failed, and each configuration's verdict against the first. */
static void print_compare(const replay_args *a, const trace *t, const char *device,
                          const replay_result *res, const size_t *mins)
{
    printf("%s: %zu events, %zu allocations, %zu request%s the run failed (replayed from an "
           "empty device, %s)\n",
           a->path, t->n, t->allocations, t->run_failures, plural(t->run_failures), device);
    print_compare_table(a, res, mins);
    print_peak_note(res, a->nconf);
    printf("drv calls: every driver call for memory (dev alloc and dev free are what tessera "
           "run --summary shows);\n  drv time: their estimated time; drv grow: until memory "
           "stopped growing; drv/step: per step after that (--steps);\n  latencies: %s\n",
           a->costs_file ? a->costs_file
                         : "h100, measured on an NVIDIA H100 (--driver-costs h200 or a100: "
                           "an H200's, the published A100 figures)");
    if (t->run_failures) {
        char size[32];
        print_size(size, sizeof size, (size_t)res[0].run_first_size);
        printf("the run failed %zu request%s (the first: #%zu, %s); on the %s:\n",
               t->run_failures, plural(t->run_failures), res[0].run_first_failed, size,
               a->capacity ? device : "unlimited device the replay assumed");
        for (int i = 0; i < a->nconf; i++)
            print_run_verdict(a->confs[i], &res[i]);
        if (t->preexisting_blocks)
            printf("  (the history began late: %zu block%s the run held are not replayed, so "
                   "these verdicts may be too hopeful)\n",
                   t->preexisting_blocks, plural(t->preexisting_blocks));
    }
    if (a->nconf > 1) {
        printf("verdict (min capacity: the smallest device that runs the trace, in 2 MiB "
               "steps;\n  checked, not assumed monotone: the capacities right above it and some "
               "up to the unlimited peak run too):\n");
        for (int i = 0; i < a->nconf; i++)
            if (res[i].min_check.raised)
                printf("%s: a capacity above the bisection's answer failed; the answer was moved "
                       "above it (%zu time%s)\n", a->confs[i], res[i].min_check.raised,
                       plural(res[i].min_check.raised));
    }
    for (int i = 1; i < a->nconf; i++)
        print_verdict(a->confs[i], &res[i], mins[i], a->confs[0], &res[0], mins[0], a->capacity);
}

/* Load the trace, replay it under each configuration and print the result. The exit status. */
static int replay_trace(replay_args *a)
{
    ts_config cfgs[MAX_CONFS];
    for (int i = 0; i < a->nconf; i++)
        if (conf_parse(a->confs[i], &cfgs[i]) != 0)
            return 2;
    if (a->repeat && a->ro.steps && a->ro.steps != a->repeat) {
        fprintf(stderr, "tessera-replay: --repeat %zu makes %zu steps: --steps %zu disagrees\n",
                a->repeat, a->repeat, a->ro.steps);
        return 2;
    }

    trace t;
    if (trace_load(&t, a->path) != 0)
        return 1;
    if (a->repeat) {
        if (trace_repeat(&t, a->repeat) != 0) {
            fprintf(stderr, "tessera-replay: %s: cannot repeat it %zu times (host memory, or "
                    "more than 2^32 allocations)\n", a->path, a->repeat);
            trace_free(&t);
            return 1;
        }
        a->ro.steps = a->repeat;
    }
    print_trace_notes(&t, a->path, a->verbose);

    size_t limit;
    bool recorded;
    choose_device(a, &t, &limit, &recorded);
    const char *capacity_source = recorded ? "recorded" : a->capacity ? "given" : "unlimited";
    char device[128];
    device_text(device, sizeof device, a->capacity, limit, recorded);

    replay_result res[MAX_CONFS];
    size_t mins[MAX_CONFS] = {0}, limits[MAX_CONFS] = {0};
    if (replay_all(a, &t, cfgs, limit, res, mins, limits) != 0) {
        trace_free(&t);
        return 1;
    }

    if (a->json)
        print_json_all(a, &t, limits, capacity_source, res, mins);
    else if (a->compare)
        print_compare(a, &t, device, res, mins);
    else
        print_report(&t, a->confs[0], device, &res[0], mins[0]);
    trace_free(&t);
    for (int i = 0; i < a->nconf; i++)
        if (res[i].num_ooms && !a->min_cap && (a->capacity || limit))
            return 3; /* the trace did not fit the device */
    return 0;
}

int main(int argc, char **argv)
{
    replay_args a = {0};
    ts_driver_costs_defaults(&a.costs);
    a.ro = (replay_opts){&a.costs, 0};
    int rc = parse_options(argc, argv, &a);
    if (rc >= 0)
        return rc;
    if (a.check) {
        if (optind + 1 != argc) {
            fprintf(stderr, "tessera-replay: --check-pytorch takes one snapshot\n");
            return 2;
        }
        return replay_check_pytorch(argv[optind], a.verbose);
    }
    rc = parse_operands(argc, argv, &a);
    if (rc >= 0)
        return rc;
    return replay_trace(&a);
}
