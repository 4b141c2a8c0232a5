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

#define MAX_CONFS 16

static void usage(FILE *f)
{
    fputs("usage: tessera-replay [options] TRACE\n"
          "       tessera-replay --check-pytorch SNAPSHOT.pickle\n"
          "\n"
          "Replays an allocation trace through tessera's allocator core on a model of the device\n"
          "(no GPU needed) and reports what the allocator would have done. TRACE is an RMM log\n"
          "(Thread,Time,Action,Pointer,Size,Stream: what TESSERA_TRACE writes; columns are\n"
          "read by header name, in any order, quoted or not, extra columns ignored) or a PyTorch\n"
          "memory snapshot (.pickle, read with scripts/snapshot2trace). Replays start from an\n"
          "empty device: what a snapshot held before its trace began is reported, not replayed.\n"
          "\n"
          "  --conf STR         allocator configuration, TESSERA_ALLOC_CONF syntax; 'default' is\n"
          "                     tessera's default, 'pytorch' PyTorch's policy (default: 'default';\n"
          "                     with --check-pytorch: 'pytorch')\n"
          "  --capacity SIZE    device size, e.g. 80G (default: unlimited)\n"
          "  --min-capacity     also find the smallest device (2 MiB steps) that runs the trace\n"
          "                     without an out-of-memory error\n"
          "  --compare C1 C2 .. replay under each configuration; print a side-by-side table\n"
          "                     (out-of-memory errors and the first allocation that failed\n"
          "                     included) and a verdict for each configuration against the\n"
          "                     first\n"
          "  --json             one JSON object (an array with --compare)\n"
          "  --driver-costs FILE  driver-call latencies for the estimated driver time: lines\n"
          "                     'CALL US_PER_CALL [US_PER_MIB]' (cuMemCreate 193.32), '#'\n"
          "                     comments; calls not named keep the published defaults\n"
          "  --steps N          the trace is N steps of a loop (equal event counts): also report\n"
          "                     the estimated driver time per step once memory stopped growing\n"
          "  --check-pytorch    check that every allocation lands at the address PyTorch chose\n"
          "  -v, --verbose      more detail on stderr\n"
          "  -h, --help\n",
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

static int conf_parse(const char *text, ts_config *cfg)
{
    ts_config_diag diag;
    if (strcmp(text, "pytorch") == 0) { /* PyTorch's policy: the table's values */
        ts_config_defaults(cfg);
        return 0;
    }
    if (strcmp(text, "default") == 0) /* tessera's default: what no configuration gives */
        text = "";
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
 * and the driver calls that cost. */
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
    printf("; %llu driver calls against %llu (est. %.1f ms against %.1f ms)\n",
           (unsigned long long)r->device_calls, (unsigned long long)b->device_calls,
           r->driver_ns / 1e6, b->driver_ns / 1e6);
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
                       const replay_result *r, size_t min_cap)
{
    fputs("{\"trace\": ", f);
    json_put_string(f, t->source);
    fputs(", \"conf\": ", f);
    json_put_string(f, conf);
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
    fprintf(f, ", \"failed_allocations\": %zu", r->failed_allocs);
    if (r->failed_allocs)
        fprintf(f, ", \"first_oom_allocation\": %zu, \"first_oom_bytes\": %llu", r->first_failed,
                (unsigned long long)r->first_failed_size);
    if (min_cap)
        fprintf(f, ", \"min_capacity_bytes\": %zu", min_cap);
    fprintf(f,
            ", \"driver_ms\": %.3f, \"driver_ms_growth\": %.3f, \"growth_events\": %zu, "
            "\"driver_ms_after_growth\": %.3f",
            r->driver_ns / 1e6, r->driver_ns_growth / 1e6, r->growth_events,
            (r->driver_ns - r->driver_ns_growth) / 1e6);
    if (r->driver_ns_per_step >= 0)
        fprintf(f, ", \"steady_steps\": %zu, \"driver_ms_per_step\": %.3f", r->steady_steps,
                r->driver_ns_per_step / 1e6);
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

static void print_report(const trace *t, const char *conf, size_t capacity,
                         const replay_result *r, size_t min_cap)
{
    char a[32], b[32], c[32], m[32];
    print_size(a, sizeof a, r->peak_allocated);
    print_size(b, sizeof b, r->peak_reserved);
    print_size(c, sizeof c, capacity);
    printf("trace              %s\n", t->source);
    printf("configuration      %s\n", conf);
    printf("device             %s\n", capacity ? c : "unlimited");
    printf("events             %zu (%zu allocations, %zu frees; %zu frees of unknown addresses "
           "skipped)\n",
           t->n, t->allocations, t->frees, t->skipped_frees);
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
        printf("min capacity       %s (%.2f%% above peak allocated)\n", m,
               r->peak_allocated ? 100.0 * ((double)min_cap / (double)r->peak_allocated - 1) : 0);
    }
    char step[64];
    step_text(step, sizeof step, r);
    printf("driver time (est.) %.1f ms: %.1f ms growing (events 1-%zu), %.1f ms after%s%s\n",
           r->driver_ns / 1e6, r->driver_ns_growth / 1e6, r->growth_events,
           (r->driver_ns - r->driver_ns_growth) / 1e6, r->driver_ns_per_step >= 0 ? "; " : "",
           r->driver_ns_per_step >= 0 ? step : "");
    printf("host time          %.1f ns per operation\n", r->ns_per_op);
}

int main(int argc, char **argv)
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
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *conf_text = NULL;
    size_t capacity = 0;
    bool min_cap = false, compare = false, json = false, check = false, verbose = false;
    ts_driver_costs costs;
    ts_driver_costs_defaults(&costs);
    replay_opts ro = {&costs, 0};
    const char *costs_file = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': conf_text = optarg; break;
        case 'C':
            if (parse_size(optarg, &capacity) != 0) {
                fprintf(stderr, "tessera-replay: --capacity: '%s' is not a size (e.g. 80G)\n",
                        optarg);
                return 2;
            }
            break;
        case 'm': min_cap = true; break;
        case 'D': {
            char err[512];
            if (ts_driver_costs_load(&costs, optarg, err, sizeof err) != 0) {
                fprintf(stderr, "tessera-replay: --driver-costs: %s\n", err);
                return 2;
            }
            costs_file = optarg;
            break;
        }
        case 'S': {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-' || v == 0 || v > 100000000) {
                fprintf(stderr, "tessera-replay: --steps: '%s' is not a number of steps "
                        "(1 to 100000000)\n", optarg);
                return 2;
            }
            ro.steps = (size_t)v;
            break;
        }
        case 'x': compare = true; break;
        case 'j': json = true; break;
        case 'p': check = true; break;
        case 'v': verbose = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (check) {
        if (optind + 1 != argc) {
            fprintf(stderr, "tessera-replay: --check-pytorch takes one snapshot\n");
            return 2;
        }
        return replay_check_pytorch(argv[optind], verbose);
    }

    /* With --compare: the trace is the first positional argument, configurations follow. */
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    const char *confs[MAX_CONFS];
    int nconf = 0;
    if (compare) {
        for (int i = optind + 1; i < argc && nconf < MAX_CONFS; i++)
            confs[nconf++] = argv[i];
        if (nconf == 0) {
            fprintf(stderr, "tessera-replay: --compare needs configurations after the trace\n");
            return 2;
        }
    } else {
        if (optind + 1 != argc) {
            fprintf(stderr, "tessera-replay: one trace at a time (or use --compare)\n");
            return 2;
        }
        confs[nconf++] = conf_text ? conf_text : check ? "pytorch" : "default";
    }

    ts_config cfgs[MAX_CONFS];
    for (int i = 0; i < nconf; i++)
        if (conf_parse(confs[i], &cfgs[i]) != 0)
            return 2;

    trace t;
    if (trace_load(&t, path) != 0)
        return 1;
    if (verbose || t.skipped_frees)
        fprintf(stderr,
                "tessera-replay: %s: %zu allocations, %zu frees, %zu frees of addresses the trace "
                "never allocated skipped, %zu allocations never freed\n",
                path, t.allocations, t.frees, t.skipped_frees, t.never_freed);

    replay_result res[MAX_CONFS];
    size_t mins[MAX_CONFS] = {0};
    for (int i = 0; i < nconf; i++) {
        if (replay_run(&t, &cfgs[i], capacity, &ro, &res[i]) != 0) {
            fprintf(stderr, "tessera-replay: out of host memory\n");
            trace_free(&t);
            return 1;
        }
        if (min_cap || compare) {
            replay_result unlimited = res[i];
            if (capacity && replay_run(&t, &cfgs[i], 0, &ro, &unlimited) != 0)
                return 1;
            mins[i] = replay_min_capacity(&t, &cfgs[i], &unlimited);
        }
    }

    if (json) {
        if (compare)
            fputs("[", stdout);
        for (int i = 0; i < nconf; i++) {
            if (i)
                fputs(",\n ", stdout);
            print_json(stdout, &t, confs[i], capacity, &res[i], mins[i]);
        }
        puts(compare ? "]" : "");
    } else if (compare) {
        char dev[32];
        print_size(dev, sizeof dev, capacity);
        printf("%s: %zu events, %zu allocations (replayed from an empty device, %s%s)\n", path,
               t.n, t.allocations, capacity ? dev : "unlimited capacity",
               capacity ? " device" : "");
        printf("%-40s %11s %11s %8s %12s %9s %9s %9s %9s %9s %7s %5s %-16s %7s\n",
               "configuration", "peak alloc", "peak resv", "util", "min capacity", "dev alloc",
               "dev free", "drv calls", "drv grow", "drv/step", "retries", "OOMs", "first OOM",
               "ns/op");
        for (int i = 0; i < nconf; i++) {
            char a[32], b[32], m[32], first[48];
            print_size(a, sizeof a, res[i].peak_allocated);
            print_size(b, sizeof b, res[i].peak_reserved);
            print_size(m, sizeof m, mins[i]);
            first_oom_text(first, sizeof first, &res[i]);
            char grow[32], per_step[32] = "-";
            snprintf(grow, sizeof grow, "%.1fms", res[i].driver_ns_growth / 1e6);
            if (res[i].driver_ns_per_step >= 0)
                snprintf(per_step, sizeof per_step, "%.3fms", res[i].driver_ns_per_step / 1e6);
            printf("%-40.40s %11s %11s %7.2f%% %12s %9llu %9llu %9llu %9s %9s %7llu %5zu %-16s "
                   "%7.1f\n",
                   confs[i], a, b, 100 * res[i].utilization, m,
                   (unsigned long long)res[i].num_device_alloc,
                   (unsigned long long)res[i].num_device_free,
                   (unsigned long long)res[i].device_calls, grow, per_step,
                   (unsigned long long)res[i].num_alloc_retries, res[i].failed_allocs, first,
                   res[i].ns_per_op);
        }
        print_peak_note(res, nconf);
        printf("drv grow: estimated driver time until memory stopped growing; drv/step: per step "
               "after that (--steps);\n  latencies: %s\n",
               costs_file ? costs_file : "the published A100 figures (--driver-costs FILE)");
        if (nconf > 1)
            printf("verdict (min capacity: the smallest device that runs the trace, in 2 MiB "
                   "steps):\n");
        for (int i = 1; i < nconf; i++)
            print_verdict(confs[i], &res[i], mins[i], confs[0], &res[0], mins[0], capacity);
    } else {
        print_report(&t, confs[0], capacity, &res[0], mins[0]);
    }
    trace_free(&t);
    for (int i = 0; i < nconf; i++)
        if (res[i].num_ooms && !min_cap && capacity)
            return 3; /* the trace did not fit the given device */
    return 0;
}
