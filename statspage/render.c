/* Reading whole pages into views, and the outputs of tessera-stat: table, detail, JSON,
 * Prometheus text format (the ASCII segment map is render_map.c). Every counter name comes from the X-macros of
 * tessera/stats_fields.h; nothing here trusts a byte of a page beyond what the validators
 * checked (strings are re-sanitised for each output format). */
#include "statspage/render.h"

#include "statspage/collect.h"
#include "statspage/keys.h"
#include "statspage/render_text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* the counter table                                                                          */

enum field_kind { F_ARRAY, F_SINGLE, F_COUNTER, F_GAUGE };

struct field {
    const char *name;
    const char *unit; /* "bytes" or "count" */
    const char *help;
    enum field_kind kind;
    size_t offset;
    size_t size;
};

#define STATS_OFF(n) offsetof(tessera_device_stats, n)
#define STATS_SIZE(n) sizeof(((tessera_device_stats *)0)->n)
static const struct field FIELDS[] = {
#define X_ARRAY(n, u, h) {#n, u, h, F_ARRAY, STATS_OFF(n), STATS_SIZE(n)},
    TESSERA_STAT_ARRAYS(X_ARRAY)
#undef X_ARRAY
#define X_SINGLE(n, h) {#n, "count", h, F_SINGLE, STATS_OFF(n), STATS_SIZE(n)},
    TESSERA_STAT_SINGLES(X_SINGLE)
#undef X_SINGLE
#define X_COUNTER(n, h) {#n, "count", h, F_COUNTER, STATS_OFF(n), STATS_SIZE(n)},
    TESSERA_COUNTERS(X_COUNTER)
#define X_GAUGE(n, u, h) {#n, u, h, F_GAUGE, STATS_OFF(n), STATS_SIZE(n)},
    TESSERA_GAUGES(X_GAUGE)
#undef X_GAUGE
#define X_HOST_STAT(n, u, h) {#n, u, h, F_SINGLE, STATS_OFF(n), STATS_SIZE(n)},
    TESSERA_HOST_STATS(X_HOST_STAT)
#undef X_HOST_STAT
    TESSERA_HOST_COUNTERS(X_COUNTER)
    TESSERA_LEND_COUNTERS(X_COUNTER)
    TESSERA_PAUSE_COUNTERS(X_COUNTER)
#undef X_COUNTER
};
#define NFIELDS (sizeof FIELDS / sizeof FIELDS[0])

static const char *const POOL_NAMES[TESSERA_POOL_COUNT] = TESSERA_POOL_NAMES;
static const char *const SUB_NAMES[4] = {"current", "peak", "allocated", "freed"};

static int64_t stat_word(const tessera_device_stats *s, size_t offset)
{
    int64_t v;
    memcpy(&v, (const char *)s + offset, sizeof v);
    return v;
}

/* Offset of stat array field f, pool, sub (0 current, 1 peak, 2 allocated, 3 freed). */
static size_t stat_off(const struct field *f, int pool, int sub)
{
    return f->offset + (size_t)pool * sizeof(tessera_stat) + (size_t)sub * sizeof(int64_t);
}

/* Did the writer know this field? (stats_words counts the words it maintains.) */
static bool field_present(const tessera_page_header *h, const struct field *f)
{
    return f->offset + f->size <= (size_t)h->stats_words * 8;
}

static int64_t get_stat(const tessera_device_stats *s, const char *name, int pool, int sub)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct field *f = &FIELDS[i];
        if (strcmp(f->name, name) != 0)
            continue;
        if (f->kind == F_ARRAY)
            return stat_word(s, stat_off(f, pool, sub));
        if (f->kind == F_SINGLE)
            return stat_word(s, f->offset + (size_t)sub * sizeof(int64_t));
        return stat_word(s, f->offset);
    }
    return 0;
}

ts_floor ts_floor_of(const tessera_device_stats *s)
{
    ts_floor fl = {TS_FLOOR_OK, 0, 0.0};
    int64_t alloc = get_stat(s, "allocated_bytes", TESSERA_POOL_ALL, 1);
    int64_t reserved = get_stat(s, "reserved_bytes", TESSERA_POOL_ALL, 1);
    if (alloc < 0 || reserved < alloc) {
        fl.state = TS_FLOOR_BAD;
        return fl;
    }
    fl.above = reserved - alloc;
    if (alloc == 0)
        fl.state = TS_FLOOR_NONE;
    else
        fl.percent = 100.0 * (double)fl.above / (double)alloc;
    return fl;
}

/* ------------------------------------------------------------------------------------------ */
/* text helpers                                                                               */

const char *ts_format_bytes(char *buf, size_t len, uint64_t bytes)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%" PRIu64 " B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

enum esc_mode { ESC_TERM, ESC_JSON, ESC_PROM_LABEL, ESC_PROM_HELP };

/* Write at most max_bytes of bytes from a NUL-terminated field (bounded by cap), as valid UTF-8
 * (invalid bytes become U+FFFD, '?' on a terminal), escaped for mode. Never cuts a character.
 * Returns the number of characters written (for terminal alignment). */
static size_t put_text(FILE *f, const char *text, size_t cap, size_t max_bytes, enum esc_mode mode)
{
    size_t n = strnlen(text, cap);
    const unsigned char *s = (const unsigned char *)text;
    size_t used = 0, chars = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(s + i, n - i);
        size_t adv = len ? len : 1;
        size_t out = len ? len : (mode == ESC_TERM ? 1 : 3);
        if (used + out > max_bytes)
            break;
        used += out;
        chars++;
        if (!len) {
            fputs(mode == ESC_TERM ? "?" : "\xef\xbf\xbd", f);
        } else if (len > 1) {
            fwrite(s + i, 1, len, f);
        } else {
            unsigned char c = s[i];
            switch (mode) {
            case ESC_TERM:
                fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
                break;
            case ESC_JSON:
                if (c == '"' || c == '\\')
                    fprintf(f, "\\%c", c);
                else if (c < 0x20 || c == 0x7f)
                    fprintf(f, "\\u%04x", c);
                else
                    fputc(c, f);
                break;
            case ESC_PROM_LABEL:
            case ESC_PROM_HELP:
                if (c == '\\')
                    fputs("\\\\", f);
                else if (c == '\n')
                    fputs("\\n", f);
                else if (c == '"' && mode == ESC_PROM_LABEL)
                    fputs("\\\"", f);
                else if (c < 0x20 || c == 0x7f)
                    fputc('?', f); /* the format escapes nothing else: a control byte never
                                    * reaches a scraper (or a terminal showing its labels) */
                else
                    fputc(c, f);
                break;
            }
        }
        i += adv;
    }
    return chars;
}

/* A terminal cell: width characters, cut with "..." when longer, left-aligned. */
/* text in at most width characters (cut with "..."), padded to width when pad (table cells). */
static void put_cell(FILE *f, const char *text, size_t cap, size_t width, bool pad)
{
    size_t n = strnlen(text, cap);
    size_t chars = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n; chars++) {
        size_t len = utf8_seq(s + i, n - i);
        i += len ? len : 1;
    }
    size_t shown;
    if (chars <= width) {
        shown = put_text(f, text, cap, SIZE_MAX, ESC_TERM);
    } else {
        /* print width-3 characters, then "..." */
        size_t bytes = 0, c = 0;
        while (bytes < n && c < width - 3) {
            size_t len = utf8_seq(s + bytes, n - bytes);
            bytes += len ? len : 1;
            c++;
        }
        char tmp[TESSERA_PAGE_CONFIG_LEN];
        if (bytes >= sizeof tmp)
            bytes = sizeof tmp - 1;
        memcpy(tmp, text, bytes);
        tmp[bytes] = '\0';
        shown = put_text(f, tmp, sizeof tmp, SIZE_MAX, ESC_TERM) + 3;
        fputs("...", f);
    }
    for (; pad && shown < width; shown++)
        fputc(' ', f);
}

/* The command for narrow columns: the program's directory dropped ("/usr/bin/python3 x.py" reads
 * "python3 x.py"); the detail view, JSON and Prometheus keep the whole command. */
void ts_render_put_command(FILE *f, const char *cmd, size_t cap, size_t width, bool pad)
{
    size_t n = strnlen(cmd, cap);
    const char *space = memchr(cmd, ' ', n);
    size_t first = space ? (size_t)(space - cmd) : n;
    size_t skip = 0;
    for (size_t i = 0; i < first; i++)
        if (cmd[i] == '/' && i + 1 < first)
            skip = i + 1;
    put_cell(f, cmd + skip, cap - skip, width, pad);
}

static void fmt_time(char *buf, size_t len, int64_t unix_s)
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    if (unix_s <= 0 || !localtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, len, "unknown");
}

/* ------------------------------------------------------------------------------------------ */
/* views                                                                                      */

void ts_proc_view_free(ts_proc_view *v)
{
    if (!v)
        return;
    free(v->slots);
    v->slots = NULL;
    v->nslots = 0;
}

/* Slots a page may have in use: what a tessera writer creates. A page claiming more is forged
 * or damaged, and reading it is bounded work whatever it claims. */
#define VIEW_MAX_SLOTS TESSERA_PAGE_SLOTS

static void load_slots(ts_proc_view *v, ts_page *pg)
{
    uint32_t n = pg->hdr.slot_count;
    if (n == 0 || n > TESSERA_PAGE_MAX_SLOT_COUNT)
        return;
    v->slots = calloc(n < VIEW_MAX_SLOTS + 1 ? n : VIEW_MAX_SLOTS + 1, sizeof *v->slots);
    if (!v->slots) {
        v->status = TS_PAGE_EIO;
        snprintf(v->error, sizeof v->error, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        ts_slot_view *s = &v->slots[v->nslots];
        memset(s, 0, sizeof *s);
        s->index = i;
        s->status = ts_page_snapshot(pg, i, &s->head, NULL, NULL);
        if (s->status == TS_PAGE_EEMPTY)
            continue;
        if (s->status != TS_PAGE_OK)
            snprintf(s->error, sizeof s->error, "%s", pg->error);
        /* one slot per (device, context): a writer never claims two, and a repeat would give
         * the same series twice */
        for (uint32_t j = 0; s->status == TS_PAGE_OK && j < v->nslots; j++)
            if (v->slots[j].status == TS_PAGE_OK && v->slots[j].head.device == s->head.device &&
                v->slots[j].head.context_id == s->head.context_id) {
                s->status = TS_PAGE_ECORRUPT;
                snprintf(s->error, sizeof s->error,
                         "corrupt: slot %" PRIu32 " repeats the device and context of slot %" PRIu32,
                         i, v->slots[j].index);
            }
        if (++v->nslots > VIEW_MAX_SLOTS) {
            free(v->slots);
            v->slots = NULL;
            v->nslots = 0;
            v->status = TS_PAGE_ECORRUPT;
            snprintf(v->error, sizeof v->error,
                     "corrupt: more than %u slots in use (a tessera process uses at most %u)",
                     VIEW_MAX_SLOTS, VIEW_MAX_SLOTS);
            return;
        }
    }
}

void ts_proc_view_from_page(ts_proc_view *v, ts_page *pg, int status, int owner,
                            const char *owner_why)
{
    int pid = v->pid;
    memset(v, 0, sizeof *v);
    v->pid = pid;
    if (v->pid <= 0 && pg->have_identity)
        v->pid = pg->hdr.pid;
    v->uid = pg->uid;
    v->status = status;
    v->owner = owner;
    snprintf(v->owner_why, sizeof v->owner_why, "%s", owner_why ? owner_why : "");
    if (status != TS_PAGE_OK)
        snprintf(v->error, sizeof v->error, "%s", pg->error);
    v->have_identity = pg->have_identity;
    if (pg->have_identity)
        memcpy(&v->hdr, &pg->hdr, status == TS_PAGE_OK ? sizeof v->hdr : 128);
    if (status == TS_PAGE_OK)
        load_slots(v, pg);
}

void ts_proc_view_load(ts_proc_view *v, const char *dir, int pid, bool check_owner)
{
    ts_page pg;
    ts_page_init(&pg);
    char why[192] = "not checked";
    memset(v, 0, sizeof *v);
    v->pid = pid;
    int status = ts_page_open_pid(&pg, dir, pid);
    int owner = TS_OWNER_LIVE;
    if (check_owner)
        owner = ts_page_judge(&pg, status, pid, why, sizeof why);
    ts_proc_view_from_page(v, &pg, status, owner, why);
    ts_page_close(&pg);
}

/* Is this view's data current: a readable page whose owner was verified alive? A page whose
 * owner cannot be checked (another pid namespace) is never shown or exported as live. */
static bool view_is_live(const ts_proc_view *v)
{
    return v->status == TS_PAGE_OK && v->owner == TS_OWNER_LIVE;
}

static const char *view_command(const ts_proc_view *v)
{
    return v->have_identity && v->status == TS_PAGE_OK ? v->hdr.cmdline : "";
}

/* Label of slot i among the view's slots: "0", or "0/0x..." when its device repeats. */
static void slot_label(const ts_proc_view *v, uint32_t i, char *buf, size_t len)
{
    const ts_slot_view *s = &v->slots[i];
    bool dup = false;
    for (uint32_t j = 0; j < i; j++)
        if (v->slots[j].status == TS_PAGE_OK && v->slots[j].head.device == s->head.device)
            dup = true;
    if (s->status != TS_PAGE_OK)
        snprintf(buf, len, "slot%" PRIu32, s->index);
    else if (dup)
        snprintf(buf, len, "%" PRId32 "/0x%" PRIx64, s->head.device, s->head.context_id);
    else
        snprintf(buf, len, "%" PRId32, s->head.device);
}

/* Pages by state: live (readable, owner alive), stale (owner gone), bad (unreadable). */
static void views_count(const ts_proc_view *views, size_t n, size_t *live, size_t *stale,
                        size_t *bad)
{
    *live = *stale = *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (ts_owner_is_stale(views[i].owner))
            ++*stale;
        else if (view_is_live(&views[i]))
            ++*live;
        else
            ++*bad;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* table                                                                                      */

/* One table row's numbers, as read from a slot. A page is written under a sequence lock, so a
 * reader sees one consistent set; counters that still disagree (allocated above reserved, a
 * negative size) come from a damaged or forged page: the row clamps them and marks them '?'
 * rather than printing huge negative numbers. */
typedef struct table_numbers {
    int64_t allocated, reserved, unallocated;
    double frag; /* 0..1; -1 when nothing is reserved */
    ts_floor floor;
    bool inconsistent;
} table_numbers;

static int64_t clamp_nonneg(int64_t v, bool *bad)
{
    if (v >= 0)
        return v;
    *bad = true;
    return 0;
}

/* FRAG is fragmentation where it hurts: the share of the free cached memory (reserved - active)
 * that no single request can use,
 *     1 - max(largest free block, bytes in wholly free segments) / free cached bytes.
 * A hole inside a segment in use serves only requests up to its size; a wholly free segment can
 * be released and obtained again in one piece (release-and-retry), so a program that freed all
 * its blocks shows 0%, and 50 holes of 4 MiB show 98%. The largest free block is refreshed
 * with the segment map (at least every 64 operations): it is capped at the free bytes. */
static table_numbers table_numbers_of(const tessera_device_stats *st)
{
    table_numbers t = {0};
    bool bad = false;
    t.allocated = clamp_nonneg(get_stat(st, "allocated_bytes", TESSERA_POOL_ALL, 0), &bad);
    t.reserved = clamp_nonneg(get_stat(st, "reserved_bytes", TESSERA_POOL_ALL, 0), &bad);
    int64_t active = clamp_nonneg(get_stat(st, "active_bytes", TESSERA_POOL_ALL, 0), &bad);
    int64_t split = clamp_nonneg(get_stat(st, "inactive_split_bytes", TESSERA_POOL_ALL, 0), &bad);
    int64_t largest = clamp_nonneg(get_stat(st, "largest_free_block_bytes", 0, 0), &bad);
    if (t.allocated > t.reserved || active > t.reserved) {
        bad = true;
        t.allocated = t.allocated > t.reserved ? t.reserved : t.allocated;
        active = active > t.reserved ? t.reserved : active;
    }
    t.unallocated = t.reserved - t.allocated;
    /* active (allocated + pending frees) is never below allocated; a page that predates the
     * counter, or a hand-written one, may lack it */
    int64_t free_bytes = t.reserved - (active > t.allocated ? active : t.allocated);
    if (split > free_bytes) {
        bad = true;
        split = free_bytes;
    }
    t.frag = t.reserved > 0 ? 0 : -1;
    if (free_bytes > 0) {
        int64_t whole = free_bytes - split;
        int64_t usable = largest > whole ? largest : whole;
        if (usable > free_bytes)
            usable = free_bytes;
        t.frag = 1.0 - (double)usable / (double)free_bytes;
    }
    t.floor = ts_floor_of(st);
    t.inconsistent = bad || t.floor.state == TS_FLOOR_BAD;
    return t;
}

/* The numbers of slot k of v (already labelled), then mark ("exited" for a stale page). */
static void table_row(FILE *f, const ts_proc_view *v, uint32_t k, const char *mark)
{
    const ts_slot_view *s = &v->slots[k];
    char dev[48], a[48], r[48], u[48], frag[16], above[24];
    slot_label(v, k, dev, sizeof dev);
    fprintf(f, "%-8d ", v->pid);
    ts_render_put_command(f, v->hdr.cmdline, sizeof v->hdr.cmdline, 28, true);
    fprintf(f, " %-6s", dev);
    if (s->status != TS_PAGE_OK) {
        fprintf(f, " %s: %s\n", ts_page_status_name(s->status), s->error);
        return;
    }
    const tessera_device_stats *st = &s->head.stats;
    table_numbers t = table_numbers_of(st);
    const char *q = t.inconsistent ? "?" : "";
    ts_format_bytes(a, sizeof a, (uint64_t)t.allocated);
    ts_format_bytes(r, sizeof r, (uint64_t)t.reserved);
    ts_format_bytes(u, sizeof u, (uint64_t)t.unallocated);
    if (t.inconsistent)
        snprintf(frag, sizeof frag, "?");
    else if (t.frag >= 0)
        snprintf(frag, sizeof frag, "%.1f%%", 100.0 * t.frag);
    else
        snprintf(frag, sizeof frag, "-");
    if (t.floor.state == TS_FLOOR_BAD)
        snprintf(above, sizeof above, "?");
    else if (t.floor.state == TS_FLOOR_NONE)
        snprintf(above, sizeof above, "-");
    else
        snprintf(above, sizeof above, "+%.1f%%", t.floor.percent);
    /* a paused process keeps its addresses reserved but holds no device page (pause.c) */
    if (!*mark && get_stat(st, "num_pauses", 0, 0) > get_stat(st, "num_resumes", 0, 0))
        mark = "paused: its memory is in host memory";
    fprintf(f, " %11s%1s %11s%1s %11s%1s %7s %11s %8" PRId64 " %6" PRId64 "%s%s\n", a, q, r, q,
            u, q, frag, above, get_stat(st, "num_alloc_retries", 0, 0),
            get_stat(st, "num_ooms", 0, 0), *mark ? "  " : "", mark);
}

static void table_header(FILE *f)
{
    fprintf(f, "%-8s %-28s %-6s %12s %12s %12s %7s %11s %8s %6s\n", "PID", "COMMAND", "DEVICE",
            "ALLOCATED", "RESERVED", "UNALLOCATED", "FRAG", "ABOVE FLOOR", "RETRIES", "OOMS");
}

/* Does any readable slot of the n views (live ones, or stale ones) hold inconsistent counters? */
static bool views_inconsistent(const ts_proc_view *views, size_t n, bool stale)
{
    for (size_t i = 0; i < n; i++) {
        const ts_proc_view *v = &views[i];
        if (v->status != TS_PAGE_OK || ts_owner_is_stale(v->owner) != stale)
            continue;
        for (uint32_t k = 0; k < v->nslots; k++)
            if (v->slots[k].status == TS_PAGE_OK &&
                table_numbers_of(&v->slots[k].head.stats).inconsistent)
                return true;
    }
    return false;
}

static void table_inconsistent_note(FILE *f)
{
    fprintf(f, "?: counters that disagree (allocated above reserved, a negative size): a damaged "
               "page; shown clamped\n");
}

/* What ABOVE FLOOR means, under a table that has rows. */
static void table_floor_note(FILE *f)
{
    fprintf(f, "ABOVE FLOOR: how far peak reserved was above peak allocated (the floor: the least "
               "any allocator could have reserved), in %% of peak allocated\n");
}

void ts_render_table(FILE *f, const ts_proc_view *views, size_t n, const char *dir)
{
    size_t live, stale, bad;
    views_count(views, n, &live, &stale, &bad);
    if (live == 0) {
        fprintf(f, "no tessera processes (in %s)\n", dir ? dir : ts_statspage_dir());
    } else {
        table_header(f);
        for (size_t i = 0; i < n; i++) {
            const ts_proc_view *v = &views[i];
            if (!view_is_live(v))
                continue;
            if (v->nslots == 0) {
                fprintf(f, "%-8d ", v->pid);
                ts_render_put_command(f, v->hdr.cmdline, sizeof v->hdr.cmdline, 28, true);
                fprintf(f, " %-6s %12s %12s %12s %7s %11s %8s %6s\n", "-", "-", "-", "-", "-",
                        "-", "-", "-");
                continue;
            }
            for (uint32_t k = 0; k < v->nslots; k++)
                table_row(f, v, k, "");
        }
        if (views_inconsistent(views, n, false))
            table_inconsistent_note(f);
        table_floor_note(f);
    }
    if (stale) {
        fprintf(f, "\nstale pages (their processes are gone; remove them with `tessera-stat --gc`):\n");
        for (size_t i = 0; i < n; i++) {
            const ts_proc_view *v = &views[i];
            if (!ts_owner_is_stale(v->owner))
                continue;
            fprintf(f, "%-8d %-6s ", v->pid, "stale");
            ts_render_put_command(f, view_command(v), sizeof v->hdr.cmdline, 28, true);
            fprintf(f, " ");
            put_text(f, v->owner_why, sizeof v->owner_why, SIZE_MAX, ESC_TERM);
            fputc('\n', f);
        }
        /* A readable stale page (TESSERA_STATS_KEEP=1, or a killed process) still holds the
         * last numbers its process published: shown, marked as such. */
        bool header = true;
        for (size_t i = 0; i < n; i++) {
            const ts_proc_view *v = &views[i];
            if (!ts_owner_is_stale(v->owner) || v->status != TS_PAGE_OK)
                continue;
            for (uint32_t k = 0; k < v->nslots; k++) {
                if (header) {
                    fputc('\n', f);
                    table_header(f);
                    header = false;
                }
                table_row(f, v, k, "exited: last numbers");
            }
        }
        if (views_inconsistent(views, n, true))
            table_inconsistent_note(f);
    }
    if (bad) {
        fprintf(f, "\nunreadable pages:\n");
        for (size_t i = 0; i < n; i++) {
            const ts_proc_view *v = &views[i];
            if (ts_owner_is_stale(v->owner) || view_is_live(v))
                continue;
            bool unverified = v->status == TS_PAGE_OK;
            fprintf(f, "%-8d %-12s ", v->pid,
                    unverified ? ts_owner_state_name(v->owner) : ts_page_status_name(v->status));
            if (unverified)
                put_text(f, v->owner_why, sizeof v->owner_why, SIZE_MAX, ESC_TERM);
            else
                put_text(f, v->error, sizeof v->error, SIZE_MAX, ESC_TERM);
            fputc('\n', f);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* detail                                                                                     */

void ts_render_env_load(ts_render_env *env)
{
    memset(env, 0, sizeof *env);
    env->now_s = (int64_t)time(NULL);
    if (ts_read_boot_id(env->boot_id, sizeof env->boot_id) != 0)
        env->boot_id[0] = '\0';
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long long bt;
        if (sscanf(line, "btime %lld", &bt) == 1) {
            env->boot_time_s = bt;
            break;
        }
    }
    fclose(f);
}

static void put_key(FILE *f, const char *key)
{
    fprintf(f, "  %-44s", key);
}

void ts_render_detail(FILE *f, const ts_proc_view *v, const ts_render_env *env)
{
    char tbuf[64];
    fprintf(f, "pid       %d", v->pid);
    fprintf(f, " (%s: ", ts_owner_is_stale(v->owner) ? "STALE" : ts_owner_state_name(v->owner));
    put_text(f, v->owner_why, sizeof v->owner_why, SIZE_MAX, ESC_TERM);
    fprintf(f, ")\n");
    if (v->status != TS_PAGE_OK) {
        fprintf(f, "page      %s: ", ts_page_status_name(v->status));
        put_text(f, v->error, sizeof v->error, SIZE_MAX, ESC_TERM);
        fputc('\n', f);
        return;
    }
    const tessera_page_header *h = &v->hdr;
    fprintf(f, "command   ");
    put_text(f, h->cmdline, sizeof h->cmdline, SIZE_MAX, ESC_TERM);
    fputc('\n', f);
    bool same_boot = env && env->boot_time_s > 0 && h->clock_ticks_per_second > 0 &&
                     h->start_time_ticks / h->clock_ticks_per_second < (uint64_t)INT32_MAX &&
                     (!h->boot_id[0] || strcmp(env->boot_id, h->boot_id) == 0);
    if (same_boot) {
        fmt_time(tbuf, sizeof tbuf,
                 env->boot_time_s + (int64_t)(h->start_time_ticks / h->clock_ticks_per_second));
        fprintf(f, "started   %s (start time %" PRIu64 " ticks after boot)\n", tbuf,
                h->start_time_ticks);
    } else {
        fprintf(f, "started   %" PRIu64 " clock ticks after boot %s\n", h->start_time_ticks,
                h->boot_id[0] ? h->boot_id : "(unknown)");
    }
    fmt_time(tbuf, sizeof tbuf, (int64_t)(h->created_ns / UINT64_C(1000000000)));
    fprintf(f, "tessera   ");
    put_text(f, h->version, sizeof h->version, SIZE_MAX, ESC_TERM);
    fprintf(f, " (page layout %" PRIu32 ", created %s%s)\n", h->layout_version, tbuf,
            (h->flags & TESSERA_PAGE_FLAG_CLOSED) ? ", closed by its owner" : "");
    fprintf(f, "config    ");
    put_text(f, h->config, sizeof h->config, SIZE_MAX, ESC_TERM);
    fputc('\n', f);
    if (v->nslots == 0)
        fprintf(f, "\nno device slots in use yet\n");
    for (uint32_t k = 0; k < v->nslots; k++) {
        const ts_slot_view *s = &v->slots[k];
        if (s->status != TS_PAGE_OK) {
            fprintf(f, "\nslot %" PRIu32 ": %s: ", s->index, ts_page_status_name(s->status));
            put_text(f, s->error, sizeof s->error, SIZE_MAX, ESC_TERM);
            fputc('\n', f);
            continue;
        }
        fprintf(f, "\ndevice %" PRId32 "  context 0x%" PRIx64 "  slot %" PRIu32 "  sequence %" PRIu64 "\n",
                s->head.device, s->head.context_id, s->index, s->head.seq);
        const tessera_device_stats *st = &s->head.stats;
        for (size_t w = 0; w < TS_STATS_KEYS && w < h->stats_words; w++) {
            put_key(f, ts_stats_key_name(w));
            fprintf(f, "%" PRId64 "\n", stat_word(st, w * sizeof(int64_t)));
        }
        ts_floor fl = ts_floor_of(st);
        if (fl.state == TS_FLOOR_OK)
            fprintf(f, "  peak reserved above peak allocated (the floor): %" PRId64 " bytes, +%.1f%%"
                       "\n", fl.above, fl.percent);
        else if (fl.state == TS_FLOOR_NONE)
            fprintf(f, "  peak reserved above peak allocated (the floor): %" PRId64
                       " bytes (nothing allocated yet)\n", fl.above);
        else
            fprintf(f, "  peak reserved above peak allocated (the floor): ? (peak reserved below "
                       "peak allocated: a damaged page)\n");
        const tessera_page_map *m = &s->head.map;
        if (m->flags & TESSERA_MAP_VALID) {
            char lf[48];
            fprintf(f, "  segment map: %" PRIu32 " segments, %" PRIu32 " blocks, taken at op %" PRIu64
                       "%s; largest free block %" PRIu64 " bytes (%s); `tessera-stat map %d` draws it\n",
                    m->total_segments, m->total_blocks, m->ops,
                    (m->flags & TESSERA_MAP_TRUNCATED) ? " (truncated)" : "", m->largest_free,
                    ts_format_bytes(lf, sizeof lf, m->largest_free), v->pid);
        } else {
            fprintf(f, "  segment map: not published yet\n");
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* JSON                                                                                       */

static void json_str(FILE *f, const char *text, size_t cap)
{
    fputc('"', f);
    put_text(f, text, cap, SIZE_MAX, ESC_JSON);
    fputc('"', f);
}

void ts_render_json(FILE *f, const ts_proc_view *views, size_t n)
{
    fputs("{", f);
    for (size_t i = 0; i < n; i++) {
        const ts_proc_view *v = &views[i];
        fprintf(f, "%s\n  \"%d\": {", i ? "," : "", v->pid);
        fprintf(f, "\n    \"stale\": %s", ts_owner_is_stale(v->owner) ? "true" : "false");
        fprintf(f, ",\n    \"state\": \"%s\"", ts_owner_state_name(v->owner));
        fprintf(f, ",\n    \"state_reason\": ");
        json_str(f, v->owner_why, sizeof v->owner_why);
        if (v->status != TS_PAGE_OK) {
            fprintf(f, ",\n    \"error\": ");
            json_str(f, v->error, sizeof v->error);
            fprintf(f, ",\n    \"error_kind\": \"%s\"\n  }", ts_page_status_name(v->status));
            continue;
        }
        if (v->owner == TS_OWNER_UNKNOWN) { /* never shown as a live process's numbers */
            fprintf(f, ",\n    \"error\": ");
            json_str(f, v->owner_why, sizeof v->owner_why);
            fprintf(f, ",\n    \"error_kind\": \"unverified\"\n  }");
            continue;
        }
        const tessera_page_header *h = &v->hdr;
        fprintf(f, ",\n    \"command\": ");
        json_str(f, h->cmdline, sizeof h->cmdline);
        fprintf(f, ",\n    \"config\": ");
        json_str(f, h->config, sizeof h->config);
        fprintf(f, ",\n    \"version\": ");
        json_str(f, h->version, sizeof h->version);
        fprintf(f, ",\n    \"layout_version\": %" PRIu32, h->layout_version);
        fprintf(f, ",\n    \"start_time_ticks\": %" PRIu64, h->start_time_ticks);
        fprintf(f, ",\n    \"created_ns\": %" PRIu64, h->created_ns);
        for (uint32_t k = 0; k < v->nslots; k++) {
            const ts_slot_view *s = &v->slots[k];
            char label[48];
            slot_label(v, k, label, sizeof label);
            fprintf(f, ",\n    \"%s\": {", label);
            if (s->status != TS_PAGE_OK) {
                fprintf(f, "\"error\": ");
                json_str(f, s->error, sizeof s->error);
                fprintf(f, ", \"error_kind\": \"%s\"}", ts_page_status_name(s->status));
                continue;
            }
            const tessera_device_stats *st = &s->head.stats;
            fprintf(f, "\n      \"device\": %" PRId32 ",\n      \"context_id\": %" PRIu64, s->head.device,
                    s->head.context_id);
            /* key i is word i (statspage/keys.h); words past the writer's are not shown */
            for (size_t w = 0; w < TS_STATS_KEYS && w < h->stats_words; w++)
                fprintf(f, ",\n      \"%s\": %" PRId64, ts_stats_key_name(w),
                        stat_word(st, w * sizeof(int64_t)));
            ts_floor fl = ts_floor_of(st);
            if (fl.state != TS_FLOOR_BAD) {
                fprintf(f, ",\n      \"peak_reserved_above_allocated_bytes\": %" PRId64, fl.above);
                if (fl.state == TS_FLOOR_OK)
                    fprintf(f, ",\n      \"peak_reserved_above_allocated_percent\": %.3f",
                            fl.percent);
                else
                    fprintf(f, ",\n      \"peak_reserved_above_allocated_percent\": null");
            }
            const tessera_page_map *m = &s->head.map;
            fprintf(f, ",\n      \"segment_map\": {\"published\": %s, \"ops\": %" PRIu64
                       ", \"segments\": %" PRIu32 ", \"blocks\": %" PRIu32 ", \"truncated\": %s"
                       ", \"largest_free_block\": %" PRIu64 ", \"free_bytes\": %" PRIu64
                       ", \"free_blocks\": %" PRIu32 "}",
                    (m->flags & TESSERA_MAP_VALID) ? "true" : "false", m->ops, m->total_segments,
                    m->total_blocks, (m->flags & TESSERA_MAP_TRUNCATED) ? "true" : "false",
                    m->largest_free, m->free_bytes, m->free_blocks);
            fprintf(f, "\n    }");
        }
        fprintf(f, "\n  }");
    }
    fputs(n ? "\n}\n" : "}\n", f);
}

/* ------------------------------------------------------------------------------------------ */
/* Prometheus text format                                                                     */

#define PROM_COMMAND_MAX 128 /* bytes of the command line carried in the label */

/* The labels of the output being rendered (one renderer runs at a time per thread). */
static _Thread_local const ts_prom_labels *prom_opt;

int ts_prom_labels_parse(const char *list, ts_prom_labels *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (strcmp(list, "none") == 0)
        return 0;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (len == 3 && strncmp(p, "pid", 3) == 0)
            ;
        else if (len == 7 && strncmp(p, "command", 7) == 0)
            out->command = true;
        else if (len == 6 && strncmp(p, "config", 6) == 0)
            out->config = true;
        else if (len == 7 && strncmp(p, "version", 7) == 0)
            out->version = true;
        else {
            ts_msg_set(err, errlen, "--labels: '%.*s' is not one of pid, command, config, version, none",
                       (int)(len > 64 ? 64 : len), p);
            return -1;
        }
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

static void prom_labels(FILE *f, const ts_proc_view *v, uint32_t k, int pool)
{
    const ts_slot_view *s = &v->slots[k];
    fprintf(f, "{pid=\"%d\",device=\"%" PRId32 "\"", v->pid, s->head.device);
    char label[48];
    slot_label(v, k, label, sizeof label);
    if (strchr(label, '/'))
        fprintf(f, ",context=\"0x%" PRIx64 "\"", s->head.context_id);
    if (pool >= 0)
        fprintf(f, ",pool=\"%s\"", POOL_NAMES[pool]);
    if (prom_opt->command) {
        fputs(",command=\"", f);
        put_text(f, v->hdr.cmdline, sizeof v->hdr.cmdline, PROM_COMMAND_MAX, ESC_PROM_LABEL);
        fputc('"', f);
    }
    fputc('}', f);
}

static void prom_family(FILE *f, const char *name, const char *type, const char *help,
                        const char *help2)
{
    fprintf(f, "# HELP %s ", name);
    put_text(f, help, strlen(help) + 1, SIZE_MAX, ESC_PROM_HELP);
    if (help2)
        put_text(f, help2, strlen(help2) + 1, SIZE_MAX, ESC_PROM_HELP);
    fprintf(f, "\n# TYPE %s %s\n", name, type);
}

/* Visit every readable slot of every live view. */
#define FOR_LIVE_SLOTS(views, n, v, k)                                                             \
    for (size_t vi_ = 0; vi_ < (n); vi_++)                                                         \
        for (const ts_proc_view *v = &(views)[vi_]; v; v = NULL)                                   \
            if (view_is_live(v))                                                                   \
                for (uint32_t k = 0; k < v->nslots; k++)                                           \
                    if (v->slots[k].status == TS_PAGE_OK)

/* Metric names, in Prometheus' conventions (unit suffix last, then _total for counters):
 * a memory_stats stat X (X_bytes for byte stats, base B = X without _bytes) gives
 *   tessera_B[_bytes]                 gauge    X.<pool>.current
 *   tessera_B_peak[_bytes]            gauge    X.<pool>.peak
 *   tessera_B_allocated[_bytes]_total counter  X.<pool>.allocated (sum of every increase)
 *   tessera_B_freed[_bytes]_total     counter  X.<pool>.freed (sum of every decrease)
 * num_X counters: tessera_X_total; other byte gauges end in _bytes. */
void ts_render_prometheus(FILE *f, const ts_proc_view *views, size_t n)
{
    static const ts_prom_labels all = {true, true, true};
    ts_render_prometheus_labels(f, views, n, &all);
}

void ts_render_prometheus_labels(FILE *f, const ts_proc_view *views, size_t n,
                                 const ts_prom_labels *labels)
{
    prom_opt = labels;
    static const char *const sub_word[4] = {"", "_peak", "_allocated", "_freed"};
    static const char *const sub_type[4] = {"gauge", "gauge", "counter", "counter"};
    static const char *const sub_help[4] = {
        "", ": highest value since start or the last peak reset",
        ": sum of every increase since start", ": sum of every decrease since start"};
    char name[128], help2[160];
    for (size_t x = 0; x < NFIELDS; x++) {
        const struct field *fd = &FIELDS[x];
        if (fd->kind == F_ARRAY || fd->kind == F_SINGLE) {
            for (int sub = 0; sub < 4; sub++) {
                size_t bl = strlen(fd->name);
                bool bytes = bl > 6 && strcmp(fd->name + bl - 6, "_bytes") == 0;
                snprintf(name, sizeof name, "tessera_%.*s%s%s%s", (int)(bytes ? bl - 6 : bl),
                         fd->name, sub_word[sub], bytes ? "_bytes" : "", sub >= 2 ? "_total" : "");
                snprintf(help2, sizeof help2, "%s (memory_stats %s%s.%s)", sub_help[sub], fd->name,
                         fd->kind == F_ARRAY ? ".<pool>" : "", SUB_NAMES[sub]);
                prom_family(f, name, sub_type[sub], fd->help, help2);
                FOR_LIVE_SLOTS(views, n, v, k)
                {
                    if (!field_present(&v->hdr, fd))
                        continue;
                    const tessera_device_stats *st = &v->slots[k].head.stats;
                    if (fd->kind == F_ARRAY) {
                        for (int p = 0; p < TESSERA_POOL_COUNT; p++) {
                            fputs(name, f);
                            prom_labels(f, v, k, p);
                            fprintf(f, " %" PRId64 "\n", stat_word(st, stat_off(fd, p, sub)));
                        }
                    } else {
                        fputs(name, f);
                        prom_labels(f, v, k, -1);
                        fprintf(f, " %" PRId64 "\n", stat_word(st, fd->offset + (size_t)sub * 8));
                    }
                }
            }
            continue;
        }
        const char *base = fd->name;
        if (fd->kind == F_COUNTER) {
            if (strncmp(base, "num_", 4) == 0)
                base += 4;
            snprintf(name, sizeof name, "tessera_%s_total", base);
        } else {
            size_t bl = strlen(base);
            bool bytes = strcmp(fd->unit, "bytes") == 0;
            bool has = bl >= 6 && strcmp(base + bl - 6, "_bytes") == 0;
            snprintf(name, sizeof name, "tessera_%s%s", base, bytes && !has ? "_bytes" : "");
        }
        snprintf(help2, sizeof help2, " (memory_stats %s)", fd->name);
        prom_family(f, name, fd->kind == F_COUNTER ? "counter" : "gauge", fd->help, help2);
        FOR_LIVE_SLOTS(views, n, v, k)
        {
            if (!field_present(&v->hdr, fd))
                continue;
            fputs(name, f);
            prom_labels(f, v, k, -1);
            fprintf(f, " %" PRId64 "\n", stat_word(&v->slots[k].head.stats, fd->offset));
        }
    }

    prom_family(f, "tessera_utilization_ratio", "gauge",
                "Peak allocated bytes over peak reserved bytes (all pools); absent while nothing "
                "was reserved", NULL);
    FOR_LIVE_SLOTS(views, n, v, k)
    {
        const tessera_device_stats *st = &v->slots[k].head.stats;
        int64_t ap = get_stat(st, "allocated_bytes", TESSERA_POOL_ALL, 1);
        int64_t rp = get_stat(st, "reserved_bytes", TESSERA_POOL_ALL, 1);
        if (rp <= 0)
            continue;
        fputs("tessera_utilization_ratio", f);
        prom_labels(f, v, k, -1);
        fprintf(f, " %.6g\n", (double)ap / (double)rp);
    }

    prom_family(f, "tessera_peak_reserved_above_allocated_bytes", "gauge",
                "Peak reserved bytes minus peak allocated bytes (all pools): how far the peak was "
                "above the floor", NULL);
    FOR_LIVE_SLOTS(views, n, v, k)
    {
        ts_floor fl = ts_floor_of(&v->slots[k].head.stats);
        if (fl.state == TS_FLOOR_BAD)
            continue;
        fputs("tessera_peak_reserved_above_allocated_bytes", f);
        prom_labels(f, v, k, -1);
        fprintf(f, " %" PRId64 "\n", fl.above);
    }
    prom_family(f, "tessera_peak_reserved_above_allocated_ratio", "gauge",
                "(peak reserved - peak allocated) / peak allocated (all pools); absent while "
                "nothing was allocated", NULL);
    FOR_LIVE_SLOTS(views, n, v, k)
    {
        ts_floor fl = ts_floor_of(&v->slots[k].head.stats);
        if (fl.state != TS_FLOOR_OK)
            continue;
        fputs("tessera_peak_reserved_above_allocated_ratio", f);
        prom_labels(f, v, k, -1);
        fprintf(f, " %.6g\n", fl.percent / 100.0);
    }

    prom_family(f, "tessera_page_info", "gauge",
                "Always 1: one series per live process publishing a tessera stats page", NULL);
    for (size_t i = 0; i < n; i++) {
        const ts_proc_view *v = &views[i];
        if (!view_is_live(v))
            continue;
        fprintf(f, "tessera_page_info{pid=\"%d\"", v->pid);
        if (labels->command) {
            fputs(",command=\"", f);
            put_text(f, v->hdr.cmdline, sizeof v->hdr.cmdline, PROM_COMMAND_MAX, ESC_PROM_LABEL);
            fputc('"', f);
        }
        if (labels->version) {
            fputs(",version=\"", f);
            put_text(f, v->hdr.version, sizeof v->hdr.version, SIZE_MAX, ESC_PROM_LABEL);
            fputc('"', f);
        }
        if (labels->config) {
            fputs(",config=\"", f);
            put_text(f, v->hdr.config, sizeof v->hdr.config, SIZE_MAX, ESC_PROM_LABEL);
            fputc('"', f);
        }
        fputs("} 1\n", f);
    }

    size_t live, stale, bad;
    views_count(views, n, &live, &stale, &bad);
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++)
        skipped += views[i].status == TS_PAGE_ESKIPPED && !ts_owner_is_stale(views[i].owner);
    prom_family(f, "tessera_pages", "gauge",
                "Stats pages found, by state (live, stale: owner gone, unreadable, skipped: past "
                "the bound on pages or slots read per user and scrape)", NULL);
    fprintf(f, "tessera_pages{state=\"live\"} %zu\n", live);
    fprintf(f, "tessera_pages{state=\"stale\"} %zu\n", stale);
    fprintf(f, "tessera_pages{state=\"unreadable\"} %zu\n", bad - skipped);
    fprintf(f, "tessera_pages{state=\"skipped\"} %zu\n", skipped);
}
