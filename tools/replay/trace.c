/* Trace loading for tessera-replay: RMM CSV logs and PyTorch snapshots (see trace.h). */
#include "tools/replay/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/ptrmap.h"

extern char **environ;

#ifndef TS_SOURCE_DIR
#define TS_SOURCE_DIR ""
#endif
#ifndef TS_DATADIR
#define TS_DATADIR "/usr/local/share"
#endif

/* --- small helpers ------------------------------------------------------------------------- */

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static int trace_push(trace *t, trace_kind kind, uint32_t slot, uint64_t size, uint64_t stream)
{
    if (grow((void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev) != 0) {
        fprintf(stderr, "tessera-replay: out of memory reading %s\n", t->source);
        return -1;
    }
    t->ev[t->n++] = (trace_event){kind, slot, size, stream};
    return 0;
}

/* Pointer -> slot bookkeeping shared by every format. */
typedef struct slotmap {
    ts_ptrmap map;
} slotmap;

static int trace_on_alloc(trace *t, slotmap *sm, uint64_t ptr, uint64_t size, uint64_t stream)
{
    uint32_t slot = (uint32_t)t->nslots++;
    if (ptr) {
        /* An address allocated again without a free: the old allocation leaks in the trace. */
        if (ts_ptrmap_get(&sm->map, (uintptr_t)ptr))
            ts_ptrmap_del(&sm->map, (uintptr_t)ptr);
        if (ts_ptrmap_put(&sm->map, (uintptr_t)ptr, (void *)(uintptr_t)(slot + 1)) != 0)
            return -1;
    }
    t->allocations++;
    return trace_push(t, TRACE_ALLOC, slot, size, stream);
}

/* A request the recorded run failed: replayed, never dropped (trace.h). */
static int trace_on_failed(trace *t, uint64_t size, uint64_t stream)
{
    if (size == 0)
        return 0;
    uint32_t slot = (uint32_t)t->nslots++;
    t->run_failures++;
    return trace_push(t, TRACE_FAILED, slot, size, stream);
}

static int trace_on_free(trace *t, slotmap *sm, uint64_t ptr, uint64_t stream)
{
    void *v = ptr ? ts_ptrmap_del(&sm->map, (uintptr_t)ptr) : NULL;
    if (!v) {
        t->skipped_frees++;
        return 0;
    }
    t->frees++;
    return trace_push(t, TRACE_FREE, (uint32_t)((uintptr_t)v - 1), 0, stream);
}

bool path_is_pickle(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    int c = fgetc(f);
    fclose(f);
    return c == 0x80; /* the PROTO opcode that starts protocol 2+ pickles */
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        if (got == 0)
            break;
        n += got;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* --- RMM CSV ------------------------------------------------------------------------------- */

/* RMM's logging_resource_adaptor writes "Thread,Time,Action,Pointer,Size,Stream" and rows with
 * the pointer and stream in hex (older versions with a 0x prefix); its replay benchmark reads the
 * columns by header name. So does this reader: any column order, extra columns, quoted fields,
 * spaces around fields. Without a header, RMM's order is assumed. */

#define CSV_MAX_FIELDS 64

/* Split one record in place into fields: separated by commas, optionally double-quoted (commas
 * inside, "" for a quote), spaces around a field dropped. Stores at most max fields and returns
 * how many there are, or -1 when a quote is not closed. */
static int csv_split(char *line, char **f, int max)
{
    int n = 0;
    char *r = line;
    for (;;) {
        while (*r == ' ' || *r == '\t')
            r++;
        char *start = r, *w = r;
        if (*r == '"') {
            r++;
            for (;;) {
                if (*r == '\0')
                    return -1;
                if (*r == '"' && r[1] == '"') {
                    *w++ = '"';
                    r += 2;
                } else if (*r == '"') {
                    r++;
                    break;
                } else {
                    *w++ = *r++;
                }
            }
            while (*r == ' ' || *r == '\t')
                r++;
            if (*r != ',' && *r != '\0')
                return -1; /* text after the closing quote */
        } else {
            while (*r != ',' && *r != '\0')
                *w++ = *r++;
            while (w > start && (w[-1] == ' ' || w[-1] == '\t'))
                w--;
        }
        bool last = *r == '\0';
        *w = '\0';
        if (n < max)
            f[n] = start;
        n++;
        if (last)
            return n;
        r++;
    }
}

/* Where each column RMM writes sits in a record. tessera's own logs add a Note column (RMM's
 * parser reads columns by name and ignores it): on the first row and on each "allocate failure"
 * row, what the run ran on, "device=D total=BYTES limit=BYTES conf=TEXT" (conf last: the rest of
 * the field). */
typedef struct csv_columns {
    int action, pointer, size, stream; /* stream: -1 when absent (stream 0) */
    int note;                          /* -1 when absent */
    int needed;                        /* fields a record must have */
} csv_columns;

static const csv_columns rmm_order = {2, 3, 4, 5, -1, 6};

static int column_of(char **f, int nf, const char *name)
{
    for (int i = 0; i < nf && i < CSV_MAX_FIELDS; i++)
        if (strcmp(f[i], name) == 0)
            return i;
    return -1;
}

/* A header names its columns; Action, Pointer and Size are required. Returns 1 when f is a
 * header (cols filled), 0 when it is a record, -1 after an error line. */
static int csv_header(char **f, int nf, csv_columns *cols, const char *path, size_t lineno)
{
    if (column_of(f, nf, "Action") < 0 && column_of(f, nf, "Thread") < 0)
        return 0;
    static const char *const required[] = {"Action", "Pointer", "Size"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (column_of(f, nf, required[i]) < 0) {
            fprintf(stderr,
                    "tessera-replay: %s:%zu: the header has no '%s' column (RMM's log has "
                    "Thread,Time,Action,Pointer,Size,Stream)\n",
                    path, lineno, required[i]);
            return -1;
        }
    cols->action = column_of(f, nf, "Action");
    cols->pointer = column_of(f, nf, "Pointer");
    cols->size = column_of(f, nf, "Size");
    cols->stream = column_of(f, nf, "Stream");
    cols->note = column_of(f, nf, "Note");
    int last = cols->action;
    int others[] = {cols->pointer, cols->size, cols->stream};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (others[i] > last)
            last = others[i];
    cols->needed = last + 1;
    return 1;
}

static bool parse_u64(const char *s, int base, uint64_t *out)
{
    if (!*s)
        return false;
    if (strcmp(s, "(nil)") == 0) {
        *out = 0;
        return true;
    }
    if (*s == '-' || *s == '+' || *s == ' ')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* A Note field (see csv_columns): what the run ran on. The first failed request's note wins over
 * the start's (the capacity at the failure is the one that mattered). Unknown keys are ignored;
 * a malformed number leaves the trace without a capacity rather than with a wrong one. */
static void csv_note(trace *t, const char *note, bool failure, bool *from_failure)
{
    if (!*note || (t->has_capacity && (*from_failure || !failure)))
        return;
    uint64_t total = 0, limit = 0;
    bool have_total = false, bad = false;
    char conf[sizeof t->run_conf] = "";
    const char *p = note;
    while (*p) {
        while (*p == ' ')
            p++;
        if (strncmp(p, "conf=", 5) == 0) {
            snprintf(conf, sizeof conf, "%s", p + 5);
            break;
        }
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char word[64];
        if (len < sizeof word) {
            memcpy(word, p, len);
            word[len] = '\0';
            char *eq = strchr(word, '=');
            if (eq) {
                *eq = '\0';
                char *num_end;
                errno = 0;
                unsigned long long v = strtoull(eq + 1, &num_end, 10);
                bool ok = !errno && num_end != eq + 1 && !*num_end && eq[1] != '-';
                if (strcmp(word, "total") == 0) {
                    bad |= !ok || v == 0;
                    total = v;
                    have_total = true;
                } else if (strcmp(word, "limit") == 0) {
                    bad |= !ok;
                    limit = v;
                }
            }
        }
        p += len;
    }
    if (!have_total || bad)
        return;
    t->has_capacity = true;
    t->run_device_total = total;
    t->run_limit = limit;
    snprintf(t->run_conf, sizeof t->run_conf, "%s", conf);
    *from_failure = failure;
}

/* One record: the event it describes, or an error line naming the line. */
static int csv_record(trace *t, slotmap *sm, char **fld, int nf, const csv_columns *cols,
                      bool *note_from_failure, const char *path, size_t lineno)
{
    if (nf < cols->needed) {
        fprintf(stderr,
                "tessera-replay: %s:%zu: expected %d comma-separated fields "
                "(Thread,Time,Action,Pointer,Size,Stream, or as the header says), got %d\n",
                path, lineno, cols->needed, nf);
        return -1;
    }
    const char *action = fld[cols->action];
    uint64_t ptr, size, stream = 0;
    if (!parse_u64(fld[cols->pointer], 16, &ptr)) {
        fprintf(stderr, "tessera-replay: %s:%zu: bad pointer '%s'\n", path, lineno,
                fld[cols->pointer]);
        return -1;
    }
    if (!parse_u64(fld[cols->size], 10, &size)) {
        fprintf(stderr, "tessera-replay: %s:%zu: bad size '%s'\n", path, lineno, fld[cols->size]);
        return -1;
    }
    /* hex, with or without 0x: RMM writes it without, older RMM and tessera wrote 0x0 */
    if (cols->stream >= 0 && !parse_u64(fld[cols->stream], 16, &stream)) {
        fprintf(stderr, "tessera-replay: %s:%zu: bad stream '%s'\n", path, lineno,
                fld[cols->stream]);
        return -1;
    }
    /* RMM's parser (benchmarks/utilities/log_parser.hpp) accepts exactly these three actions */
    const bool failure = strcmp(action, "allocate failure") == 0;
    if (cols->note >= 0 && cols->note < nf)
        csv_note(t, fld[cols->note], failure, note_from_failure);
    if (strcmp(action, "allocate") == 0)
        return size == 0 ? 0 : trace_on_alloc(t, sm, ptr, size, stream);
    if (strcmp(action, "free") == 0)
        return trace_on_free(t, sm, ptr, stream);
    if (failure)
        return trace_on_failed(t, size, stream);
    fprintf(stderr,
            "tessera-replay: %s:%zu: unknown action '%s' (RMM's log has allocate, free and "
            "allocate failure)\n",
            path, lineno, action);
    return -1;
}

static int load_csv(trace *t, FILE *f, const char *path)
{
    slotmap sm;
    if (ts_ptrmap_init(&sm.map, 1024) != 0)
        return -1;
    char *line = NULL;
    size_t linecap = 0;
    ssize_t len;
    size_t lineno = 0;
    int rc = 0;
    bool first = true, note_from_failure = false;
    csv_columns cols = rmm_order;
    char *fld[CSV_MAX_FIELDS];
    while ((len = getline(&line, &linecap, f)) > 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        char *text = line;
        if (lineno == 1 && strncmp(text, "\xef\xbb\xbf", 3) == 0)
            text += 3; /* a UTF-8 byte order mark, as spreadsheets write */
        if (*text == '\0' || *text == '#')
            continue;
        int nf = csv_split(text, fld, CSV_MAX_FIELDS);
        if (nf < 0) {
            fprintf(stderr, "tessera-replay: %s:%zu: unbalanced double quote\n", path, lineno);
            rc = -1;
            break;
        }
        if (first) {
            first = false;
            int h = csv_header(fld, nf, &cols, path, lineno);
            if (h < 0) {
                rc = -1;
                break;
            }
            if (h > 0)
                continue;
        }
        rc = csv_record(t, &sm, fld, nf, &cols, &note_from_failure, path, lineno);
        if (rc)
            break;
    }
    free(line);
    t->never_freed = sm.map.count;
    ts_ptrmap_destroy(&sm.map);
    return rc;
}

/* --- snapshot dumps --------------------------------------------------------------------------- */

static const struct {
    const char *name;
    snap_action action;
} snap_actions[] = {
    {"alloc", SNAP_ALLOC},
    {"free_requested", SNAP_FREE_REQUESTED},
    {"free_completed", SNAP_FREE_COMPLETED},
    {"segment_alloc", SNAP_SEGMENT_ALLOC},
    {"segment_free", SNAP_SEGMENT_FREE},
    {"segment_map", SNAP_SEGMENT_MAP},
    {"segment_unmap", SNAP_SEGMENT_UNMAP},
    {"oom", SNAP_OOM},
    {"snapshot", SNAP_SNAPSHOT},
};

static int dump_error(const char *path, size_t lineno, const char *what)
{
    fprintf(stderr, "tessera-replay: %s:%zu: %s\n", path, lineno, what);
    return -1;
}

static int parse_dump(snapshot *s, char *text, const char *path)
{
    size_t lineno = 0;
    bool header = false, ended = false;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char kw[32], a1[64], a2[64];
        if (!header) {
            if (strcmp(line, "tessera-snapshot 1") != 0)
                return dump_error(path, lineno, "not a tessera-snapshot 1 dump");
            header = true;
            continue;
        }
        if (sscanf(line, "%31s", kw) != 1)
            continue;
        if (strcmp(kw, "source") == 0) {
            snprintf(s->source, sizeof s->source, "%s", line + 7);
        } else if (strcmp(kw, "device") == 0) {
            /* informational */
        } else if (strcmp(kw, "capacity") == 0) {
            /* what the run ran on: device total and the allocator's cap (0: none) */
            if (sscanf(line, "capacity %" SCNu64 " %" SCNu64, &s->device_total, &s->limit) != 2 ||
                s->device_total == 0)
                return dump_error(path, lineno, "bad capacity line");
            s->has_capacity = true;
        } else if (strcmp(kw, "conf") == 0) {
            snprintf(s->conf, sizeof s->conf, "%s", line[4] ? line + 5 : "");
        } else if (strcmp(kw, "setting") == 0) {
            if (sscanf(line, "setting %63s %63s", a1, a2) != 2)
                return dump_error(path, lineno, "bad setting line");
            if (strcmp(a1, "max_split_size") == 0)
                s->max_split_size = strtoll(a2, NULL, 10);
            else if (strcmp(a1, "garbage_collection_threshold") == 0)
                s->gc_threshold = strtod(a2, NULL);
            else if (strcmp(a1, "expandable_segments") == 0)
                s->expandable_segments = strcmp(a2, "1") == 0;
            else if (strcmp(a1, "roundup_power2_divisions") == 0) {
                char *p = a2;
                for (int i = 0; i < 16; i++) {
                    s->divisions[i] = (uint32_t)strtoul(p, &p, 10);
                    if (*p == ',')
                        p++;
                }
            }
        } else if (strcmp(kw, "segment") == 0) {
            snap_segment g = {0};
            char pool[16];
            int exp = 0;
            if (sscanf(line, "segment %" SCNu64 " %" SCNu64 " %" SCNu64 " %15s %d", &g.addr,
                       &g.size, &g.stream, pool, &exp) != 5)
                return dump_error(path, lineno, "bad segment line");
            g.small = strcmp(pool, "small") == 0;
            g.expandable = exp != 0;
            g.first_block = s->nblocks;
            if (grow((void **)&s->segs, &s->segs_cap, s->nsegs + 1, sizeof *s->segs))
                return dump_error(path, lineno, "out of memory");
            s->segs[s->nsegs++] = g;
        } else if (strcmp(kw, "block") == 0) {
            snap_block b = {0};
            char state[32];
            if (s->nsegs == 0 ||
                sscanf(line, "block %" SCNu64 " %" SCNu64 " %" SCNu64 " %31s", &b.addr, &b.size,
                       &b.requested, state) != 4)
                return dump_error(path, lineno, "bad block line");
            b.state = strcmp(state, "active_allocated") == 0      ? 1
                      : strcmp(state, "active_pending_free") == 0 ? 2
                                                                  : 0;
            if (grow((void **)&s->blocks, &s->blocks_cap, s->nblocks + 1, sizeof *s->blocks))
                return dump_error(path, lineno, "out of memory");
            s->blocks[s->nblocks++] = b;
            s->segs[s->nsegs - 1].nblocks++;
        } else if (strcmp(kw, "event") == 0) {
            snap_event e = {0};
            char act[32];
            if (sscanf(line, "event %31s %" SCNu64 " %" SCNu64 " %" SCNu64, act, &e.addr, &e.size,
                       &e.stream) != 4)
                return dump_error(path, lineno, "bad event line");
            e.action = SNAP_OTHER;
            for (size_t i = 0; i < sizeof snap_actions / sizeof snap_actions[0]; i++)
                if (strcmp(act, snap_actions[i].name) == 0)
                    e.action = snap_actions[i].action;
            if (grow((void **)&s->ev, &s->ev_cap, s->nev + 1, sizeof *s->ev))
                return dump_error(path, lineno, "out of memory");
            s->ev[s->nev++] = e;
        } else if (strcmp(kw, "end") == 0) {
            unsigned long long n = strtoull(line + 4, NULL, 10);
            if (n != s->nev)
                return dump_error(path, lineno, "event count does not match the end line");
            ended = true;
        } else {
            return dump_error(path, lineno, "unknown record");
        }
    }
    if (!header)
        return dump_error(path, 1, "empty dump");
    if (!ended)
        return dump_error(path, lineno, "truncated dump (no end line)");
    return 0;
}

/* Where is scripts/snapshot2trace? The environment, the source tree, next to the binary, or
 * the installed data directory. */
static const char *find_converter(char *buf, size_t len)
{
    const char *env = getenv("TESSERA_SNAPSHOT2TRACE");
    if (env && *env)
        return env;
    if (*TS_SOURCE_DIR) {
        snprintf(buf, len, "%s/scripts/snapshot2trace", TS_SOURCE_DIR);
        if (access(buf, R_OK) == 0)
            return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        snprintf(buf, len, "%s/../../scripts/snapshot2trace", dirname(exe));
        if (access(buf, R_OK) == 0)
            return buf;
    }
    snprintf(buf, len, "%s/tessera/snapshot2trace", TS_DATADIR);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* Run the converter on a pickle and return its dump output (malloc'ed). */
static char *convert_pickle(const char *path)
{
    char scriptbuf[PATH_MAX];
    const char *script = find_converter(scriptbuf, sizeof scriptbuf);
    if (!script) {
        fprintf(stderr, "tessera-replay: cannot find scripts/snapshot2trace to read %s "
                        "(set TESSERA_SNAPSHOT2TRACE)\n", path);
        return NULL;
    }
    const char *python = getenv("TESSERA_PYTHON");
    if (!python || !*python)
        python = "python3";
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    char *argv[] = {(char *)python, (char *)script, "--format", "dump", (char *)path, NULL};
    pid_t pid;
    int err = posix_spawnp(&pid, python, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    if (err != 0) {
        close(pipefd[0]);
        fprintf(stderr, "tessera-replay: cannot run %s: %s\n", python, strerror(err));
        return NULL;
    }
    FILE *f = fdopen(pipefd[0], "r");
    size_t len = 0;
    char *out = f ? read_all(f, &len) : NULL;
    if (f)
        fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "tessera-replay: %s could not convert %s (see its message above)\n",
                script, path);
        free(out);
        return NULL;
    }
    return out;
}

int snapshot_load(snapshot *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->max_split_size = -1;
    snprintf(s->source, sizeof s->source, "%s", path);
    char *text = NULL;
    if (path_is_pickle(path)) {
        text = convert_pickle(path);
    } else {
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "tessera-replay: cannot open %s: %s\n", path, strerror(errno));
            return -1;
        }
        size_t len;
        text = read_all(f, &len);
        fclose(f);
    }
    if (!text)
        return -1;
    int rc = parse_dump(s, text, path);
    free(text);
    if (rc)
        snapshot_free(s);
    return rc;
}

void snapshot_free(snapshot *s)
{
    free(s->segs);
    free(s->blocks);
    free(s->ev);
    memset(s, 0, sizeof *s);
}

/* A snapshot's trace, replayed from an empty device: allocations and the frees of allocations
 * seen in the trace. */
static int trace_from_snapshot(trace *t, const snapshot *s)
{
    slotmap sm;
    if (ts_ptrmap_init(&sm.map, 1024) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < s->nev && rc == 0; i++) {
        const snap_event *e = &s->ev[i];
        if (e->action == SNAP_ALLOC)
            rc = trace_on_alloc(t, &sm, e->addr, e->size, e->stream);
        else if (e->action == SNAP_FREE_REQUESTED)
            rc = trace_on_free(t, &sm, e->addr, e->stream);
        else if (e->action == SNAP_OOM)
            rc = trace_on_failed(t, e->size, e->stream);
    }
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].state != 0 && !ts_ptrmap_get(&sm.map, (uintptr_t)s->blocks[i].addr)) {
            t->preexisting_blocks++;
            t->preexisting_bytes += s->blocks[i].size;
        }
    if (s->has_capacity) {
        t->has_capacity = true;
        t->run_device_total = s->device_total;
        t->run_limit = s->limit;
        snprintf(t->run_conf, sizeof t->run_conf, "%s", s->conf);
    }
    t->never_freed = sm.map.count;
    ts_ptrmap_destroy(&sm.map);
    return rc;
}

int trace_load(trace *t, const char *path)
{
    memset(t, 0, sizeof *t);
    snprintf(t->source, sizeof t->source, "%s", path);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tessera-replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    char first[32] = "";
    size_t got = fread(first, 1, sizeof first - 1, f);
    first[got] = '\0';
    int rc;
    if (got > 0 && (unsigned char)first[0] == 0x80) {
        fclose(f);
        snapshot s;
        rc = snapshot_load(&s, path);
        if (rc == 0) {
            rc = trace_from_snapshot(t, &s);
            snapshot_free(&s);
        }
    } else if (strncmp(first, "tessera-snapshot", 16) == 0) {
        fclose(f);
        snapshot s;
        rc = snapshot_load(&s, path);
        if (rc == 0) {
            rc = trace_from_snapshot(t, &s);
            snapshot_free(&s);
        }
    } else {
        rewind(f);
        rc = load_csv(t, f, path);
        fclose(f);
    }
    if (rc)
        trace_free(t);
    return rc;
}

void trace_free(trace *t)
{
    free(t->ev);
    t->ev = NULL;
    t->n = t->cap = 0;
    free(t->step_ends);
    t->step_ends = NULL;
    t->nsteps = 0;
}

int trace_repeat(trace *t, size_t n)
{
    if (n == 0)
        return -1;
    /* Which slots are freed in the trace: the others persist and are made in step 1 only. */
    bool *freed = calloc(t->nslots ? t->nslots : 1, sizeof *freed);
    size_t *ends = calloc(n, sizeof *ends);
    if (!freed || !ends) {
        free(freed);
        free(ends);
        return -1;
    }
    size_t per_step = 0, step_allocs = 0; /* events and allocations of a later step */
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == TRACE_FREE)
            freed[t->ev[i].slot] = true;
    for (size_t i = 0; i < t->n; i++) {
        per_step += t->ev[i].kind == TRACE_FREE || freed[t->ev[i].slot];
        step_allocs += t->ev[i].kind == TRACE_ALLOC && freed[t->ev[i].slot];
    }
    const size_t total = t->n + (n - 1) * per_step;
    if ((n > 1 && per_step && (total - t->n) / per_step != n - 1) ||
        (uint64_t)t->nslots * n > UINT32_MAX) {
        free(freed);
        free(ends);
        return -1; /* slots are 32-bit: too many steps for this trace */
    }
    trace_event *ev = malloc((total ? total : 1) * sizeof *ev);
    if (!ev) {
        free(freed);
        free(ends);
        return -1;
    }
    size_t k = 0;
    for (size_t s = 0; s < n; s++) {
        for (size_t i = 0; i < t->n; i++) {
            trace_event e = t->ev[i];
            if (s > 0 && e.kind != TRACE_FREE && !freed[e.slot])
                continue;
            e.slot += (uint32_t)(s * t->nslots);
            ev[k++] = e;
        }
        ends[s] = k;
    }
    size_t extra_allocs = step_allocs * (n - 1);
    free(freed);
    free(t->ev);
    free(t->step_ends);
    t->ev = ev;
    t->n = t->cap = total;
    t->allocations += extra_allocs;
    t->frees += t->frees * (n - 1);
    t->nslots *= n;
    t->step_ends = ends;
    t->nsteps = n;
    return 0;
}
