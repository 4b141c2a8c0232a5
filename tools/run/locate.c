/* Where libtessera.so and the simulated device are, found from this executable's own location,
 * so that the same binary works from the build tree and from any installation prefix (including
 * a `meson install --destdir` tree that was moved).
 *
 *   installed:  <bindir>/tessera, <libdir>/libtessera.so, <libdir>/tessera/sim/libcuda.so.1
 *               (TS_RUN_REL_LIBDIR is libdir relative to bindir, TS_RUN_REL_SIMDIR the
 *               simulated device's directory, computed by meson)
 *   a wheel:    <env>/bin/tessera, <env>/lib/pythonX.Y/site-packages/tessera/libtessera.so and
 *               .../tessera/sim/ (the same two relative paths, pointing into the package)
 *   build tree: <build>/tools/tessera, <build>/shim/libtessera.so, <build>/tests/sim/
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

#ifndef TS_RUN_REL_LIBDIR
#define TS_RUN_REL_LIBDIR "../lib"
#endif
#ifndef TS_RUN_REL_SIMDIR
#define TS_RUN_REL_SIMDIR TS_RUN_REL_LIBDIR "/tessera/sim"
#endif

/* dir/rel/name canonicalised into out (PATH_MAX-sized); 0 when it exists. */
static int path_resolve(char *out, size_t outlen, const char *dir, const char *rel, const char *name)
{
    char joined[PATH_MAX * 2];
    int n = snprintf(joined, sizeof joined, "%s/%s/%s", dir, rel, name);
    if (n < 0 || (size_t)n >= sizeof joined)
        return -1;
    char real[PATH_MAX];
    if (!realpath(joined, real))
        return -1;
    if (strlen(real) >= outlen)
        return -1;
    strcpy(out, real);
    return 0;
}

/* The simulated device is two libraries in one directory; both must be there. */
static void sim_find(ts_run_layout *out, const char *dir, const char *rel)
{
    char lib[PATH_MAX];
    out->sim_dir[0] = '\0';
    if (path_resolve(lib, sizeof lib, dir, rel, "libcudart.so.13") != 0)
        return;
    path_resolve(out->sim_dir, sizeof out->sim_dir, dir, rel, "");
    if (path_resolve(lib, sizeof lib, dir, rel, "libcuda.so.1") != 0)
        out->sim_dir[0] = '\0';
}

int ts_run_layout_find(ts_run_layout *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(err, errlen, "cannot find this program's own location (/proc/self/exe: %s)",
                 strerror(errno));
        return -1;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) {
        snprintf(err, errlen, "cannot find this program's own location (/proc/self/exe: %s)", exe);
        return -1;
    }
    *slash = '\0';
    const char *dir = exe;

    if (path_resolve(out->library, sizeof out->library, dir, TS_RUN_REL_LIBDIR,
                     "libtessera.so") == 0) {
        sim_find(out, dir, TS_RUN_REL_SIMDIR);
    } else if (path_resolve(out->library, sizeof out->library, dir, "..",
                            "shim/libtessera.so") == 0) {
        out->build_tree = true;
        sim_find(out, dir, "../tests/sim");
    } else {
        snprintf(err, errlen,
                 "libtessera.so not found next to %s (looked in %s/%s and in a build tree at "
                 "%s/../shim)", dir, dir, TS_RUN_REL_LIBDIR, dir);
        return -1;
    }
    /* LD_PRELOAD separates entries with ':' and spaces: such a path cannot be preloaded. */
    if (strpbrk(out->library, ": \t")) {
        snprintf(err, errlen, "cannot preload %s: LD_PRELOAD cannot hold a path with ':' or spaces",
                 out->library);
        return -1;
    }
    return 0;
}
