/* tessera-stat: read the stats pages tessera processes publish (docs/stats-page.md).
 *
 * Never trusts a page: every page goes through the validating reader, a bad page gives a message
 * and a non-zero exit where it was asked for by pid, and a line in the "unreadable" section of
 * listings (which still succeed for the other pages).
 *
 * Exit status: 0 success; 1 the page asked for is missing, stale-and-unreadable, corrupt, busy,
 * or a stale page could not be removed, or a snapshot file could not be read or written (or
 * symbolize refused it); 2 usage error; 3 release, pause or resume was refused or could not be
 * asked (another user's process, no control channel, no answer, or the process's own refusal).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "statspage/collect.h"
#include "statspage/render.h"
#include "tessera/history.h"
#include "tools/stat/stat.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

#define EXIT_USAGE 2

static const char *prog = "tessera-stat";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s [--dir DIR]                      table of tessera processes\n"
            "       %s [--dir DIR] PID                  every counter of one process\n"
            "       %s --json [PID]                     JSON (memory_stats key names)\n"
            "       %s --prometheus [--labels L]        Prometheus text format\n"
            "       %s --watch SECONDS [--count N]      redraw the table (Ctrl-C stops)\n"
            "       %s map PID [--device D] [--width W] ASCII segment map\n"
            "       %s snapshot PID -o FILE [--wait S]  PyTorch memory snapshot (pickle)\n"
            "       %s release PID [--keep SIZE]        release the cached memory of a process of\n"
            "                                           this user (its empty_cache), keeping at\n"
            "                                           most SIZE cached per device (default 0)\n"
            "       %s pause PID                        copy a process's device memory to host\n"
            "                                           memory and give the device its pages back,\n"
            "                                           every address kept; its CUDA calls wait\n"
            "       %s resume PID                       map the pages again and copy the bytes back\n"
            "       %s symbolize FILE [-o OUT]          name the raw frames of a snapshot_on_oom\n"
            "                                           snapshot (FILE replaced without -o)\n"
            "       %s --serve [ADDR:PORT] [--labels L] serve /metrics (default " TS_STAT_SERVE_DEFAULT ")\n"
            "       %s --gc                             remove pages of dead processes\n"
            "       %s --help | --version\n"
            "\n"
            "Pages are read from --dir, else $" TESSERA_PAGE_DIR_ENV ", else " TESSERA_PAGE_DEFAULT_DIR
            ".\n"
            "Sizes in the table and the map are binary (KiB, MiB, GiB); JSON, Prometheus and the\n"
            "per-process view give exact bytes.\n"
            "--labels L: the Prometheus labels beyond pid, device, pool: none, or a list of\n"
            "command, config, version (default: all; --serve beyond loopback: version only).\n"
            "FRAG in the table: the share of free cached memory that no single request can use\n"
            "(holes inside segments in use; a wholly free segment is not fragmentation).\n",
            prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog, prog);
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

int ts_stat_load_all(const char *dir, views *out)
{
    int e = ts_views_load_all(dir, out);
    if (e) {
        fprintf(stderr, "%s: cannot read %s: %s\n", prog, dir, strerror(e));
        return -1;
    }
    return 0;
}

void ts_stat_free_all(views *vs)
{
    ts_views_free(vs);
}

static void warn_unreadable(const views *vs, const char *dir)
{
    for (size_t i = 0; i < vs->n; i++) {
        const ts_proc_view *v = &vs->v[i];
        if (v->status != TS_PAGE_OK && !ts_proc_view_is_stale(v))
            fprintf(stderr, "%s: skipped %s/" TESSERA_PAGE_FILE_PREFIX "%d: %s\n", prog, dir,
                    v->pid, v->error);
    }
}

/* One process, by pid: 0 with *v loaded and readable, else 1 after a message. */
static int load_one(const char *dir, int pid, ts_proc_view *v)
{
    ts_proc_view_load(v, dir, pid, true);
    if (v->status == TS_PAGE_OK)
        return 0;
    if (v->status == TS_PAGE_ENOENT)
        fprintf(stderr, "%s: no stats page for pid %d in %s\n", prog, pid, dir);
    else
        fprintf(stderr, "%s: %s/" TESSERA_PAGE_FILE_PREFIX "%d: %s%s%s\n", prog, dir, pid, v->error,
                ts_proc_view_is_stale(v) ? "; the page is stale: " : "",
                ts_proc_view_is_stale(v) ? v->owner_why : "");
    return 1;
}

/* 1 (after a message for each) when a slot of v could not be read. */
static int check_slots(const char *dir, const ts_proc_view *v)
{
    int rc = 0;
    for (uint32_t k = 0; k < v->nslots; k++)
        if (v->slots[k].status != TS_PAGE_OK) {
            fprintf(stderr, "%s: %s/" TESSERA_PAGE_FILE_PREFIX "%d: slot %" PRIu32 ": %s\n", prog,
                    dir, v->pid, v->slots[k].index, v->slots[k].error);
            rc = 1;
        }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */

static int cmd_table(const char *dir)
{
    views vs;
    if (ts_stat_load_all(dir, &vs) != 0)
        return 1;
    ts_render_table(stdout, vs.v, vs.n, dir);
    ts_stat_free_all(&vs);
    return 0;
}

static int cmd_detail(const char *dir, int pid)
{
    ts_proc_view v;
    int rc = load_one(dir, pid, &v);
    if (rc == 0) {
        ts_render_env env;
        ts_render_env_load(&env);
        ts_render_detail(stdout, &v, &env);
        rc = check_slots(dir, &v);
    }
    ts_proc_view_free(&v);
    return rc;
}

static int cmd_json(const char *dir, int pid)
{
    if (pid > 0) {
        ts_proc_view v;
        int rc = load_one(dir, pid, &v);
        if (rc == 0) {
            ts_render_json(stdout, &v, 1);
            rc = check_slots(dir, &v);
        }
        ts_proc_view_free(&v);
        return rc;
    }
    views vs;
    if (ts_stat_load_all(dir, &vs) != 0)
        return 1;
    ts_render_json(stdout, vs.v, vs.n);
    ts_stat_free_all(&vs);
    return 0;
}

static int cmd_prometheus(const char *dir, const ts_prom_labels *labels)
{
    views vs;
    if (ts_stat_load_all(dir, &vs) != 0)
        return 1;
    warn_unreadable(&vs, dir);
    ts_render_prometheus_labels(stdout, vs.v, vs.n, labels);
    ts_stat_free_all(&vs);
    return 0;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int cmd_watch(const char *dir, double seconds, long count)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: the sleep wakes up */
    sigaction(SIGTERM, &sa, NULL);
    bool tty = isatty(STDOUT_FILENO);
    for (long i = 0; !interrupted && (count <= 0 || i < count); i++) {
        views vs;
        if (ts_stat_load_all(dir, &vs) != 0)
            return 1;
        char when[32];
        time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) || !strftime(when, sizeof when, "%H:%M:%S", &tm))
            snprintf(when, sizeof when, "?");
        if (tty)
            fputs("\033[H\033[2J", stdout);
        else if (i)
            fputc('\n', stdout);
        printf("tessera-stat  every %gs  %s  (Ctrl-C to stop)\n\n", seconds, when);
        ts_render_table(stdout, vs.v, vs.n, dir);
        ts_stat_free_all(&vs);
        if (fflush(stdout) != 0)
            return 1;
        if (count > 0 && i + 1 >= count)
            break;
        struct timespec ts;
        ts.tv_sec = (time_t)seconds;
        ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
        while (!interrupted && nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    return 0;
}

static int cmd_map(const char *dir, int pid, long device, unsigned width)
{
    ts_proc_view v;
    int rc = load_one(dir, pid, &v);
    if (rc) {
        ts_proc_view_free(&v);
        return rc;
    }
    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_pid(&pg, dir, pid);
    tessera_page_slot_head *head = malloc(sizeof *head);
    tessera_page_segment *segs = calloc(TESSERA_PAGE_MAX_SEGMENTS, sizeof *segs);
    tessera_page_block *blocks = calloc(TESSERA_PAGE_MAX_BLOCKS, sizeof *blocks);
    int shown = 0;
    if (!head || !segs || !blocks) {
        fprintf(stderr, "%s: out of memory\n", prog);
        rc = 1;
    } else if (st != TS_PAGE_OK) {
        fprintf(stderr, "%s: %s/" TESSERA_PAGE_FILE_PREFIX "%d: %s\n", prog, dir, pid, pg.error);
        rc = 1;
    } else {
        if (ts_proc_view_is_stale(&v))
            printf("note: this page is stale (%s); it shows the last state its process published\n\n",
                   v.owner_why);
        for (uint32_t i = 0; i < pg.hdr.slot_count; i++) {
            int s = ts_page_snapshot(&pg, i, head, segs, blocks);
            if (s == TS_PAGE_EEMPTY)
                continue;
            if (s != TS_PAGE_OK) {
                fprintf(stderr, "%s: %s/" TESSERA_PAGE_FILE_PREFIX "%d: slot %" PRIu32 ": %s\n",
                        prog, dir, pid, i, pg.error);
                rc = 1;
                continue;
            }
            if (device >= 0 && head->device != device)
                continue;
            if (shown++)
                fputc('\n', stdout);
            ts_render_map(stdout, &v, head, segs, blocks, width);
        }
        if (!shown && rc == 0) {
            if (device >= 0)
                fprintf(stderr, "%s: pid %d has no slot for device %ld\n", prog, pid, device);
            else
                fprintf(stderr, "%s: pid %d has no device slot in use yet\n", prog, pid);
            rc = 1;
        }
    }
    free(head);
    free(segs);
    free(blocks);
    ts_page_close(&pg);
    ts_proc_view_free(&v);
    return rc;
}

struct gc_state {
    const char *dir;
    int failed;
    int rings; /* history rings removed (the rest of the count is pages) */
};

static void gc_report(void *user, const char *name, int pid, int removed, const char *why)
{
    struct gc_state *g = user;
    (void)pid;
    if (removed) {
        printf("removed %s/%s (%s)\n", g->dir, name, why);
        g->rings += strstr(name, TESSERA_HISTORY_FILE_INFIX) != NULL;
    } else {
        printf("kept %s/%s: %s\n", g->dir, name, why);
        g->failed = 1;
    }
}

static int cmd_gc(const char *dir)
{
    struct gc_state g = {dir, 0, 0};
    int n = ts_page_gc(dir, gc_report, &g);
    if (n < 0) {
        fprintf(stderr, "%s: cannot read %s: %s\n", prog, dir, strerror(-n));
        return 1;
    }
    int pages = n - g.rings;
    if (n == 0 && !g.failed)
        printf("no stale pages in %s\n", dir);
    else if (g.rings)
        printf("removed %d stale page%s and %d history ring%s\n", pages, pages == 1 ? "" : "s",
               g.rings, g.rings == 1 ? "" : "s");
    else
        printf("removed %d stale page%s\n", pages, pages == 1 ? "" : "s");
    return g.failed ? 1 : 0;
}

/* ------------------------------------------------------------------------------------------ */

/* ---- the command line ---------------------------------------------------------------------- */

/* What the command line asked for. */
typedef struct stat_args {
    int json, prom, gc, watch, is_map, is_snapshot, is_symbolize, is_release, is_pause, is_resume;
    double seconds;   /* --watch */
    long count;       /* --count */
    long device;      /* --device (map), -1: every device */
    long width;       /* --width (map) */
    long pid;         /* 0: none given */
    const char *dir, *serve, *out_path, *labels;
    const char *file; /* symbolize FILE */
    double wait_s;    /* --wait (snapshot) */
    int wait_given;
    uint64_t keep; /* --keep (release) */
    int keep_given;
    ts_prom_labels prom_labels;
} stat_args;

/* A seconds value in (lo, hi] (or [0, hi] when zero_ok), else -1. */
static int parse_seconds(const char *s, bool zero_ok, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(zero_ok ? v >= 0 : v > 0) || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A size as the configuration spells one (memory_limit's syntax: bytes, K, M, G or T): 0, or
 * -1 when s is not one. */
static int parse_size(const char *s, uint64_t *out)
{
    char text[96];
    ts_config c;
    if (strlen(s) > 64 || strpbrk(s, ",:") ||
        snprintf(text, sizeof text, "memory_limit:%s", s) < 0 ||
        ts_config_parse(&c, text, "--keep", TS_CONFIG_STRICT, NULL, NULL, NULL) != 0)
        return -1;
    *out = c.memory_limit;
    return 0;
}

/* --serve alone serves the default address; --serve ADDR:PORT (a separate word with a colon)
 * or --serve=ADDR:PORT another. */
static const char *serve_address(int argc, char **argv)
{
    if (optarg)
        return optarg;
    if (optind < argc && strchr(argv[optind], ':') && argv[optind][0] != '-')
        return argv[optind++];
    return TS_STAT_SERVE_DEFAULT;
}

/* The options. Returns -1 to go on, else the exit status (--help, --version, a bad option). */
static int parse_options(int argc, char **argv, stat_args *a)
{
    enum { OPT_JSON = 256, OPT_PROM, OPT_WATCH, OPT_COUNT, OPT_GC, OPT_DIR, OPT_DEVICE, OPT_WIDTH,
           OPT_HELP, OPT_VERSION, OPT_SERVE, OPT_WAIT, OPT_LABELS, OPT_KEEP };
    static const struct option opts[] = {
        {"json", no_argument, NULL, OPT_JSON},       {"prometheus", no_argument, NULL, OPT_PROM},
        {"watch", required_argument, NULL, OPT_WATCH}, {"count", required_argument, NULL, OPT_COUNT},
        {"gc", no_argument, NULL, OPT_GC},           {"dir", required_argument, NULL, OPT_DIR},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"width", required_argument, NULL, OPT_WIDTH}, {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION}, {"serve", optional_argument, NULL, OPT_SERVE},
        {"wait", required_argument, NULL, OPT_WAIT}, {"output", required_argument, NULL, 'o'},
        {"labels", required_argument, NULL, OPT_LABELS},
        {"keep", required_argument, NULL, OPT_KEEP},
        {NULL, 0, NULL, 0}};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: a->json = 1; break;
        case OPT_PROM: a->prom = 1; break;
        case OPT_GC: a->gc = 1; break;
        case OPT_DIR: a->dir = optarg; break;
        case OPT_WATCH:
            if (parse_seconds(optarg, false, 86400, &a->seconds)) {
                fprintf(stderr, "%s: --watch wants seconds in (0, 86400], not '%s'\n", prog, optarg);
                return EXIT_USAGE;
            }
            a->watch = 1;
            break;
        case OPT_COUNT:
            if (parse_int(optarg, 1, LONG_MAX, &a->count)) {
                fprintf(stderr, "%s: --count wants a positive number, not '%s'\n", prog, optarg);
                return EXIT_USAGE;
            }
            break;
        case OPT_DEVICE:
            if (parse_int(optarg, 0, 65535, &a->device)) {
                fprintf(stderr, "%s: --device wants a device ordinal, not '%s'\n", prog, optarg);
                return EXIT_USAGE;
            }
            break;
        case OPT_WIDTH:
            if (parse_int(optarg, 8, 1024, &a->width)) {
                fprintf(stderr, "%s: --width wants 8 to 1024 characters, not '%s'\n", prog, optarg);
                return EXIT_USAGE;
            }
            break;
        case OPT_SERVE: a->serve = serve_address(argc, argv); break;
        case OPT_LABELS: a->labels = optarg; break;
        case 'o': a->out_path = optarg; break;
        case OPT_WAIT:
            if (parse_seconds(optarg, true, 60, &a->wait_s)) {
                fprintf(stderr, "%s: --wait wants seconds in [0, 60], not '%s'\n", prog, optarg);
                return EXIT_USAGE;
            }
            a->wait_given = 1;
            break;
        case OPT_KEEP:
            if (parse_size(optarg, &a->keep)) {
                fprintf(stderr, "%s: --keep wants a size (bytes, or with K, M, G or T), not '%s'\n",
                        prog, optarg);
                return EXIT_USAGE;
            }
            a->keep_given = 1;
            break;
        case 'h':
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION:
            printf("tessera-stat %s (stats page layout %u)\n", TESSERA_VERSION,
                   TESSERA_PAGE_LAYOUT_VERSION);
            return 0;
        default:
            if (optopt)
                fprintf(stderr, "%s: option needs a value or is unknown: %s\n", prog, argv[optind - 1]);
            else
                fprintf(stderr, "%s: unknown option %s\n", prog, argv[optind - 1]);
            fprintf(stderr, "try '%s --help'\n", prog);
            return EXIT_USAGE;
        }
    }
    return -1;
}

/* The words after the options: a command (map, snapshot) and a pid, or symbolize and a file.
 * -1 to go on, else the exit status. */
static int parse_operands(int argc, char **argv, stat_args *a)
{
    a->is_map = optind < argc && strcmp(argv[optind], "map") == 0;
    a->is_snapshot = optind < argc && strcmp(argv[optind], "snapshot") == 0;
    a->is_symbolize = optind < argc && strcmp(argv[optind], "symbolize") == 0;
    a->is_release = optind < argc && strcmp(argv[optind], "release") == 0;
    a->is_pause = optind < argc && strcmp(argv[optind], "pause") == 0;
    a->is_resume = optind < argc && strcmp(argv[optind], "resume") == 0;
    if (a->is_map || a->is_snapshot || a->is_symbolize || a->is_release || a->is_pause ||
        a->is_resume)
        optind++;
    if (a->is_symbolize && optind < argc)
        a->file = argv[optind++];
    else if (optind < argc) {
        if (parse_int(argv[optind], 1, INT_MAX, &a->pid)) {
            fprintf(stderr, "%s: '%s' is not a pid\ntry '%s --help'\n", prog, argv[optind], prog);
            return EXIT_USAGE;
        }
        optind++;
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\ntry '%s --help'\n", prog, argv[optind], prog);
        return EXIT_USAGE;
    }
    return -1;
}

/* Each option goes with its mode, and one mode at a time. -1 when the combination is good
 * (the Prometheus labels parsed into a->prom_labels), else the exit status. */
static int check_combination(stat_args *a)
{
    int modes = a->json + a->prom + a->gc + a->watch + a->is_map + a->is_snapshot +
                a->is_symbolize + a->is_release + a->is_pause + a->is_resume + (a->serve != NULL);
    if (modes > 1) {
        fprintf(stderr, "%s: choose one of --json, --prometheus, --watch, --gc, --serve, map, "
                        "snapshot, symbolize, release, pause, resume\n", prog);
        return EXIT_USAGE;
    }
    if (a->is_symbolize && !a->file) {
        fprintf(stderr, "%s: symbolize needs a snapshot file\n", prog);
        return EXIT_USAGE;
    }
    if (a->out_path && !a->is_snapshot && !a->is_symbolize) {
        fprintf(stderr, "%s: -o goes with snapshot or symbolize\n", prog);
        return EXIT_USAGE;
    }
    if (a->is_snapshot && (!a->pid || !a->out_path)) {
        fprintf(stderr, "%s: snapshot needs a pid and -o FILE\n", prog);
        return EXIT_USAGE;
    }
    if (a->wait_given && !a->is_snapshot) {
        fprintf(stderr, "%s: --wait goes with snapshot\n", prog);
        return EXIT_USAGE;
    }
    if (a->serve && a->pid) {
        fprintf(stderr, "%s: --serve takes no pid\n", prog);
        return EXIT_USAGE;
    }
    if ((a->prom || a->gc || a->watch) && a->pid) {
        fprintf(stderr, "%s: this mode takes no pid\n", prog);
        return EXIT_USAGE;
    }
    if ((a->is_release || a->is_pause || a->is_resume) && !a->pid) {
        fprintf(stderr, "%s: %s needs a pid\n", prog,
                a->is_release ? "release" : a->is_pause ? "pause" : "resume");
        return EXIT_USAGE;
    }
    if (a->keep_given && !a->is_release) {
        fprintf(stderr, "%s: --keep goes with release\n", prog);
        return EXIT_USAGE;
    }
    if (a->is_map && !a->pid) {
        fprintf(stderr, "%s: map needs a pid\n", prog);
        return EXIT_USAGE;
    }
    if ((a->device >= 0 || a->width != 64) && !a->is_map) {
        fprintf(stderr, "%s: --device and --width go with map\n", prog);
        return EXIT_USAGE;
    }
    if (a->labels) {
        char err[160];
        if (!a->prom && !a->serve) {
            fprintf(stderr, "%s: --labels goes with --prometheus or --serve\n", prog);
            return EXIT_USAGE;
        }
        if (ts_prom_labels_parse(a->labels, &a->prom_labels, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            return EXIT_USAGE;
        }
    }
    if (a->count && !a->watch) {
        fprintf(stderr, "%s: --count goes with --watch\n", prog);
        return EXIT_USAGE;
    }
    return -1;
}

/* Run the mode asked for; its exit status. */
static int run_mode(const stat_args *a)
{
    if (a->is_symbolize)
        return ts_stat_symbolize(a->file, a->out_path);
    if (a->is_release)
        return ts_stat_release(a->dir, (int)a->pid, a->keep);
    if (a->is_pause || a->is_resume)
        return ts_stat_pause(a->dir, (int)a->pid, a->is_resume);
    if (a->is_snapshot)
        return ts_stat_snapshot(a->dir, (int)a->pid, a->out_path, a->wait_s);
    if (a->serve)
        return ts_stat_serve(a->dir, a->serve, a->labels);
    if (a->is_map)
        return cmd_map(a->dir, (int)a->pid, a->device, (unsigned)a->width);
    if (a->gc)
        return cmd_gc(a->dir);
    if (a->prom)
        return cmd_prometheus(a->dir, &a->prom_labels);
    if (a->json)
        return cmd_json(a->dir, (int)a->pid);
    if (a->watch)
        return cmd_watch(a->dir, a->seconds, a->count);
    if (a->pid)
        return cmd_detail(a->dir, (int)a->pid);
    return cmd_table(a->dir);
}

int main(int argc, char **argv)
{
    stat_args a = {0};
    a.device = -1;
    a.width = 64;
    a.wait_s = 2.0;
    a.prom_labels = (ts_prom_labels){true, true, true};
    int rc = parse_options(argc, argv, &a);
    if (rc < 0)
        rc = parse_operands(argc, argv, &a);
    if (rc < 0)
        rc = check_combination(&a);
    if (rc >= 0)
        return rc;
    if (!a.dir)
        a.dir = ts_statspage_dir();

    rc = run_mode(&a);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "%s: error writing the output: %s\n", prog, strerror(errno));
        return 1;
    }
    return rc;
}
