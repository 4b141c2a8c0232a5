/* The other tessera processes on one device, found from their stats pages: a page's slots name
 * their device by its UUID and its header names the process's control channel (layout 3). For
 * the shim's lending (shim/lend.c), on its out-of-memory path only. */
#ifndef TS_STATSPAGE_NEIGHBOURS_H
#define TS_STATSPAGE_NEIGHBOURS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pages read per search, whatever the directory holds (the rest are not looked at). */
#define TS_NEIGHBOURS_PAGES 256

typedef struct ts_neighbour {
    int pid;
    uint32_t uid;         /* the page file's owner: a user the process runs as */
    uint64_t start_ticks; /* the process's start time, as its page records it */
    uint64_t secret;      /* its control channel (0: none) */
    uint64_t reserved;    /* reserved_bytes.all.current of its slots on the device, summed */
    uint64_t allocated;   /* allocated_bytes.all.current, the same way */
    char command[48];     /* the start of its command line */
} ts_neighbour;

/* The live processes with a page in dir (NULL: ts_statspage_dir()) and an active slot on the
 * device whose UUID is uuid, other than pid self: those whose page file belongs to uid, or of
 * any user when any_user. Each page goes through the validating reader (a page it does not
 * trust, a stale page, a busy slot are left out). At most max of them in out, the most cached
 * (reserved - allocated) first; returns how many. */
size_t ts_neighbours_find(const char *dir, const uint8_t uuid[16], int self, uint32_t uid,
                          bool any_user, ts_neighbour *out, size_t max);

#endif /* TS_STATSPAGE_NEIGHBOURS_H */
