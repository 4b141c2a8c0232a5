/* tessera run: start a program with libtessera.so preloaded (tools/run/).
 *
 * main.c            arguments, the environment the program gets, fork/exec, signal forwarding,
 *                   status
 * locate.c          where libtessera.so and the simulated device live, relative to this
 *                   executable
 * summary.c         the per-device summary read back from the program's stats pages
 * static_runtime.c  whether a program carries NVIDIA's static runtime (--sim cannot run it)
 *
 * Never writes to stdout: the program's stdout is the user's. Every line on stderr starts with
 * "tessera:".
 */
#ifndef TS_RUN_H
#define TS_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Exit status of tessera run's own failures (usage, configuration, set-up), as env(1) does: a
 * wrapper's own failure must not look like one of the program's statuses (2 included). */
#define TS_RUN_EXIT_FAILURE 125
#define TS_RUN_EXIT_CANNOT_EXEC 126
#define TS_RUN_EXIT_NOT_FOUND 127

/* Where the pieces are. Paths are absolute and canonical; sim_dir is "" when this layout has no
 * simulated device (an installation built without tests). */
typedef struct ts_run_layout {
    char library[4096];  /* libtessera.so */
    char sim_dir[4096];  /* directory holding the simulated libcuda.so.1 and libcudart.so.13 */
    bool build_tree;     /* found in a meson build directory (else an installation) */
} ts_run_layout;

/* Fill *out from the location of this executable. Returns 0, or -1 with a one-line reason (no
 * "tessera: " prefix) in err. */
int ts_run_layout_find(ts_run_layout *out, char *err, size_t errlen);

/* Is argv0 (as execvp would find it; its path into path) a program built with NVIDIA's static
 * CUDA runtime? */
bool ts_run_static_cudart(const char *argv0, char *path, size_t len);

/* Print the summary of every stats page in dir to f. Returns the number of pages summarised. */
int ts_run_summary_print(FILE *f, const char *dir);

/* Remove the page files of dir, then dir itself. Returns 0, or an errno value (err says what
 * was left). */
int ts_run_summary_cleanup(const char *dir, char *err, size_t errlen);

#endif
