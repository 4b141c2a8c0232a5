/* Writing a snapshot file (statspage/snapshot.h): through a temporary file in the same
 * directory, mode 0600, never following a symbolic link; an existing name is replaced only when
 * asked (a tool's output, or the file snapshot_on_oom itself wrote there), otherwise the next free
 * name is taken ("oom.pickle", "oom-2.pickle", ...). */
#include "statspage/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { WRITE_REPLACE = 1u, WRITE_SYNC = 2u };

/* path with "-k" before the extension of its last component (after it when there is none). */
static bool name_with_number(const char *path, unsigned k, char *out, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot > base ? (size_t)(dot - path) : strlen(path);
    int n = snprintf(out, len, "%.*s-%u%s", (int)stem, path, k, path + stem);
    return n > 0 && (size_t)n < len;
}

/* Write the file through fill(ctx, n, fd) (0 or an errno). Not WRITE_REPLACE: link() to path,
 * which refuses an existing name; then to the numbered names 2 .. tries; the name taken is
 * copied to chosen (when not NULL). */
static int write_file_with(int (*fill)(const void *ctx, size_t n, int fd), const void *ctx,
                           size_t n, const char *path, unsigned flags, unsigned tries,
                           char *chosen, size_t chosenlen, char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return ENAMETOOLONG;
    }
    const bool replace = flags & WRITE_REPLACE;
    struct stat st;
    if (replace && lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* -o /dev/null, a FIFO, a link to /dev/stdout: never turned into a regular file */
        snprintf(err, errlen, "%s is not a regular file (%s): not replaced", path,
                 S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory"
                 : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        return EEXIST;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(e));
        return e;
    }
    int e = fill(ctx, n, fd);
    if (!e && (flags & WRITE_SYNC) && fsync(fd) != 0 && errno != EINVAL)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    char name[4096];
    snprintf(name, sizeof name, "%s", path);
    if (!e && replace && rename(tmp, path) != 0)
        e = errno;
    for (unsigned k = 2; !e && !replace; k++) {
        if (link(tmp, name) == 0)
            break;
        e = errno;
        if (e != EEXIST || k > tries)
            break;
        if (!name_with_number(path, k, name, sizeof name))
            e = ENAMETOOLONG;
        else
            e = 0; /* taken: the next number */
    }
    if (e)
        snprintf(err, errlen, "cannot write %s: %s", name, strerror(e));
    else if (chosen)
        snprintf(chosen, chosenlen, "%s", name);
    if (e || !replace)
        unlink(tmp);
    return e;
}

static int fill_pickle(const void *ctx, size_t n, int fd)
{
    (void)n;
    return ts_snap_write_pickle(ctx, fd);
}

static int fill_bytes(const void *ctx, size_t n, int fd)
{
    const unsigned char *b = ctx;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int ts_snap_write_file(ts_snap *s, const char *path, bool replace, char *err, size_t errlen)
{
    if (!s->linked)
        ts_snap_link(s);
    return write_file_with(fill_pickle, s, 0, path, replace ? WRITE_REPLACE | WRITE_SYNC : 0, 1,
                           NULL, 0, err, errlen);
}

int ts_snap_write_new_file(ts_snap *s, const char *path, unsigned tries, char *chosen,
                           size_t chosenlen, char *err, size_t errlen)
{
    if (!s->linked)
        ts_snap_link(s);
    return write_file_with(fill_pickle, s, 0, path, 0, tries, chosen, chosenlen, err, errlen);
}

int ts_snap_replace_file(ts_snap *s, const char *path, char *err, size_t errlen)
{
    if (!s->linked)
        ts_snap_link(s);
    return write_file_with(fill_pickle, s, 0, path, WRITE_REPLACE, 1, NULL, 0, err, errlen);
}

int ts_snap_write_bytes_file(const void *buf, size_t n, const char *path, bool replace,
                             char *err, size_t errlen)
{
    return write_file_with(fill_bytes, buf, n, path, replace ? WRITE_REPLACE | WRITE_SYNC : 0, 1,
                           NULL, 0, err, errlen);
}
