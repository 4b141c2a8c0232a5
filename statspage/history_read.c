/* The reader of another process's history ring file (statspage/history_read.h): tessera-stat
 * snapshot. Kept apart from core/history.c so that readers never link the allocator. Nothing in
 * the file is trusted: its owner and mode are checked as a page's are, and the work is bounded
 * by TS_HISTORY_COPY_MAX_EVENTS whatever its header claims. */
#include "statspage/history_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read len bytes at off whole: a ring is larger than one read(2) returns (2 GiB). 0 or EIO. */
static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return EIO; /* a file that shrinks underneath gives a short read, never SIGBUS */
        got += (size_t)n;
    }
    return 0;
}

static uint64_t event_offset(uint64_t index)
{
    return sizeof(tessera_history_header) + index * sizeof(tessera_history_event);
}

/* Copy events [first, first + count) of the ring in fd (wrapping at cap) into out. */
static int read_events(int fd, uint64_t cap, uint64_t first, uint64_t count, ts_history_copy *out)
{
    tessera_history_event *buf = malloc((size_t)(count ? count : 1) * sizeof *buf);
    if (!buf)
        return ENOMEM;
    uint64_t done = 0;
    int e = 0;
    while (!e && done < count) {
        uint64_t idx = (first + done) % cap, run = cap - idx;
        if (run > count - done)
            run = count - done;
        e = read_full(fd, buf + done, (size_t)run * sizeof *buf, event_offset(idx));
        done += run;
    }
    for (uint64_t i = 0; !e && i < count; i++)
        ts_history_take(out, &buf[i], buf[i].seq, first + i);
    free(buf);
    return e;
}

int ts_history_read(const char *dir, int pid, uint32_t slot, uint32_t owner_uid,
                    ts_history_copy *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char path[512];
    snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d" TESSERA_HISTORY_FILE_INFIX "%u",
             dir, pid, slot);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return e;
    }
    struct stat st;
    tessera_history_header hdr;
    const char *why = NULL;
    int e = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        e = EINVAL, why = "not a regular file";
    else if (st.st_uid != owner_uid || (st.st_mode & (S_IWGRP | S_IWOTH)))
        e = EPERM, why = "not written by the page's owner (another user's file, or writable by "
                         "group or others): ignored";
    else if (read_full(fd, &hdr, sizeof hdr, 0) != 0)
        e = EIO;
    else if (hdr.magic != TESSERA_HISTORY_MAGIC || hdr.version != TESSERA_HISTORY_VERSION ||
             hdr.header_size != sizeof hdr || hdr.event_size != sizeof(tessera_history_event) ||
             hdr.capacity == 0 || hdr.capacity > TESSERA_HISTORY_MAX_CAPACITY ||
             (uint64_t)st.st_size < event_offset(hdr.capacity) || hdr.pid != pid ||
             hdr.slot != slot)
        e = EPROTO, why = "not a tessera history ring of this process";
    uint64_t first = 0, count = 0;
    if (!e) {
        out->hdr = hdr;
        count = ts_history_window(hdr.written, hdr.capacity, &first);
        out->dropped = first;
        out->cut = first - (hdr.written > hdr.capacity ? hdr.written - hdr.capacity : 0);
        out->events = calloc(count ? count : 1, sizeof *out->events);
        if (!out->events)
            e = ENOMEM;
    }
    if (!e)
        e = read_events(fd, hdr.capacity, first, count, out);
    /* Events older than (written now - capacity) may have been overwritten during the copy. */
    uint64_t written_after = 0;
    if (!e && read_full(fd, &written_after, sizeof written_after,
                        offsetof(tessera_history_header, written)) != 0)
        e = EIO;
    close(fd);
    if (e) {
        ts_history_copy_free(out);
        snprintf(err, errlen, "%s: %s", path, why ? why : strerror(e));
        return e;
    }
    uint64_t cap = out->hdr.capacity, keep_from = written_after > cap ? written_after - cap : 0;
    size_t k = 0;
    for (size_t i = 0; i < out->n; i++) {
        if ((out->events[i].seq - 2) / 2 >= keep_from)
            out->events[k++] = out->events[i];
        else
            out->dropped++;
    }
    out->n = k;
    return 0;
}
