/* The reader of another process's history ring file (statspage/history_read.h): tessera-stat
 * snapshot. Kept apart from core/history.c so that readers never link the allocator. */
#include "statspage/history_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t ring_bytes(uint32_t capacity)
{
    return sizeof(tessera_history_header) + (size_t)capacity * sizeof(tessera_history_event);
}

int ts_history_read(const char *dir, int pid, uint32_t slot, ts_history_copy *out, char *err,
                    size_t errlen)
{
    memset(out, 0, sizeof *out);
    char path[512];
    snprintf(path, sizeof path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d" TESSERA_HISTORY_FILE_INFIX "%u",
             dir, pid, slot);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return e;
    }
    struct stat st;
    tessera_history_header hdr;
    int e = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        e = EINVAL;
    else if (pread(fd, &hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
        e = EIO;
    else if (hdr.magic != TESSERA_HISTORY_MAGIC || hdr.version != TESSERA_HISTORY_VERSION ||
             hdr.header_size != sizeof hdr || hdr.event_size != sizeof(tessera_history_event) ||
             hdr.capacity == 0 || hdr.capacity > TESSERA_HISTORY_MAX_CAPACITY ||
             (uint64_t)st.st_size < ring_bytes(hdr.capacity) || hdr.pid != pid || hdr.slot != slot)
        e = EPROTO;
    /* pread, never mmap: a file that shrinks underneath gives a short read, not SIGBUS. */
    size_t len = ring_bytes(e ? 1 : hdr.capacity);
    char *buf = e ? NULL : malloc(len);
    if (!e && !buf)
        e = ENOMEM;
    if (!e && pread(fd, buf, len, 0) != (ssize_t)len)
        e = EIO;
    /* Events older than (written now - capacity) may have been overwritten during the copy. */
    uint64_t written_after = 0;
    if (!e && pread(fd, &written_after, sizeof written_after,
                    offsetof(tessera_history_header, written)) != (ssize_t)sizeof written_after)
        e = EIO;
    close(fd);
    if (!e) {
        tessera_history_header *mh = (tessera_history_header *)buf;
        out->hdr = *mh;
        e = ts_history_copy_ring(mh, (const tessera_history_event *)(buf + sizeof hdr), out);
    }
    free(buf);
    if (e) {
        snprintf(err, errlen, "%s: %s", path,
                 e == EPROTO ? "not a tessera history ring of this process" : strerror(e));
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
