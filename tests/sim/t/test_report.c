/* TESSERA_SIM_REPORT: one JSON line per device per process, appended at exit; nothing ever
 * on stdout; diagnostics on stderr only with TESSERA_SIM_VERBOSE=1. */
#include <stdlib.h>
#include <string.h>

#include "drv.h"
#include "child.h"

static int child(void)
{
    drv_setup(0);
    CUdeviceptr a, b;
    CU(cuMemAlloc(&a, 1000));
    CU(cuMemAlloc(&b, 1000));
    CU(cuMemFree(a));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, 2 * MiB, &prop, 0));
    CUdeviceptr x;
    EXPECT(cuMemAlloc(&x, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY); /* something for the log */
    return 0; /* exit: the report is written by the simulator's atexit handler */
}

static int count_lines(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void test_report_and_logging(void)
{
    char path[] = "/tmp/tessera-sim-report-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    char rep[128];
    snprintf(rep, sizeof rep, "TESSERA_SIM_REPORT=%s", path);
    const char *args[] = {"child", NULL};
    const char *quiet[] = {rep, "TESSERA_SIM_DEVICES=2", "TESSERA_SIM_MEMORY=1G", NULL};
    const char *verbose[] = {rep, "TESSERA_SIM_DEVICES=2", "TESSERA_SIM_MEMORY=1G",
                             "TESSERA_SIM_VERBOSE=1", NULL};
    struct child_result r;
    for (int i = 0; i < 2; i++) {
        spawn_self(args, quiet, &r);
        CHECK_CHILD_OK(&r);
        CHECK_EQ(strlen(r.out), 0);
        CHECK_EQ(strlen(r.err), 0); /* silent unless asked */
    }
    spawn_self(args, verbose, &r);
    CHECK_CHILD_OK(&r);
    CHECK_EQ(strlen(r.out), 0); /* never anything on stdout */
    CHECK(strlen(r.err) > 0);
    for (const char *line = r.err; *line;) {
        CHECK(strncmp(line, "tessera-sim: ", 13) == 0);
        const char *nl = strchr(line, '\n');
        CHECK(nl != NULL);
        line = nl + 1;
    }
    CHECK(strstr(r.err, "out of memory") != NULL);

    char text[8192];
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    unlink(path);
    text[n] = 0;
    CHECK_EQ(count_lines(text, "\n"), 6); /* 3 processes x 2 devices */
    CHECK_EQ(count_lines(text, "\"device\":0,"), 3);
    CHECK_EQ(count_lines(text, "\"device\":1,"), 3);
    CHECK_EQ(count_lines(text, "\"total_bytes\":1073741824,"), 6);
    /* device 0 of each process: 2 allocations, 1 free, 1 handle, 1 OOM */
    char *save = NULL;
    long pids[6];
    int lines = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        CHECK(line[0] == '{' && line[strlen(line) - 1] == '}');
        CHECK(sscanf(line, "{\"pid\":%ld,", &pids[lines]) == 1);
        lines++;
        if (!strstr(line, "\"device\":0,"))
            continue;
        CHECK(strstr(line, "\"alloc_calls\":2,"));
        CHECK(strstr(line, "\"free_calls\":1,"));
        CHECK(strstr(line, "\"failed_allocs\":1,"));
        CHECK(strstr(line, "\"create_calls\":1,"));
        CHECK(strstr(line, "\"bytes_in_use\":4194304,"));
        CHECK(strstr(line, "\"peak_bytes_in_use\":4194304,"));
        CHECK(strstr(line, "\"live_allocations\":1,"));
        CHECK(strstr(line, "\"peak_live_allocations\":2,"));
        CHECK(strstr(line, "\"live_handles\":1,"));
        CHECK(strstr(line, "\"imported_frees\":0,"));
        CHECK(strstr(line, "\"races\":0,"));
    }
    CHECK_EQ(lines, 6);
    CHECK(pids[0] != pids[2] && pids[2] != pids[4] && pids[0] != pids[4]);
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return child();
    RUN(test_report_and_logging);
    return 0;
}
