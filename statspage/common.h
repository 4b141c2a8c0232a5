/* What every side of the stats page shares (writer, reader, collector): where pages live and
 * how a one-line reason reaches the caller. */
#ifndef TS_STATSPAGE_COMMON_H
#define TS_STATSPAGE_COMMON_H

#include <stddef.h>

/* Set by `tessera run --summary` for its program: an absolute directory, private to the user,
 * beside the pages, into which every process of the run also links its page when it creates it
 * (ts_statspage_create), so that the summary finds the run's pages after they are gone. */
#define TS_SUMMARY_DIR_ENV "TESSERA_SUMMARY_DIR"

/* The directory pages live in: $TESSERA_STATS_DIR when set and non-empty, else /dev/shm. */
const char *ts_statspage_dir(void);

/* Format a message into buf (nothing when buf is NULL or len is 0). */
void ts_msg_set(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* TS_STATSPAGE_COMMON_H */
