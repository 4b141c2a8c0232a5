/* Run this test binary again as a child process with extra environment variables,
 * capturing its stdout and stderr. */
#ifndef TESSERA_SIM_TEST_CHILD_H
#define TESSERA_SIM_TEST_CHILD_H

#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"

extern char **environ;

struct child_result {
    int status; /* exit code, or -1 if it did not exit normally */
    char out[4096];
    char err[16384];
};

static inline void drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == cap - 1) {
            char sink[256];
            while (read(fd, sink, sizeof sink) > 0) {
            }
            break;
        }
    }
    buf[n] = 0;
    close(fd);
}

/* Run path with args (argv[1...]); extra: NULL-terminated "NAME=value" strings, which
 * replace the inherited TESSERA_SIM_* variables (and any variable of the same name). */
static inline void spawn_cmd(const char *path, const char *const *args, const char *const *extra,
                             struct child_result *res)
{
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)path;
    for (int i = 0; args[i] && a < 15; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    char *envp[512];
    int e = 0;
    for (char **p = environ; *p && e < 480; p++) {
        int keep = strncmp(*p, "TESSERA_SIM_", 12) != 0;
        for (int i = 0; keep && extra[i]; i++) {
            const char *eq = strchr(extra[i], '=');
            size_t len = eq ? (size_t)(eq - extra[i]) + 1 : strlen(extra[i]);
            keep = strncmp(*p, extra[i], len) != 0;
        }
        if (keep)
            envp[e++] = *p;
    }
    for (int i = 0; extra[i] && e < 510; i++)
        envp[e++] = (char *)extra[i];
    envp[e] = NULL;

    int out[2], err[2];
    CHECK(pipe(out) == 0 && pipe(err) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addclose(&fa, err[0]);
    pid_t pid;
    CHECK(posix_spawn(&pid, path, &fa, NULL, argv, envp) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(err[1]);
    drain(out[0], res->out, sizeof res->out);
    drain(err[0], res->err, sizeof res->err);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    res->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* the child must have succeeded; show what it said otherwise */
#define CHECK_CHILD_OK(res)                                                                   \
    do {                                                                                      \
        if ((res)->status != 0)                                                               \
            fprintf(stderr, "child exited with %d; its stderr:\n%s\n", (res)->status,         \
                    (res)->err);                                                              \
        CHECK_EQ((res)->status, 0);                                                           \
    } while (0)

static inline void spawn_self(const char *const *args, const char *const *extra,
                              struct child_result *res)
{
    spawn_cmd("/proc/self/exe", args, extra, res);
}

/* Handles travel to a child as hex text on its command line. */
static inline void hex_encode(const void *p, size_t n, char *out)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static inline void hex_decode(const char *s, void *p, size_t n)
{
    unsigned char *b = p;
    CHECK(strlen(s) == 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        CHECK(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (unsigned char)v;
    }
}

#endif
