/* A CUDA process the test drives line by line over stdin/stdout, to share memory with others of
 * its kind over CUDA IPC: one command, one answer line. Blocks (allocated or imported) are
 * numbered in the order they were made.
 *
 *   alloc SIZE            ok IDX 0xADDR | err ERROR
 *   free IDX              free ERROR
 *   export IDX            handle HEX | export ERROR
 *   open HEX              open ERROR IDX   (IDX -1 on failure)
 *   close IDX             close ERROR
 *   fill IDX BYTE         fill ERROR       (every byte of the block)
 *   check IDX BYTE        check 1|0        (every byte of the block is BYTE)
 *   addr IDX              addr 0xADDR
 *   reuse SIZE ADDR N     reuse 1|0 TRIES  (allocate SIZE, free it, until it lands at ADDR, up
 *                                           to N tries 1 ms apart: a held block given back)
 *   allocs N SIZE         allocs A1,...,AN FIRST  (N blocks of SIZE; their addresses, 0x0 for a
 *                                           failed one; FIRST: the index of the first)
 *   reset                 reset ERROR      (cudaDeviceReset: every block is gone)
 *   capture begin|end     capture ERROR    (a stream capture begun on a stream of its own, or
 *                                           ended and its graph destroyed)
 *   fds                   fds N            (descriptors open here, the simulator's not counted)
 *   files                 files N          (how many more files it can open: each closed after)
 *   stdio                 stdio 1|0        (descriptors 0, 1 and 2 are still open)
 *   sockets               sockets N        (every socket closed, as a program that closes
 *                                           descriptors it does not know may: N of them)
 *   fork                  child PID FDS    (a child that lives on, without exec, until killed
 *                                           or for 2 minutes;
 *                                           FDS: its descriptors, as `fds` counts them)
 *   meminfo               meminfo FREE TOTAL  (cudaMemGetInfo)
 *   pause | resume        pause N | resume N  (tessera_pause or tessera_resume called on this
 *                                           process itself: its status, -1 without tessera)
 *   quit                  (exits 0)
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <time.h>

#include "probe_common.h"

#define MAX_BLOCKS 256

static void *blocks[MAX_BLOCKS];
static size_t sizes[MAX_BLOCKS];
static int nblocks;

static int add(void *p, size_t size)
{
    if (nblocks == MAX_BLOCKS)
        return -1;
    blocks[nblocks] = p;
    sizes[nblocks] = size;
    return nblocks++;
}

static int block_of(const char *arg)
{
    int i = atoi(arg);
    return i >= 0 && i < nblocks ? i : -1;
}

/* The descriptors open in this process whose link starts with prefix (with prefix NULL: all
 * but the simulated driver's memory, a memfd per device and per imported handle while it is
 * mapped: what a real driver keeps behind its own): how many, and up to max of them in fds. */
static int fds_of(const char *prefix, int *fds, int max)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], link[256];
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        link[k > 0 ? k : 0] = '\0';
        if (prefix ? strncmp(link, prefix, strlen(prefix)) != 0
                   : strncmp(link, "/memfd:tessera-sim", 18) == 0)
            continue;
        if (n < max)
            fds[n] = atoi(e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static int count_fds(void)
{
    return fds_of(NULL, NULL, 0);
}

/* Close every socket of this process (the program's stdin and stdout are pipes); how many. */
static int close_sockets(void)
{
    int fds[256], n = fds_of("socket:", fds, 256);
    for (int i = 0; i < n && i < 256; i++)
        close(fds[i]);
    return n;
}

static int more_files(void)
{
    int fds[1 << 16], n = 0;
    while (n < (int)(sizeof fds / sizeof fds[0])) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        fds[n++] = fd;
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return n;
}

static const char *err(cudaError_t e)
{
    (void)cudaGetLastError();
    return cudaGetErrorName(e);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    char line[512], cmd[32], a1[300], a2[64], a3[64];
    while (fgets(line, sizeof line, stdin)) {
        a1[0] = a2[0] = a3[0] = '\0';
        if (sscanf(line, "%31s %299s %63s %63s", cmd, a1, a2, a3) < 1)
            continue;
        int i = block_of(a1);
        if (!strcmp(cmd, "alloc")) {
            void *p = NULL;
            size_t size = strtoull(a1, NULL, 0);
            cudaError_t e = cudaMalloc(&p, size);
            if (e == cudaSuccess)
                printf("ok %d %p\n", add(p, size), p);
            else
                printf("err %s\n", err(e));
        } else if (!strcmp(cmd, "free")) {
            printf("free %s\n", i < 0 ? "bad-index" : err(cudaFree(blocks[i])));
        } else if (!strcmp(cmd, "export")) {
            cudaIpcMemHandle_t h;
            cudaError_t e = i < 0 ? cudaErrorInvalidValue : cudaIpcGetMemHandle(&h, blocks[i]);
            char hx[2 * sizeof h + 1];
            if (e == cudaSuccess) {
                hex(&h, sizeof h, hx);
                printf("handle %s\n", hx);
            } else {
                printf("export %s\n", err(e));
            }
        } else if (!strcmp(cmd, "open")) {
            cudaIpcMemHandle_t h;
            void *p = NULL;
            cudaError_t e = unhex(a1, &h, sizeof h) != 0
                                ? cudaErrorInvalidValue
                                : cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
            size_t size;
            memcpy(&size, h.reserved + 40, sizeof size); /* tessera's handle says the size */
            printf("open %s %d\n", err(e), e == cudaSuccess ? add(p, size) : -1);
        } else if (!strcmp(cmd, "close")) {
            printf("close %s\n", i < 0 ? "bad-index" : err(cudaIpcCloseMemHandle(blocks[i])));
        } else if (!strcmp(cmd, "fill")) {
            unsigned v = (unsigned)strtoul(a2, NULL, 0);
            printf("fill %s\n", i < 0 ? "bad-index" : err(cudaMemset(blocks[i], (int)v, sizes[i])));
        } else if (!strcmp(cmd, "check")) {
            unsigned v = (unsigned)strtoul(a2, NULL, 0);
            unsigned char *h = i < 0 ? NULL : malloc(sizes[i]);
            int ok = h && cudaMemcpy(h, blocks[i], sizes[i], cudaMemcpyDeviceToHost) == cudaSuccess;
            for (size_t k = 0; ok && k < sizes[i]; k++)
                ok = h[k] == v;
            free(h);
            (void)cudaGetLastError();
            printf("check %d\n", ok);
        } else if (!strcmp(cmd, "addr")) {
            printf("addr %p\n", i < 0 ? NULL : blocks[i]);
        } else if (!strcmp(cmd, "reuse")) {
            size_t size = strtoull(a1, NULL, 0);
            void *want = (void *)(uintptr_t)strtoull(a2, NULL, 0);
            int tries = atoi(a3), k = 0, hit = 0;
            while (k < tries && !hit) {
                void *p = NULL;
                k++;
                if (cudaMalloc(&p, size) != cudaSuccess)
                    break;
                hit = p == want;
                CHECK(cudaFree(p));
                if (!hit)
                    nanosleep(&(struct timespec){0, 1000000}, NULL);
            }
            printf("reuse %d %d\n", hit, k);
        } else if (!strcmp(cmd, "capture")) {
            static cudaStream_t cs;
            static cudaGraph_t g;
            cudaError_t e = cudaSuccess;
            if (!cs)
                e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
            if (e == cudaSuccess && !strcmp(a1, "begin"))
                e = cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed);
            else if (e == cudaSuccess && (e = cudaStreamEndCapture(cs, &g)) == cudaSuccess)
                e = cudaGraphDestroy(g);
            printf("capture %s\n", err(e));
        } else if (!strcmp(cmd, "fds")) {
            printf("fds %d\n", count_fds());
        } else if (!strcmp(cmd, "files")) {
            printf("files %d\n", more_files());
        } else if (!strcmp(cmd, "sockets")) {
            printf("sockets %d\n", close_sockets());
        } else if (!strcmp(cmd, "stdio")) {
            printf("stdio %d\n", fcntl(0, F_GETFD) >= 0 && fcntl(1, F_GETFD) >= 0 &&
                                     fcntl(2, F_GETFD) >= 0);
        } else if (!strcmp(cmd, "allocs")) {
            int count = atoi(a1), first = nblocks;
            size_t size = strtoull(a2, NULL, 0);
            printf("allocs");
            for (int k = 0; k < count; k++) {
                void *p = NULL;
                cudaError_t e = cudaMalloc(&p, size);
                printf("%s%p", k ? "," : " ", e == cudaSuccess && add(p, size) >= 0 ? p : NULL);
            }
            printf(" %d\n", first);
        } else if (!strcmp(cmd, "reset")) {
            printf("reset %s\n", err(cudaDeviceReset()));
            nblocks = 0; /* every block went with the context */
        } else if (!strcmp(cmd, "fork")) {
            /* a child that lives on without exec (the answer is the child's) */
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                printf("child %d %d\n", (int)getpid(), count_fds());
                fflush(stdout);
                sleep(120); /* killed by the test; gone in any case if a test died first */
                _exit(0);
            }
            if (pid < 0)
                printf("child -1 -1\n");
        } else if (!strcmp(cmd, "meminfo")) {
            size_t fr = 0, total = 0;
            cudaError_t e = cudaMemGetInfo(&fr, &total);
            printf("meminfo %zu %zu\n", e == cudaSuccess ? fr : 0, e == cudaSuccess ? total : 0);
        } else if (!strcmp(cmd, "pause") || !strcmp(cmd, "resume")) {
            int (*f)(void) = (int (*)(void))dlsym(
                RTLD_DEFAULT, !strcmp(cmd, "pause") ? "tessera_pause" : "tessera_resume");
            printf("%s %d\n", cmd, f ? f() : -1);
        } else if (!strcmp(cmd, "quit")) {
            return 0;
        } else {
            printf("unknown %s\n", cmd);
        }
    }
    return 0;
}
