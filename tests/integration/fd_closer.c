/* A daemon-like program: it starts CUDA, then closes every descriptor from 3 up that it did not
 * open (daemons do), opens its own files (which get the lowest free numbers, those tessera's
 * descriptors had), and goes on: a second device (a new stats-page slot is committed), enough
 * allocations to flush a trace several times, and a fork whose child writes to the program's
 * files. Every byte of those files is checked at the end.
 *
 * The simulated device's own descriptors (/memfd:tessera-sim-*) are left open: they stand for
 * the driver's /dev/nvidia* descriptors, without which a real driver stops working too.
 *
 * Usage: fd_closer DIR    (run with two simulated devices; prints RESULT status=ok|corrupt) */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "probe_common.h"

#define NFILES 8
#define LINE "the program's own line\n"

static int is_simulator_fd(int fd)
{
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return strncmp(target, "/memfd:tessera-sim", 18) == 0;
}

static void close_others(void)
{
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 4096)
        max = 4096;
    for (int fd = 3; fd < max; fd++)
        if (!is_simulator_fd(fd))
            close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *first;
    CHECK(cudaMalloc(&first, (size_t)4 << 20)); /* CUDA started: page (and trace) exist */
    close_others();

    int fds[NFILES];
    char path[NFILES][512];
    for (int i = 0; i < NFILES; i++) {
        snprintf(path[i], sizeof path[i], "%s/own.%d", argv[1], i);
        fds[i] = open(path[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fds[i] < 0 || write(fds[i], LINE, strlen(LINE)) != (ssize_t)strlen(LINE)) {
            printf("RESULT status=error call=open\n");
            return 1;
        }
    }

    /* A second device: tessera claims and commits a new slot of its page. */
    CHECK(cudaSetDevice(1));
    void *other;
    CHECK(cudaMalloc(&other, (size_t)4 << 20));
    CHECK(cudaSetDevice(0));

    /* About 1.5 MB of trace lines: the 256 KiB trace buffer is written several times. */
    for (int i = 0; i < 15000; i++) {
        void *p;
        CHECK(cudaMalloc(&p, (size_t)(512 + (i % 64) * 512)));
        CHECK(cudaFree(p));
    }

    /* The child writes to the program's files: its descriptors must still be the program's. */
    pid_t child = fork();
    if (child == 0) {
        int ok = 1;
        for (int i = 0; i < NFILES; i++)
            ok &= write(fds[i], LINE, strlen(LINE)) == (ssize_t)strlen(LINE);
        _exit(ok ? 0 : 4);
    }
    int status = 0;
    waitpid(child, &status, 0);
    int child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;

    CHECK(cudaFree(other));
    CHECK(cudaFree(first));

    /* Each file holds exactly two lines: the parent's and the child's. */
    int files_ok = 1;
    for (int i = 0; i < NFILES; i++) {
        char buf[256];
        ssize_t n = pread(fds[i], buf, sizeof buf, 0);
        struct stat st;
        if (fstat(fds[i], &st) != 0 || st.st_size != (off_t)(2 * strlen(LINE)) ||
            n != (ssize_t)(2 * strlen(LINE)) || memcmp(buf, LINE LINE, (size_t)n) != 0) {
            printf("file %s: %lld bytes\n", path[i], (long long)st.st_size);
            files_ok = 0;
        }
        close(fds[i]);
    }
    printf("RESULT status=%s child=%s files=%s\n", child_ok && files_ok ? "ok" : "corrupt",
           child_ok ? "ok" : "failed", files_ok ? "ok" : "changed");
    return child_ok && files_ok ? 0 : 3;
}
