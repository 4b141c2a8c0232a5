/* The shared-memory stats page: writer (the shim, one page per process) and reader (tessera-stat,
 * tests, the fuzz target). The byte layout is include/tessera/stats_page.h; docs/stats-page.md
 * describes it and the protocols.
 *
 * Writer, in the order the shim uses it:
 *
 *   ts_statspage *page;
 *   if (ts_statspage_create(NULL, config_text, &page, err, sizeof err) != 0) -> run without page
 *   ts_stats_sink sink;
 *   int slot = ts_statspage_claim(page, device, context_id, &sink);   (< 0: no slot: sink {0})
 *   a = ts_allocator_create(cfg, backend, device, sink);
 *   ts_allocator_set_observer(a, ts_statspage_observer, ts_statspage_observer_user(page, slot), N);
 *   ...
 *   ts_statspage_close(page, true);      at normal exit (file removed)
 *   ts_statspage_forget(page);           in the atfork child handler (file untouched)
 *
 * Neither close nor forget ever unmaps memory a sink or an observer may still touch: the shared
 * mapping is replaced, at the same address, by private anonymous memory, and the handle is
 * retired rather than freed, so a late counter update or observer call from another thread (or
 * from the forked child's copy of an allocator) lands in private memory or returns at once.
 *
 * Every writer function is async-signal-unsafe but never blocks on a reader, never prints, and
 * never terminates the process: failures are returned (0 / errno value / negative errno).
 */
#ifndef TS_STATSPAGE_H
#define TS_STATSPAGE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/allocator.h"
#include "tessera/stats_page.h"

/* ================================= writer ================================= */

typedef struct ts_statspage ts_statspage;

/* The directory pages live in: $TESSERA_STATS_DIR when set and non-empty, else /dev/shm. */
const char *ts_statspage_dir(void);

/* Create <dir>/tessera.<pid> (dir NULL: ts_statspage_dir(); a relative dir is made absolute).
 * config_text (may be NULL) is the effective configuration, normally ts_config_format() output;
 * it is truncated with "..." past TESSERA_PAGE_CONFIG_LEN - 1 bytes. A stale file of that name
 * (an earlier process of this user that had this pid) is replaced; a page of this very process,
 * or another user's file, makes it fail with EEXIST. No descriptor is kept once it returns.
 * Returns 0 and *out, or an errno value with a one-line reason in err (when err is non-NULL). */
int ts_statspage_create(const char *dir, const char *config_text, ts_statspage **out, char *err,
                        size_t errlen);

/* Claim a free slot for (device, context_id) and point *sink at its counters and sequence word.
 * The counters start at zero. Thread-safe (lock-free claim). Returns the slot index, or a
 * negative errno: -ENOSPC when every slot is taken or the file system is full, -EINVAL, -ESTALE
 * after close/forget. On failure *sink is {NULL, NULL} (the allocator then keeps private
 * counters). */
int ts_statspage_claim(ts_statspage *p, int device, uint64_t context_id, ts_stats_sink *sink);

/* Give a slot back (context destroyed). Only after the allocator using it was destroyed. */
void ts_statspage_release(ts_statspage *p, int slot);

/* The observer to register with ts_allocator_set_observer, and its user argument for a slot.
 * The observer refreshes the slot's segment map (ts_statspage_publish_map). */
void ts_statspage_observer(void *user, ts_allocator *a);
void *ts_statspage_observer_user(ts_statspage *p, int slot);
/* The (page, slot) an observer user argument stands for; -1 when user is NULL. */
int ts_statspage_observer_target(void *user, ts_statspage **page);

/* Refresh the segment map of a slot from the allocator, inside the slot's sequence lock (joining
 * the allocator's write window when it already holds the word odd, as it does around observer
 * calls; else opening a short one). Call with the allocator's mutex held (the observer is): it
 * uses ts_allocator_walk_locked. Counters are the allocator's: only the map is written. */
void ts_statspage_publish_map(ts_statspage *p, int slot, ts_allocator *a);

/* The same over any walk function (walk(ctx, w) must call w's callbacks like ts_allocator_walk
 * does). For tests and other cores. */
typedef void (*ts_statspage_walk_fn)(void *ctx, const ts_walker *w);
void ts_statspage_publish_walk(ts_statspage *p, int slot, ts_statspage_walk_fn walk, void *ctx);

/* Normal exit: remove the file when unlink_file, else mark it closed (it then reads as stale once
 * the process is gone). The handle must not be used afterwards. NULL is a no-op. */
void ts_statspage_close(ts_statspage *p, bool unlink_file);

/* In a fork child: stop writing the parent's page without touching the file. NULL is a no-op. */
void ts_statspage_forget(ts_statspage *p);

/* For tests and messages. */
const char *ts_statspage_path(const ts_statspage *p);
tessera_page_slot *ts_statspage_slot(ts_statspage *p, int slot);

/* ================================= reader ================================= */

typedef enum ts_page_status {
    TS_PAGE_OK = 0,
    TS_PAGE_EIO = 1,        /* cannot open or read the file */
    TS_PAGE_ENOENT = 2,     /* no such page */
    TS_PAGE_ETRUNCATED = 3, /* shorter than its layout says */
    TS_PAGE_EFOREIGN = 4,   /* not a tessera stats page (wrong magic) */
    TS_PAGE_ENOTREADY = 5,  /* magic still 0: being created, or its creator died creating it */
    TS_PAGE_ENEWER = 6,     /* layout newer than this reader; identity prefix still valid */
    TS_PAGE_ECORRUPT = 7,   /* any other inconsistency */
    TS_PAGE_EBUSY = 8,      /* a slot's writer held the sequence lock through every retry */
    TS_PAGE_EEMPTY = 9,     /* slot not in use (not an error) */
    TS_PAGE_EUNTRUSTED = 10 /* the file is not its process's: another user's, or writable by others */
} ts_page_status;

const char *ts_page_status_name(int status);

/* An open page. Zero-initialise or ts_page_init before first use; ts_page_close after. */
typedef struct ts_page {
    int fd;                       /* file source, or -1 */
    const unsigned char *mem;     /* memory source, when fd < 0 */
    uint64_t size;                /* bytes available (file size at open) */
    uint64_t dev, ino;            /* the file's identity (0 for memory) */
    uint32_t uid, mode;           /* the file's owner and mode bits (stat) */
    int64_t mtime;                /* the file's modification time, seconds */
    int name_pid;                 /* pid from the file name; 0 when unknown */
    unsigned retries;             /* snapshot attempts before EBUSY; 1 once a slot of this
                                   * page was busy or its owner is known dead */
    unsigned have_identity;       /* hdr's identity prefix is valid (OK, ENEWER, some ECORRUPT) */
    tessera_page_header hdr;      /* validated copy (whole header only after TS_PAGE_OK) */
    char path[PATH_MAX];          /* as long as any page name a writer can create */
    char error[320];              /* message for the last error */
} ts_page;

void ts_page_init(ts_page *pg);

/* Open and validate a page file: O_RDONLY|O_NOFOLLOW, fstat checks, then the header, then trust:
 * a page whose file is writable by group or others, or whose owner is not a user the named
 * process runs as (/proc/<pid>/status), gives TS_PAGE_EUNTRUSTED (anyone may create a file of
 * that name in a shared directory). The file is read with pread (never mapped), so a page that
 * shrinks underneath a reader gives TS_PAGE_ETRUNCATED instead of SIGBUS. Returns a
 * ts_page_status; pg->error says why. */
int ts_page_open(ts_page *pg, const char *path);
int ts_page_open_pid(ts_page *pg, const char *dir, int pid);

/* Validate a page held in memory (not copied: buf must outlive pg). One snapshot attempt per
 * slot unless pg->retries is raised afterwards. */
int ts_page_parse(ts_page *pg, const void *buf, size_t len);

void ts_page_close(ts_page *pg);

/* A consistent copy of slot index: head always; segs/blocks too when both are non-NULL (arrays
 * of TESSERA_PAGE_MAX_SEGMENTS / TESSERA_PAGE_MAX_BLOCKS entries). Validated: TS_PAGE_OK,
 * TS_PAGE_EEMPTY (slot unused), TS_PAGE_EBUSY, TS_PAGE_ECORRUPT, TS_PAGE_ETRUNCATED, TS_PAGE_EIO
 * (pg->error says why). */
int ts_page_snapshot(ts_page *pg, uint32_t index, tessera_page_slot_head *head,
                     tessera_page_segment *segs, tessera_page_block *blocks);

/* Validate a slot copy on its own (what ts_page_snapshot runs). with_map: segs/blocks given. */
int ts_page_validate_slot(const tessera_page_header *h, const tessera_page_slot_head *head,
                          const tessera_page_segment *segs, const tessera_page_block *blocks,
                          char *err, size_t errlen);

/* Who owns a page. */
typedef enum ts_owner_state {
    TS_OWNER_LIVE = 0,
    TS_OWNER_UNKNOWN = 1,    /* cannot tell (other pid namespace, /proc hidden): treated as live */
    TS_OWNER_DEAD = 2,       /* no such process (or a zombie) */
    TS_OWNER_PID_REUSED = 3, /* the pid now names a process with another start time */
    TS_OWNER_REBOOTED = 4    /* written before the last reboot */
} ts_owner_state;

static inline bool ts_owner_is_stale(int s)
{
    return s == TS_OWNER_DEAD || s == TS_OWNER_PID_REUSED || s == TS_OWNER_REBOOTED;
}

const char *ts_owner_state_name(int s);

/* Judge the identity prefix of a header against the running system. why: one short sentence. */
int ts_page_owner_state(const tessera_page_header *h, char *why, size_t whylen);

/* Process facts, also used by the writer. Return 0 or an errno value. */
int ts_proc_stat(int pid, char *state, uint64_t *start_ticks);
int ts_read_boot_id(char *buf, size_t len);
uint64_t ts_pid_namespace(const char *pid_or_self);

/* Page files in dir (names tessera.<pid>), pids ascending. *pids is malloc'd (free it). Returns
 * 0 or an errno value. */
int ts_page_list(const char *dir, int **pids, size_t *n);

/* The owner state of an opened page (status: what the open returned), including pages without
 * an identity (creation never finished), judged by the pid of their name and their age. */
int ts_page_judge(ts_page *pg, int status, int pid, char *why, size_t whylen);

/* Is the page of pid in dir removable (stale)? Opens it into pg (closed by the caller).
 * Returns 1 stale, 0 not; why says which and why. */
int ts_page_is_stale(ts_page *pg, const char *dir, int pid, char *why, size_t whylen);

/* Remove the stale pages of dir: each candidate is renamed aside, judged again, and unlinked
 * only if still stale (else renamed back), so a live page is never removed. report (may be
 * NULL) is called for each stale page, removed or not. Returns the number removed, or a negative
 * errno when the directory cannot be read. */
typedef void (*ts_gc_report_fn)(void *user, int pid, int removed, const char *why);
int ts_page_gc(const char *dir, ts_gc_report_fn report, void *user);

/* ============================ views and output ============================ */

typedef struct ts_slot_view {
    uint32_t index;
    int status;                   /* ts_page_status of its snapshot */
    char error[320];
    tessera_page_slot_head head;  /* valid when status is TS_PAGE_OK */
} ts_slot_view;

/* One process, as read for output. */
typedef struct ts_proc_view {
    int pid;
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

/* The outputs of tessera-stat. views are sorted by pid by the caller. */
void ts_render_table(FILE *f, const ts_proc_view *views, size_t n, const char *dir);
void ts_render_detail(FILE *f, const ts_proc_view *v, const ts_render_env *env);
void ts_render_json(FILE *f, const ts_proc_view *views, size_t n);
void ts_render_prometheus(FILE *f, const ts_proc_view *views, size_t n);

/* The ASCII segment map of one slot. width: characters per segment bar (8..1024). */
void ts_render_map(FILE *f, const ts_proc_view *v, const tessera_page_slot_head *head,
                   const tessera_page_segment *segs, const tessera_page_block *blocks,
                   unsigned width);

#endif /* TS_STATSPAGE_H */
