/* fork with CUDA initialised: the child exits normally (running atexit handlers) without using
 * CUDA; the parent then pauses so the test can check that its stats page survived, and carries
 * on allocating and verifying. */
#include <sys/wait.h>

#include "probe_common.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *a;
    CHECK(cudaMalloc(&a, (size_t)8 << 20));
    if (!fill_check(a, (size_t)8 << 20, 0x5a))
        return 3;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        usleep(50 * 1000);
        exit(0); /* atexit handlers run here: tessera's must leave the parent's page alone */
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child %d exited %d\n", (int)child, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    wait_for_go("CHILD_DONE");
    void *b;
    CHECK(cudaMalloc(&b, (size_t)8 << 20));
    int ok = fill_check(b, (size_t)8 << 20, 0xa5) && fill_check(a, (size_t)8 << 20, 0x11);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("RESULT status=%s child=%d\n", ok ? "ok" : "corrupt", (int)child);
    return ok ? 0 : 3;
}
