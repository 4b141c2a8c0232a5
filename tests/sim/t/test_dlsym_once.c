/* The runtime reaches the driver like the real cudart: exactly one dlsym on the libcuda
 * handle (cuGetProcAddress_v2), the probe, cuInit at 2000, the self-lookups at 11030 and
 * 12000, and every other lookup through the pointer the 12000 self-lookup returned.
 * Runs with LD_PRELOAD=<dlsym probe>, which wraps cuGetProcAddress like a shim would. */
#include <string.h>

#include "rt.h"

struct tsim_probe_call {
    int via;
    char symbol[64];
    int version;
    unsigned long long flags;
};

struct tsim_probe_log {
    int ndlsym;
    char dlsym_names[8][64];
    int ncalls;
    struct tsim_probe_call calls[1024];
};

typedef const struct tsim_probe_log *(*log_fn)(void);

static int find(const struct tsim_probe_log *l, int via, const char *sym, int ver, unsigned long long flags)
{
    for (int i = 0; i < l->ncalls; i++)
        if (l->calls[i].via == via && strcmp(l->calls[i].symbol, sym) == 0 &&
            l->calls[i].version == ver && l->calls[i].flags == flags)
            return i;
    return -1;
}

static void test_one_dlsym(void)
{
    log_fn get = (log_fn)dlsym(RTLD_DEFAULT, "tsim_probe_log");
    CHECK(get != NULL); /* run under LD_PRELOAD=libtsim-dlsym-probe.so */
    const struct tsim_probe_log *l = get();
    CHECK_EQ(l->ndlsym, 0); /* nothing before the first runtime call */

    void *p;
    RT(cudaMalloc(&p, 1000));
    RT(cudaFree(p));
    CHECK_EQ(rt_counters(0).alloc_calls, 1); /* it went through the hooked table */

    CHECK_EQ(l->ndlsym, 1);
    CHECK(strcmp(l->dlsym_names[0], "cuGetProcAddress_v2") == 0);
    CHECK(l->ncalls > 40);
    /* the opening sequence, through the dlsym'd pointer */
    CHECK(l->calls[0].via == 0 && l->calls[0].symbol[0] == 0 && l->calls[0].version == 0 &&
          l->calls[0].flags == 0);
    CHECK(l->calls[1].via == 0 && strcmp(l->calls[1].symbol, "cuInit") == 0 &&
          l->calls[1].version == 2000);
    CHECK(l->calls[2].via == 0 && strcmp(l->calls[2].symbol, "cuGetProcAddress") == 0 &&
          l->calls[2].version == 11030);
    CHECK(l->calls[3].via == 0 && strcmp(l->calls[3].symbol, "cuGetProcAddress") == 0 &&
          l->calls[3].version == 12000);
    /* everything after it through the 12000 pointer */
    for (int i = 4; i < l->ncalls; i++) {
        if (l->calls[i].via != 2)
            fprintf(stderr, "call %d (%s) via %d\n", i, l->calls[i].symbol, l->calls[i].via);
        CHECK_EQ(l->calls[i].via, 2);
    }
    CHECK(find(l, 2, "cuMemAlloc", 3020, 0) > 0);
    CHECK(find(l, 2, "cuMemFree", 3020, 0) > 0);
    CHECK(find(l, 2, "cuMemGetInfo", 3020, 0) > 0);
    CHECK(find(l, 2, "cuMemAllocAsync", 11020, 0) > 0);
    CHECK(find(l, 2, "cuMemAllocAsync", 11020, 2) > 0);
    CHECK(find(l, 2, "cuMemFreeAsync", 11020, 0) > 0);
    CHECK(find(l, 2, "cuMemFreeAsync", 11020, 2) > 0);
    CHECK(find(l, 2, "cuCtxSynchronize", 13000, 0) > 0);

    /* cudaGetDriverEntryPoint* goes through the same (wrapped) pointer */
    int before = l->ncalls;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult qs;
    RT(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &qs));
    CHECK(fn != NULL);
    CHECK_EQ(l->ncalls, before + 1);
    CHECK(find(l, 2, "cuMemCreate", 12000, 0) >= before);
    CHECK_EQ(l->ndlsym, 1); /* still the only dlsym */
}

int main(void)
{
    alarm(60);
    RUN(test_one_dlsym);
    return 0;
}
