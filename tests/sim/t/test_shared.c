/* TESSERA_SIM_SHARED: processes naming the same pool share each device's memory. A holder
 * process (this binary, "hold KIND MIB") allocates and waits; the test process sees its pages
 * gone from cuMemGetInfo, is refused what no longer fits, and gets them back when the holder
 * exits, is killed, or frees. Each process keeps its own counters. */
#include "drv.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

struct holder {
    pid_t pid;
    int to, from; /* its stdin (close: free and exit), its stdout ("ready") */
};

/* hold: allocate mib MiB with cuMemAlloc ("alloc") or cuMemCreate ("create"), say "ready",
 * wait for stdin to close, free, exit 0 */
static int hold(const char *kind, long mib)
{
    drv_setup(0);
    size_t bytes = (size_t)mib * MiB;
    CUdeviceptr p = 0;
    CUmemGenericAllocationHandle h = 0;
    if (strcmp(kind, "alloc") == 0) {
        CU(cuMemAlloc(&p, bytes));
    } else {
        CUmemAllocationProp prop = drv_vmm_prop(0);
        CU(cuMemCreate(&h, bytes, &prop, 0));
    }
    printf("ready %llu\n", (unsigned long long)counters(0).bytes_in_use);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    if (p)
        CU(cuMemFree(p));
    else
        CU(cuMemRelease(h));
    return 0;
}

static struct holder start_holder(const char *kind, long mib, const char *memory)
{
    int in[2], out[2];
    /* close-on-exec: the holder keeps only its ends, as 0 and 1 (dup2 clears the flag) */
    CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    char arg[32];
    snprintf(arg, sizeof arg, "%ld", mib);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        if (memory)
            setenv("TESSERA_SIM_MEMORY", memory, 1);
        execl("/proc/self/exe", "sim-test-shared", "hold", kind, arg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    struct holder hd = {pid, in[1], out[0]};
    char line[64] = {0};
    ssize_t n = read(hd.from, line, sizeof line - 1);
    CHECK(n > 0 && strncmp(line, "ready ", 6) == 0);
    /* its own counters: its pages, none of the others' */
    CHECK_EQ(strtoull(line + 6, NULL, 10), (unsigned long long)mib * MiB);
    return hd;
}

static int stop_holder(struct holder *hd, bool kill_it)
{
    if (kill_it)
        kill(hd->pid, SIGKILL);
    close(hd->to);
    close(hd->from);
    int st;
    CHECK(waitpid(hd->pid, &st, 0) == hd->pid);
    return st;
}

static size_t free_bytes(void)
{
    size_t f, t;
    CU(cuMemGetInfo(&f, &t));
    CHECK_EQ(t, GiB);
    return f;
}

static void test_pages_are_shared(void)
{
    CHECK_EQ(free_bytes(), GiB);
    struct holder a = start_holder("alloc", 600, NULL);
    CHECK_EQ(free_bytes(), GiB - 600 * MiB);
    CUdeviceptr p;
    EXPECT(cuMemAlloc(&p, 500 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CU(cuMemAlloc(&p, 400 * MiB));
    CHECK_EQ(free_bytes(), GiB - 1000 * MiB);
    CHECK_EQ(counters(0).bytes_in_use, 400 * MiB); /* this process's own */
    CHECK_EQ(stop_holder(&a, false), 0); /* it frees and exits */
    CHECK_EQ(free_bytes(), GiB - 400 * MiB);
    CU(cuMemFree(p));
    CHECK_EQ(free_bytes(), GiB);
}

static void test_create_counts_and_death_gives_back(void)
{
    struct holder a = start_holder("create", 512, NULL);
    CHECK_EQ(free_bytes(), GiB - 512 * MiB);
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop = drv_vmm_prop(0);
    EXPECT(cuMemCreate(&h, 514 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    int st = stop_holder(&a, true); /* killed while holding: its pages come back */
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(free_bytes(), GiB);
    CU(cuMemCreate(&h, 514 * MiB, &prop, 0));
    CU(cuMemRelease(h));
}

static void test_first_process_sets_the_size(void)
{
    /* a later process asking for another size gets the pool's */
    struct holder a = start_holder("alloc", 100, "4G");
    CHECK_EQ(free_bytes(), GiB - 100 * MiB);
    CHECK_EQ(stop_holder(&a, false), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "hold") == 0)
        return hold(argv[2], atol(argv[3]));
    alarm(60);
    char name[64];
    snprintf(name, sizeof name, "test-%d", (int)getpid());
    setenv("TESSERA_SIM_SHARED", name, 1);
    drv_setup(0);
    RUN(test_pages_are_shared);
    RUN(test_create_counts_and_death_gives_back);
    RUN(test_first_process_sets_the_size);
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/tessera-sim.%s", name);
    unlink(path);
    return 0;
}
