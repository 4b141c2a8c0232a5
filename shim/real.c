/* The real symbols: glibc's dlsym, the driver's entry points, and the routing table that maps a
 * real driver function pointer to tessera's hook by identity.
 *
 * Routing by identity (not by name) is what keeps ABI versions apart: each hook is registered
 * with the exact pointers the driver returns for the ABI it implements (the exported versioned
 * name, and cuGetProcAddress at that hook's cudaVersion, with and without the per-thread flag),
 * so a request for another ABI (cuMemAlloc at 2000 is the 32-bit v1) or a _ptsz variant never
 * gets the wrong hook.
 */
#include <dlfcn.h>
#include <sched.h>
#include <string.h>

#include "shim/shim.h"

TS_HIDDEN ts_real_driver ts_real;

static __thread ts_tls tls_state __attribute__((tls_model("initial-exec")));

ts_tls *ts_tls_get(void)
{
    return &tls_state;
}

/* --- dlsym ----------------------------------------------------------------------------------- */

void *ts_dlsym_glibc;

void *ts_dlsym_resolve(void)
{
    void *f = __atomic_load_n(&ts_dlsym_glibc, __ATOMIC_ACQUIRE);
    if (f)
        return f;
    /* Never plain dlsym: it would resolve to our own interposer. The versions glibc has given
     * dlsym on the architectures tessera builds for, newest first. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !f && i < sizeof versions / sizeof versions[0]; i++)
        f = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (f)
        __atomic_store_n(&ts_dlsym_glibc, f, __ATOMIC_RELEASE);
    return f;
}

void *ts_real_dlsym(void *handle, const char *name)
{
    void *(*f)(void *, const char *) = (void *(*)(void *, const char *))ts_dlsym_resolve();
    return f ? f(handle, name) : NULL;
}

/* --- routing --------------------------------------------------------------------------------- */

#define ROUTE_MAX 512 /* three aliases (by name, by cuGetProcAddress, legacy) per hook */

typedef struct route {
    void *real;
    void *hook;
} route;

static route routes[ROUTE_MAX];
static size_t nroutes; /* written before init_state becomes DONE; read only after */

static void route_add(void *real, void *hook)
{
    if (!real || real == hook)
        return;
    for (size_t i = 0; i < nroutes; i++)
        if (routes[i].real == real)
            return;
    if (nroutes < ROUTE_MAX)
        routes[nroutes++] = (route){real, hook};
    else /* a hook list grown past the table: that alias would reach the driver unhooked */
        ts_log_once(routes, "internal: the routing table is full (%d): raise ROUTE_MAX",
                    ROUTE_MAX);
}

enum { INIT_NONE = 0, INIT_RUNNING = 1, INIT_DONE = 2 };
static int init_state;
static bool driver_ok;

void *ts_route(void *fn)
{
    if (!fn || __atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
        return fn;
    for (size_t i = 0; i < nroutes; i++)
        if (routes[i].real == fn)
            return routes[i].hook;
    return fn;
}

void ts_real_note_gpa(void *fn, bool v2)
{
    void **slot = v2 ? (void **)&ts_real.cuGetProcAddress_v2 : (void **)&ts_real.cuGetProcAddress_v1;
    void *expected = NULL;
    __atomic_compare_exchange_n(slot, &expected, fn, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* --- initialisation ---------------------------------------------------------------------------- */

#define RESOLVE(h, name) (ts_real.name = (__typeof__(ts_real.name))ts_real_dlsym((h), #name))

static bool driver_resolve(bool load, const ts_driver_hooks *hooks)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h && load)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return false;

    void *gpa2 = ts_real_dlsym(h, "cuGetProcAddress_v2");
    void *gpa1 = ts_real_dlsym(h, "cuGetProcAddress");
    if (gpa2)
        __atomic_store_n((void **)&ts_real.cuGetProcAddress_v2, gpa2, __ATOMIC_RELEASE);
    if (gpa1)
        __atomic_store_n((void **)&ts_real.cuGetProcAddress_v1, gpa1, __ATOMIC_RELEASE);

    /* The entry points tessera only calls. */
#define TS_DRIVER_REAL(name, ret, params) RESOLVE(h, name);
#include "shim/hooks.def"

    /* The hooked entry points: real pointer into ts_real, every alias into the routes. */
    const ts_hook_entry *t = hooks->table;
    for (size_t i = 0; i < hooks->n; i++) {
        void *by_name = ts_real_dlsym(h, t[i].export);
        void *by_gpa = NULL, *by_gpa_legacy = NULL;
        if (gpa2) {
            ts_gpa_v2_fn g = (ts_gpa_v2_fn)gpa2;
            CUdriverProcAddressQueryResult st;
            cuuint64_t flags = t[i].ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                         : CU_GET_PROC_ADDRESS_DEFAULT;
            if (g(t[i].symbol, &by_gpa, t[i].version, flags, &st) != CUDA_SUCCESS)
                by_gpa = NULL;
            if (!t[i].ptsz &&
                g(t[i].symbol, &by_gpa_legacy, t[i].version, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                  &st) != CUDA_SUCCESS)
                by_gpa_legacy = NULL;
        }
        void *real = by_name ? by_name : by_gpa;
        if (t[i].real && !*t[i].real)
            *t[i].real = real;
        route_add(by_name, t[i].hook);
        route_add(by_gpa, t[i].hook);
        route_add(by_gpa_legacy, t[i].hook);
    }
    /* The exported cuGetProcAddress symbols route to our wrappers too. */
    route_add(gpa2, hooks->gpa_v2);
    route_add(gpa1, hooks->gpa_v1);
    return ts_real.cuMemAlloc_v2 && ts_real.cuMemFree_v2 && ts_real.cuMemGetInfo_v2 &&
           ts_real.cuCtxGetCurrent && ts_real.cuCtxGetDevice;
}

bool ts_real_init(bool load, bool wait, const ts_driver_hooks *hooks)
{
    int st = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
    if (st == INIT_DONE)
        return driver_ok;
    ts_tls *tl = ts_tls_get();
    if (tl->in_init)
        return false; /* called back from inside our own initialisation */
    int expected = INIT_NONE;
    if (__atomic_compare_exchange_n(&init_state, &expected, INIT_RUNNING, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        tl->in_init = true;
        tl->depth++;
        bool ok = driver_resolve(load, hooks);
        tl->depth--;
        tl->in_init = false;
        if (!ok && !load && !ts_real.cuMemAlloc_v2) {
            /* libcuda is not loaded yet: try again later, when someone needs it */
            memset(routes, 0, sizeof routes);
            nroutes = 0;
            __atomic_store_n(&init_state, INIT_NONE, __ATOMIC_RELEASE);
            return false;
        }
        driver_ok = ok;
        __atomic_store_n(&init_state, INIT_DONE, __ATOMIC_RELEASE);
        return ok;
    }
    if (!wait)
        return false;
    /* Another thread is resolving: it only calls dlopen/dlsym and cuGetProcAddress, so this
     * wait is short. Callers that might hold the loader lock pass wait = false. */
    while (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == INIT_RUNNING)
        sched_yield();
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == INIT_NONE)
        return ts_real_init(load, wait, hooks);
    return driver_ok;
}

bool ts_driver_ready(void)
{
    return __atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == INIT_DONE && driver_ok;
}
