/* Is the program about to run built with NVIDIA's static CUDA runtime (nvcc's default)? The
 * simulated device cannot run such a program (the runtime needs the real driver's private export
 * tables), so `tessera run --sim` says so in one line before it starts; the program still runs and
 * fails its own way.
 *
 * Told from the executable's bytes: NVIDIA's runtime carries its table of error names
 * ("cudaErrorCudartUnloading" among them), and a program that loads the shared runtime names
 * libcudart.so (its DT_NEEDED entry). The runtime's names without the library's name: static.
 * Only a regular ELF file is read, at most TS_RUN_SCAN_MAX bytes of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"

#define TS_RUN_SCAN_MAX ((size_t)1 << 30)

/* The file execvp would run for argv0: a name with a '/' as is, else the first executable
 * regular file of that name on PATH. 0 with path filled, or -1. */
static int program_path(const char *argv0, char *path, size_t len)
{
    if (strchr(argv0, '/')) {
        if (strlen(argv0) >= len)
            return -1;
        strcpy(path, argv0);
        return 0;
    }
    const char *dirs = getenv("PATH");
    if (!dirs || !*dirs)
        dirs = "/usr/local/bin:/usr/bin:/bin";
    while (*dirs) {
        const char *end = strchr(dirs, ':');
        size_t n = end ? (size_t)(end - dirs) : strlen(dirs);
        int w = snprintf(path, len, "%.*s%s%s", (int)n, dirs, n ? "/" : "", argv0);
        struct stat st;
        if (w > 0 && (size_t)w < len && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            access(path, X_OK) == 0)
            return 0;
        dirs += n;
        if (*dirs == ':')
            dirs++;
    }
    return -1;
}

/* Read fd in chunks (a file that shrinks meanwhile only ends the scan early), looking for both
 * strings; each chunk starts with the previous one's last bytes, so a string across two chunks is
 * found. */
static void scan(int fd, bool *has_runtime, bool *has_shared)
{
    static const char runtime[] = "cudaErrorCudartUnloading";
    static const char shared[] = "libcudart.so";
    enum { CHUNK = 1 << 20, KEEP = sizeof runtime };
    char *buf = malloc(CHUNK + KEEP);
    size_t kept = 0, total = 0;
    if (!buf)
        return;
    for (;;) {
        ssize_t n = read(fd, buf + kept, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (total == 0 && (n < 4 || memcmp(buf, "\177ELF", 4) != 0))
            break; /* not an ELF file: a script, nothing to tell */
        total += (size_t)n;
        size_t have = kept + (size_t)n;
        *has_runtime = *has_runtime || memmem(buf, have, runtime, sizeof runtime - 1);
        *has_shared = *has_shared || memmem(buf, have, shared, sizeof shared - 1);
        if (*has_shared || total >= TS_RUN_SCAN_MAX)
            break;
        kept = have < KEEP ? have : KEEP;
        memmove(buf, buf + have - kept, kept);
    }
    free(buf);
}

bool ts_run_static_cudart(const char *argv0, char *path, size_t len)
{
    if (program_path(argv0, path, len) != 0)
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return false;
    struct stat st;
    bool has_runtime = false, has_shared = false;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        scan(fd, &has_runtime, &has_shared);
    close(fd);
    return has_runtime && !has_shared;
}
