/* Process facts from /proc: who a process is (pid, start time, pid namespace, boot id), the
 * users it runs as, and whether it is still alive. The writer stamps its page with its own
 * identity; readers and the collector judge a page's owner with the same facts. */
#ifndef TS_STATSPAGE_IDENTITY_H
#define TS_STATSPAGE_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/stats_page.h"

/* This process, as a page's identity prefix records it (0 / "" where unknown). */
typedef struct ts_identity {
    int pid;
    uint64_t start_ticks;
    uint64_t pid_ns;
    char boot_id[TESSERA_PAGE_BOOT_ID_LEN];
} ts_identity;

void ts_identity_self(ts_identity *id);

/* State letter and start time (clock ticks after boot) of pid (0: this process). Return 0 or an
 * errno value. */
int ts_proc_stat(int pid, char *state, uint64_t *start_ticks);
int ts_read_boot_id(char *buf, size_t len);
/* The inode of /proc/<pid_or_self>/ns/pid (NULL: "self"); 0 when unknown. */
uint64_t ts_pid_namespace(const char *pid_or_self);

/* Whether any process is in the pid namespace whose /proc/<pid>/ns/pid inode is ns: 1 yes, 0 no
 * (proved: this reader is root in the initial pid namespace, so it sees every process and may
 * look at each one's namespace), -1 cannot tell. A scan of /proc at most once a second. */
int ts_pid_namespace_in_use(uint64_t ns);

/* The real, effective, saved and file-system uids of pid (the Uid: line of /proc/<pid>/status).
 * Returns 0 or an errno value (ENOENT: no such process). */
int ts_proc_uids(int pid, uint32_t uids[4]);

/* This process's command line, arguments separated by one space, NUL-terminated, at most len-1
 * bytes. Returns its length, or a negative errno. */
long ts_proc_cmdline(char *buf, size_t len);

/* 1: the pid names no process (or a zombie); 0: it exists or we cannot tell. */
int ts_pid_is_gone(int pid);

#endif /* TS_STATSPAGE_IDENTITY_H */
