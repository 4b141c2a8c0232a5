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
          "(Thread,Time,Action,Pointer,Size,Stream: what TESSERA_TRACE writes) or a PyTorch\n"
          "memory snapshot (.pickle, read with scripts/snapshot2trace). Replays start from an\n"
          "empty device: what a snapshot held before its trace began is reported, not replayed.\n"
          "\n"
          "  --conf STR         allocator configuration, TESSERA_ALLOC_CONF syntax (default: PyTorch's)\n"
          "  --capacity SIZE    device size, e.g. 80G (default: unlimited)\n"
          "  --min-capacity     also find the smallest device (2 MiB steps) that runs the trace\n"
          "                     without an out-of-memory error\n"
          "  --compare C1 C2 .. replay under each configuration; print a side-by-side table\n"
          "                     ('default' is PyTorch's defaults)\n"
          "  --json             one JSON object (an array with --compare)\n"
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
    if (strcmp(text, "default") == 0 || strcmp(text, "pytorch") == 0) {
        ts_config_defaults(cfg);
        return 0;
    }
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
    if (min_cap)
        fprintf(f, ", \"min_capacity_bytes\": %zu", min_cap);
    fprintf(f, ", \"ns_per_op\": %.1f}", r->ns_per_op);
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
    printf("retries / OOMs     %llu / %llu\n", (unsigned long long)r->num_alloc_retries,
           (unsigned long long)r->num_ooms);
    if (min_cap) {
        print_size(m, sizeof m, min_cap);
        printf("min capacity       %s (%.2f%% above peak allocated)\n", m,
               r->peak_allocated ? 100.0 * ((double)min_cap / (double)r->peak_allocated - 1) : 0);
    }
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
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *conf_text = "default";
    size_t capacity = 0;
    bool min_cap = false, compare = false, json = false, check = false, verbose = false;
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
        confs[nconf++] = conf_text;
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
        if (replay_run(&t, &cfgs[i], capacity, &res[i]) != 0) {
            fprintf(stderr, "tessera-replay: out of host memory\n");
            trace_free(&t);
            return 1;
        }
        if (min_cap || compare) {
            replay_result unlimited = res[i];
            if (capacity && replay_run(&t, &cfgs[i], 0, &unlimited) != 0)
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
        printf("%s: %zu events, %zu allocations (replayed from an empty device%s)\n", path, t.n,
               t.allocations, capacity ? "" : ", unlimited capacity");
        printf("%-40s %11s %11s %8s %12s %9s %9s %9s %7s %7s\n", "configuration", "peak alloc",
               "peak resv", "util", "min capacity", "dev alloc", "dev free", "drv calls",
               "retries", "ns/op");
        for (int i = 0; i < nconf; i++) {
            char a[32], b[32], m[32];
            print_size(a, sizeof a, res[i].peak_allocated);
            print_size(b, sizeof b, res[i].peak_reserved);
            print_size(m, sizeof m, mins[i]);
            printf("%-40.40s %11s %11s %7.2f%% %12s %9llu %9llu %9llu %7llu %7.1f\n", confs[i], a,
                   b, 100 * res[i].utilization, m, (unsigned long long)res[i].num_device_alloc,
                   (unsigned long long)res[i].num_device_free,
                   (unsigned long long)res[i].device_calls,
                   (unsigned long long)res[i].num_alloc_retries, res[i].ns_per_op);
        }
    } else {
        print_report(&t, confs[0], capacity, &res[0], mins[0]);
    }
    trace_free(&t);
    for (int i = 0; i < nconf; i++)
        if (res[i].num_ooms && !min_cap && capacity)
            return 3; /* the trace did not fit the given device */
    return 0;
}
