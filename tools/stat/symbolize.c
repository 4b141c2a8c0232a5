/* tessera-stat symbolize FILE [-o OUT]: name the raw frames of a snapshot written with
 * snapshot_on_oom (statspage/symbolize.h), from the symbol tables of the files they point into,
 * if those files are still there. Without -o, FILE is replaced (atomically, through a rename)
 * when a frame changed. */
#include "tools/stat/stat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statspage/snapshot.h"
#include "statspage/symbolize.h"
#include "statspage/symbols.h"

/* The whole of a regular file of at most TS_SNAP_MAX_BYTES into *buf. 0 or an errno, with the
 * reason in err. Never blocks on a FIFO or a device. */
static int read_snapshot(const char *path, unsigned char **buf, size_t *n, char *err,
                         size_t errlen)
{
    *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
        return e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        close(fd);
        return EINVAL;
    }
    if ((uint64_t)st.st_size > TS_SNAP_MAX_BYTES) {
        snprintf(err, errlen, "%s: %lld bytes, over the %u MiB a snapshot may have", path,
                 (long long)st.st_size, TS_SNAP_MAX_BYTES >> 20);
        close(fd);
        return EFBIG;
    }
    size_t want = (size_t)st.st_size, got = 0;
    unsigned char *b = malloc(want ? want : 1);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        close(fd);
        return ENOMEM;
    }
    while (got < want) {
        ssize_t r = read(fd, b + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* it shrank: parse what was read, which then fails cleanly */
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *n = got;
    return 0;
}

int ts_stat_symbolize(const char *in_path, const char *out_path)
{
    const char *prog = "tessera-stat";
    char err[600];
    unsigned char *in = NULL, *out = NULL;
    size_t n = 0, outlen = 0;
    if (read_snapshot(in_path, &in, &n, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    ts_symbols *sym = ts_symbols_create();
    ts_symbolize_counts c;
    int e = sym ? ts_snap_symbolize(in, n, sym, &out, &outlen, &c, err, sizeof err) : ENOMEM;
    ts_symbols_free(sym);
    free(in);
    if (e) {
        fprintf(stderr, "%s: %s: %s\n", prog, in_path, e == ENOMEM ? "out of memory" : err);
        return 1;
    }
    int rc = 0;
    bool changed = c.named || c.dropped;
    const char *dest = out_path ? out_path : in_path;
    if (c.frames == 0) /* nothing to name: say how to get frames */
        printf("%s: no frames: the snapshot was taken without them; run the program with "
               "history_events:N,history_frames:True (e.g. TESSERA_ALLOC_CONF=history_events:"
               "100000,history_frames:True,snapshot_on_oom:...) for each event's, block's and "
               "segment's call stack\n", in_path);
    if (!changed && !out_path) {
        if (c.frames)
            printf("%s: %zu frames, none to name: left as it was\n", in_path, c.frames);
    } else if (ts_snap_write_bytes_file(out, outlen, dest, true, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        rc = 1;
    } else {
        printf("%s: %zu frames: %zu named, %zu left as file offsets (the file is gone or has no "
               "symbol there), %zu of tessera's own left out; written to %s\n",
               in_path, c.frames, c.named, c.unresolved + c.bounded, c.dropped, dest);
        if (c.bounded)
            printf("%zu frames left unnamed to keep the snapshot under %u MiB\n", c.bounded,
                   TS_SNAP_MAX_BYTES >> 20);
    }
    free(out);
    return rc;
}
