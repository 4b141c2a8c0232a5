/* scripts/with-sim: banner, options, environment, error message when not built.
 * argv[1] = path of scripts/with-sim, argv[2] = the build directory.
 * "query N BYTES" mode is the command with-sim runs: it checks what the runtime sees. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "rt.h"

static int query(int n, unsigned long long bytes)
{
    int count = -1;
    RT(cudaGetDeviceCount(&count));
    CHECK_EQ(count, n);
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp p;
        RT(cudaGetDeviceProperties(&p, d));
        CHECK_EQ(p.totalGlobalMem, bytes);
    }
    void *x;
    RT(cudaMalloc(&x, 1));
    RT(cudaFree(x));
    (void)rt_counters(0); /* the simulator was loaded, not a real driver */
    return 0;
}

static const char *script, *build;
static char self[PATH_MAX];

static void test_runs_command(void)
{
    const char *args[] = {"--build-dir", build, "--devices", "2", "--memory", "3G",
                          self, "query", "2", "3221225472", NULL};
    const char *env[] = {"LD_LIBRARY_PATH=", NULL};
    struct child_result r;
    spawn_cmd(script, args, env, &r);
    CHECK_CHILD_OK(&r);
    CHECK(strcmp(r.err, "with-sim: simulated CUDA device: 2 x 3G (no GPU)\n") == 0);
    CHECK_EQ(strlen(r.out), 0);
}

static void test_quiet_and_build_dir_variable(void)
{
    char var[PATH_MAX + 32];
    snprintf(var, sizeof var, "TESSERA_BUILD_DIR=%s", build);
    const char *args[] = {"-q", self, "query", "1", "85899345920", NULL};
    const char *env[] = {var, NULL};
    struct child_result r;
    spawn_cmd(script, args, env, &r);
    CHECK_CHILD_OK(&r);
    CHECK_EQ(strlen(r.err), 0);
}

static void test_errors_and_help(void)
{
    struct child_result r;
    const char *missing[] = {"--build-dir", "/nonexistent/tessera-build", "true", NULL};
    const char *none[] = {NULL};
    spawn_cmd(script, missing, none, &r);
    CHECK(r.status != 0);
    CHECK(strstr(r.err, "not built") != NULL);
    CHECK(strstr(r.err, "tests/sim/libcuda.so.1") != NULL);
    CHECK(strstr(r.err, "meson setup /nonexistent/tessera-build") != NULL);
    const char *bad[] = {"--build-dir", build, "--memory", "lots", "true", NULL};
    spawn_cmd(script, bad, none, &r);
    CHECK(r.status != 0);
    CHECK(strstr(r.err, "--memory") != NULL);
    const char *help[] = {"--help", NULL};
    spawn_cmd(script, help, none, &r);
    CHECK_CHILD_OK(&r);
    CHECK(strstr(r.out, "Usage: scripts/with-sim") != NULL);
    CHECK(strstr(r.out, "TESSERA_SIM_OP_DELAY_US") != NULL);
    CHECK(strstr(r.out, "TESSERA_SIM_MARKER_DELAY") != NULL);
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc == 4 && strcmp(argv[1], "query") == 0)
        return query(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    CHECK(argc == 3);
    script = argv[1];
    build = argv[2];
    CHECK(realpath("/proc/self/exe", self) != NULL);
    RUN(test_runs_command);
    RUN(test_quiet_and_build_dir_variable);
    RUN(test_errors_and_help);
    return 0;
}
