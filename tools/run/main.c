/* tessera: the front door. `tessera run [options] -- PROGRAM ARGS` runs PROGRAM with
 * libtessera.so preloaded, like `valgrind PROGRAM` or `nsys profile PROGRAM`.
 *
 * Exit status: the program's (128 + N when signal N killed it, as a shell reports it);
 * 125 tessera run itself failed (usage, a configuration the strict parser rejects, from --conf
 * or from the environment, libtessera.so not found); 126 the program cannot be executed; 127 the
 * program was not found. `tessera` without `run`: 0 for --help and --version, 2 for a command
 * line it does not understand (as every tool of tessera; README, "Exit status").
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "statspage/collect.h"
#include "run.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

/* Every signal a program can be sent and catch is passed on to it, except: SIGKILL and SIGSTOP
 * (nobody can catch them), SIGCHLD (the wrapper's own children), and the terminal's stop
 * signals SIGTSTP, SIGTTIN and SIGTTOU, which stop the wrapper as a shell expects (the terminal
 * stops the program too: it is in the same foreground group). */
static bool signal_forwarded(int sig)
{
    switch (sig) {
    case SIGKILL: case SIGSTOP: case SIGCHLD: case SIGTSTP: case SIGTTIN: case SIGTTOU:
        return false;
    default:
        return sig < 32 || (sig >= SIGRTMIN && sig <= SIGRTMAX); /* 32, 33: the C library's own */
    }
}

/* Faults the kernel raises in the wrapper itself (a bug here): not forwarded, but fatal. */
static bool signal_is_fault(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP ||
           sig == SIGSYS;
}

/* Written once, before the forwarded signals are unblocked; read by the handler. */
static volatile pid_t g_child;

#define TS_EXIT_USAGE 2 /* a command line `tessera` itself does not understand */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera run [--conf STR] [--summary] [--sim] [--] PROGRAM [ARGS...]\n"
            "       tessera --help | --version\n"
            "\n"
            "Runs PROGRAM with tessera's allocator preloaded (LD_PRELOAD, ahead of what it held).\n"
            "  --conf STR   TESSERA_ALLOC_CONF for the program, or a policy name: 'default'\n"
            "               (tessera's), 'pytorch' (PyTorch's caching allocator). Checked first,\n"
            "               as TESSERA_ALLOC_CONF from the environment is: a key or value the\n"
            "               strict parser rejects stops here, before the program starts\n"
            "  --summary    at exit, print per process and device what tessera did (peak\n"
            "               allocated and reserved and how far apart they were, utilization,\n"
            "               allocations served, device calls, retries, out of memory) on stderr,\n"
            "               with the counter names. The stats pages stay where they are\n"
            "               (TESSERA_STATS_DIR): tessera-stat shows the program while it runs\n"
            "  --sim        run on tessera's simulated CUDA device (no GPU). Its settings:\n"
            "               TESSERA_SIM_MEMORY (bytes per device, K/M/G suffixes; default 80G),\n"
            "               TESSERA_SIM_DEVICES (default 1). A program built with NVIDIA's\n"
            "               static runtime (nvcc's default) cannot run there: it says so\n"
            "Exit status: the program's (128+N when killed by signal N); 125 tessera run failed\n"
            "(usage included); 126 PROGRAM cannot be executed; 127 PROGRAM not found. Nothing is\n"
            "written to stdout but --help and --version.\n");
}

static void die_usage(const char *what)
{
    fprintf(stderr, "tessera: run: %s (see tessera --help)\n", what);
    exit(TS_RUN_EXIT_FAILURE);
}

/* A signal meant for the program is passed on to it. A terminal's ^C or ^\ already reached the
 * whole foreground process group, program included (si_code SI_KERNEL): passing it on again
 * would deliver it twice, which a program counting interrupts (Python's second ^C) would feel.
 * A fault raised by the kernel in the wrapper (si_code > 0) gets its default action back, so it
 * kills the wrapper as it would have (and the program with it: PR_SET_PDEATHSIG). */
static void forward(int sig, siginfo_t *info, void *ucontext)
{
    (void)ucontext;
    if (info && info->si_code > 0 && signal_is_fault(sig)) {
        signal(sig, SIG_DFL);
        return;
    }
    pid_t child = g_child;
    if (child > 0 && !(info && info->si_code == SI_KERNEL))
        kill(child, sig);
}

static int env_prepend(const char *name, const char *value, char sep)
{
    const char *old = getenv(name);
    if (!old || !*old)
        return setenv(name, value, 1);
    size_t len = strlen(value) + 1 + strlen(old) + 1;
    char *joined = malloc(len);
    if (!joined)
        return -1;
    snprintf(joined, len, "%s%c%s", value, sep, old);
    int rc = setenv(name, joined, 1);
    free(joined);
    return rc;
}

/* The configuration the program will read (--conf, set in the environment first, or what the
 * environment already holds), read here first by the same code: a configuration the program
 * would stop on (TESSERA_ALLOC_CONF is strict) stops tessera run instead, before the program
 * starts, with the same line. The lenient PyTorch variables never stop anything; the program
 * says what it ignores. */
static void conf_check(void)
{
    ts_config cfg;
    ts_config_diag diag;
    if (ts_config_from_env(&cfg, NULL, &diag, NULL, NULL) != 0) {
        fprintf(stderr, "tessera: %s\n", diag.message);
        exit(TS_RUN_EXIT_FAILURE);
    }
}

static int status_of(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return TS_RUN_EXIT_FAILURE;
}

static int program_run(char **argv, pid_t *program)
{
    sigset_t block, old;
    sigemptyset(&block);
    for (int sig = 1; sig <= SIGRTMAX; sig++)
        if (signal_forwarded(sig))
            sigaddset(&block, sig);
    /* blocked across fork: a signal arriving before g_child is set waits and is forwarded */
    sigprocmask(SIG_BLOCK, &block, &old);
    /* what the program starts with: the dispositions the wrapper was given (ignored stays
     * ignored, as a shell's nohup or trap '' expects), restored in the child */
    static struct sigaction given[NSIG];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig <= SIGRTMAX; sig++)
        if (signal_forwarded(sig))
            sigaction(sig, &sa, &given[sig]);

    fflush(stderr);
    const pid_t wrapper = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tessera: run: cannot fork: %s\n", strerror(errno));
        return TS_RUN_EXIT_FAILURE;
    }
    if (pid == 0) {
        for (int sig = 1; sig <= SIGRTMAX; sig++)
            if (signal_forwarded(sig))
                sigaction(sig, &given[sig], NULL);
        /* the program dies with the wrapper: nothing is left to forward its signals, wait for
         * it or clean up after it (checked again after: the wrapper may be gone already) */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != wrapper)
            _exit(TS_RUN_EXIT_FAILURE);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(argv[0], argv);
        int e = errno;
        fprintf(stderr, "tessera: run: cannot run '%s': %s\n", argv[0], strerror(e));
        _exit(e == ENOENT ? TS_RUN_EXIT_NOT_FOUND : TS_RUN_EXIT_CANNOT_EXEC);
    }
    g_child = pid;
    *program = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);

    int wstatus = 0;
    for (;;) {
        pid_t r = waitpid(pid, &wstatus, 0);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "tessera: run: waiting for the program: %s\n", strerror(errno));
            return TS_RUN_EXIT_FAILURE;
        }
    }
    return status_of(wstatus);
}

/* The private directory of --summary: inside the page directory (a hard link cannot cross file
 * systems), mode 0700, an absolute path (the writer refuses anything else), named so that no
 * listing takes it for a page. 0, or -1 after a message. */
static int summary_dir_make(char *out, size_t len)
{
    char dir[4096];
    const char *pages = ts_statspage_dir();
    if (!realpath(pages, dir)) {
        fprintf(stderr, "tessera: run: --summary: the stats page directory %s: %s\n", pages,
                strerror(errno));
        return -1;
    }
    int n = snprintf(out, len, "%s/.tessera-run.XXXXXX", dir);
    if (n < 0 || (size_t)n >= len || !mkdtemp(out)) {
        fprintf(stderr, "tessera: run: --summary: cannot create a directory in %s: %s\n", dir,
                n < 0 || (size_t)n >= len ? "name too long" : strerror(errno));
        return -1;
    }
    if (setenv(TS_SUMMARY_DIR_ENV, out, 1) != 0) {
        fprintf(stderr, "tessera: run: cannot set the environment: %s\n", strerror(errno));
        rmdir(out);
        return -1;
    }
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    const char *conf = NULL;
    bool summary = false, sim = false;
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strcmp(a, "--summary") == 0) {
            summary = true;
        } else if (strcmp(a, "--sim") == 0) {
            sim = true;
        } else if (strcmp(a, "--conf") == 0) {
            if (i + 1 >= argc)
                die_usage("--conf needs a value");
            conf = argv[++i];
        } else if (strncmp(a, "--conf=", 7) == 0) {
            conf = a + 7;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            char msg[256];
            snprintf(msg, sizeof msg, "unknown option '%.200s'", a);
            die_usage(msg);
        } else {
            break;
        }
    }
    if (i >= argc)
        die_usage("no program given");

    if (conf && setenv("TESSERA_ALLOC_CONF", conf, 1) != 0) {
        fprintf(stderr, "tessera: run: cannot set the environment: %s\n", strerror(errno));
        return TS_RUN_EXIT_FAILURE;
    }
    conf_check();

    ts_run_layout layout;
    char err[8192];
    if (ts_run_layout_find(&layout, err, sizeof err) != 0) {
        fprintf(stderr, "tessera: run: %s\n", err);
        return TS_RUN_EXIT_FAILURE;
    }
    if (sim && !layout.sim_dir[0]) {
        fprintf(stderr, "tessera: run: --sim: the simulated CUDA device is not part of this %s "
                        "(it is built with the tests: configure with cmocka installed)\n",
                layout.build_tree ? "build" : "installation");
        return TS_RUN_EXIT_FAILURE;
    }

    if (sim) {
        char path[4096];
        if (ts_run_static_cudart(argv[i], path, sizeof path))
            fprintf(stderr, "tessera: run: --sim: %s was built with NVIDIA's static CUDA runtime "
                            "(nvcc's default), which the simulated device cannot run (it needs "
                            "the real driver); rebuild it with -cudart=shared, or run it on a "
                            "GPU\n", path);
    }
    if (env_prepend("LD_PRELOAD", layout.library, ':') != 0 ||
        (sim && env_prepend("LD_LIBRARY_PATH", layout.sim_dir, ':') != 0)) {
        fprintf(stderr, "tessera: run: cannot set the environment: %s\n", strerror(errno));
        return TS_RUN_EXIT_FAILURE;
    }

    /* --summary: every process of the run links its page into a private directory beside the
     * pages (TESSERA_SUMMARY_DIR, statspage/writer.c), so the summary reads them after they
     * are gone from the page directory, which stays where the user put it */
    char run_dir[4096] = "";
    if (summary && summary_dir_make(run_dir, sizeof run_dir) != 0)
        return TS_RUN_EXIT_FAILURE;

    const char *keep = getenv("TESSERA_STATS_KEEP");
    bool user_keeps = keep && strcmp(keep, "1") == 0; /* the shim's rule (shim/context.c) */
    pid_t program = 0;
    int status = program_run(argv + i, &program);

    if (status > 128 && status < TS_RUN_EXIT_FAILURE + 128 && program > 0 && !user_keeps)
        /* killed by a signal: it could not remove its stats page (and rings) itself */
        (void)ts_page_collect_pid(NULL, (int)program, NULL, NULL);
    if (summary) {
        ts_run_summary_print(stderr, run_dir);
        fprintf(stderr, "tessera: program exit status %d\n", status);
        if (ts_run_summary_cleanup(run_dir, err, sizeof err) != 0)
            fprintf(stderr, "tessera: run: %s\n", err);
    }
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return TS_EXIT_USAGE;
    }
    if (strcmp(argv[1], "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tessera %s\n", TESSERA_VERSION);
        return 0;
    }
    fprintf(stderr, "tessera: unknown command '%.200s' (the command is: tessera run ...; "
                    "see tessera --help)\n", argv[1]);
    return TS_EXIT_USAGE;
}
