/* The shared-memory stats page, reader side (tessera-stat, tools/run, tests, the fuzz target):
 * open a page file (or a copy in memory), validate its header, take consistent copies of its
 * slots, and judge whether its owner is still alive. Nothing here trusts a byte of the file.
 * The byte layout is include/tessera/stats_page.h; docs/stats-page.md describes the protocols. */
#ifndef TS_STATSPAGE_READER_H
#define TS_STATSPAGE_READER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "statspage/common.h"
#include "statspage/identity.h"
#include "tessera/stats_page.h"

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
    TS_PAGE_EUNTRUSTED = 10, /* the file is not its process's: another user's, or writable by others */
    TS_PAGE_ESKIPPED = 11,   /* not read: past a listing's bound on pages or slots (per user, overall) */
    TS_PAGE_EOLDER = 12      /* layout older than this reader's; identity prefix still valid */
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
    unsigned mapped;              /* mem is this reader's own mapping of the file (ts_page_map) */
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

/* Read an opened page (TS_PAGE_OK) from a read-only shared mapping from now on, instead of pread:
 * slot copies then cost no system call (a process reading its own counters every step). Only for
 * a file owned by the caller's effective user: no other user can shrink it under the mapping (the
 * reason readers otherwise never map a page: a page that shrinks would fault the reader). The
 * descriptor is closed; ts_page_close unmaps. Returns 0, or an errno value (EPERM: another
 * user's file; the page stays readable with pread). */
int ts_page_map(ts_page *pg);

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

/* The pid a page file name (tessera.<pid>, no directory) stands for; 0 when it is no page name. */
int ts_page_name_pid(const char *name);

/* Open path as the page of pid (0: unknown), as ts_page_open does; for files whose name is not
 * the page's own (the collector's files moved aside). */
int ts_page_open_as(ts_page *pg, const char *path, int pid);

#endif /* TS_STATSPAGE_READER_H */
