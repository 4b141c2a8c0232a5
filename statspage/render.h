/* Whole pages read into views, and the outputs of tessera-stat: table, detail, JSON, Prometheus
 * text format and the ASCII segment map. */
#ifndef TS_STATSPAGE_RENDER_H
#define TS_STATSPAGE_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "statspage/reader.h"

typedef struct ts_slot_view {
    uint32_t index;
    int status;                   /* ts_page_status of its snapshot */
    char error[320];
    tessera_page_slot_head head;  /* valid when status is TS_PAGE_OK */
} ts_slot_view;

/* One process, as read for output. */
typedef struct ts_proc_view {
    int pid;
    uint32_t uid;          /* owner of the page file (0 when unknown) */
    int status;            /* ts_page_status of the page */
    char error[320];
    int owner;             /* ts_owner_state */
    char owner_why[192];
    tessera_page_header hdr; /* whole header when status OK; identity prefix when ENEWER */
    unsigned have_identity;
    uint32_t nslots;       /* active slots (and slots that failed to read) */
    ts_slot_view *slots;
} ts_proc_view;

/* Read a whole process page (dir/tessera.pid): header, liveness (when check_owner), every active
 * slot's counters. Always fills v (status says what happened); free with ts_proc_view_free. */
void ts_proc_view_load(ts_proc_view *v, const char *dir, int pid, bool check_owner);
/* The same from a page opened by the caller (status: what the open returned; owner: as judged
 * by the caller). v->pid may be preset (else taken from the header). */
void ts_proc_view_from_page(ts_proc_view *v, ts_page *pg, int status, int owner,
                            const char *owner_why);
void ts_proc_view_free(ts_proc_view *v);

static inline bool ts_proc_view_is_stale(const ts_proc_view *v)
{
    return ts_owner_is_stale(v->owner);
}

/* Facts about the machine, for turning start ticks into dates. All zero is fine. */
typedef struct ts_render_env {
    int64_t boot_time_s;   /* btime of /proc/stat; 0 unknown */
    int64_t now_s;         /* 0 unknown */
    char boot_id[TESSERA_PAGE_BOOT_ID_LEN];
} ts_render_env;

void ts_render_env_load(ts_render_env *env);

/* "1.50 GiB", "512.00 MiB", "12 B" (2 decimals from KiB up). */
const char *ts_format_bytes(char *buf, size_t len, uint64_t bytes);

/* How far a slot's peak reserved (reserved_bytes.all.peak) was above its peak allocated
 * (allocated_bytes.all.peak): the floor, what the program held at its peak and so the least any
 * allocator could have reserved. above: bytes; percent: of peak allocated. */
enum { TS_FLOOR_OK = 0, TS_FLOOR_NONE = 1 /* nothing allocated yet: no percent */,
       TS_FLOOR_BAD = 2 /* peak reserved below peak allocated, or negative: a damaged page */ };
typedef struct ts_floor {
    int state;
    int64_t above;
    double percent;
} ts_floor;
ts_floor ts_floor_of(const tessera_device_stats *s);

/* The outputs of tessera-stat. views are sorted by pid by the caller. */
void ts_render_table(FILE *f, const ts_proc_view *views, size_t n, const char *dir);
void ts_render_detail(FILE *f, const ts_proc_view *v, const ts_render_env *env);
void ts_render_json(FILE *f, const ts_proc_view *views, size_t n);
void ts_render_prometheus(FILE *f, const ts_proc_view *views, size_t n);

/* The labels of the Prometheus output beyond pid, device, pool and context: what a process's
 * owner may not want on the network. All on by default (ts_render_prometheus). */
typedef struct ts_prom_labels {
    bool command; /* the command line, first 128 bytes: may hold secrets given as arguments */
    bool config;  /* the effective configuration (tessera_page_info): holds paths */
    bool version; /* the tessera version (tessera_page_info) */
} ts_prom_labels;

/* Parse a --labels list: "none", or names from pid, command, config, version separated by
 * commas (pid is always there). 0, or -1 with a message in err. */
int ts_prom_labels_parse(const char *list, ts_prom_labels *out, char *err, size_t errlen);
void ts_render_prometheus_labels(FILE *f, const ts_proc_view *views, size_t n,
                                 const ts_prom_labels *labels);

/* The ASCII segment map of one slot. width: characters per segment bar (8..1024). */
void ts_render_map(FILE *f, const ts_proc_view *v, const tessera_page_slot_head *head,
                   const tessera_page_segment *segs, const tessera_page_block *blocks,
                   unsigned width);

#endif /* TS_STATSPAGE_RENDER_H */
