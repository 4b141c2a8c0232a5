/* The summary `tessera run --summary` prints at exit: per process and device, the numbers that
 * say what tessera did, each followed by the stats-page counter it comes from, so that a reader
 * can find the same value in `tessera-stat --json` or Prometheus.
 *
 * The pages are the program's own, linked by each process of the run into a private directory
 * as it created them (TESSERA_SUMMARY_DIR, statspage/writer.c), so they are read after the
 * processes removed them from the page directory; they go through the same validating reader as
 * tessera-stat: a page that does not validate is reported, never trusted.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "statspage/collect.h"
#include "statspage/render.h"
#include "run.h"

static void slot_print(FILE *f, const tessera_page_slot_head *h)
{
    const tessera_device_stats *s = &h->stats;
    char peak_alloc[32], peak_reserved[32];
    int64_t alloc = s->allocated_bytes[TESSERA_POOL_ALL].peak;
    int64_t reserved = s->reserved_bytes[TESSERA_POOL_ALL].peak;
    ts_format_bytes(peak_alloc, sizeof peak_alloc, alloc > 0 ? (uint64_t)alloc : 0);
    ts_format_bytes(peak_reserved, sizeof peak_reserved, reserved > 0 ? (uint64_t)reserved : 0);
    fprintf(f, "tessera:   device %d\n", (int)h->device);
    fprintf(f, "tessera:     peak allocated      %12" PRId64 " B  %-11s (allocated_bytes.all.peak)\n",
            alloc, peak_alloc);
    fprintf(f, "tessera:     peak reserved       %12" PRId64 " B  %-11s (reserved_bytes.all.peak)\n",
            reserved, peak_reserved);
    /* how far the peak was from the floor (what the program held at its peak) */
    ts_floor fl = ts_floor_of(s);
    if (fl.state == TS_FLOOR_OK) {
        char above[32];
        ts_format_bytes(above, sizeof above, (uint64_t)fl.above);
        fprintf(f, "tessera:     above the floor     %12" PRId64 " B  %-11s +%.1f %% of peak "
                   "allocated (reserved_bytes.all.peak - allocated_bytes.all.peak)\n",
                fl.above, above, fl.percent);
    }
    if (reserved > 0)
        fprintf(f, "tessera:     utilization         %11.1f %%               "
                "(allocated_bytes.all.peak / reserved_bytes.all.peak)\n",
                100.0 * (double)alloc / (double)reserved);
    else
        fprintf(f, "tessera:     utilization                  -               "
                "(nothing was reserved)\n");
    fprintf(f, "tessera:     allocations served  %12" PRId64 "                 (num_alloc_calls)\n",
            s->num_alloc_calls);
    fprintf(f, "tessera:     frees served        %12" PRId64 "                 (num_free_calls)\n",
            s->num_free_calls);
    /* The counters by their own names: "driver calls" means every driver call for memory
     * (tessera-replay's drv calls column), which a live page does not count; these two are the
     * replay's dev alloc and dev free columns. */
    fprintf(f, "tessera:     device allocations  %12" PRId64 "                 (num_device_alloc)\n",
            s->num_device_alloc);
    fprintf(f, "tessera:     device frees        %12" PRId64 "                 (num_device_free)\n",
            s->num_device_free);
    fprintf(f, "tessera:     stitches            %12" PRId64 "                 (num_stitches)\n",
            s->num_stitches);
    fprintf(f, "tessera:     retries             %12" PRId64 "                 (num_alloc_retries)\n",
            s->num_alloc_retries);
    fprintf(f, "tessera:     out of memory       %12" PRId64 "                 (num_ooms)\n",
            s->num_ooms);
    if (s->num_host_alloc_calls > 0) { /* pinned host memory, only for programs that used it */
        fprintf(f, "tessera:     pinned host served  %12" PRId64
                   "                 (num_host_alloc_calls)\n", s->num_host_alloc_calls);
        fprintf(f, "tessera:     pinned host pinned  %12" PRId64
                   "                 (num_host_alloc)\n", s->num_host_alloc);
    }
}

static void view_print(FILE *f, const ts_proc_view *v)
{
    if (v->status != TS_PAGE_OK) {
        fprintf(f, "tessera: summary of pid %d: unreadable stats page (%s): %s\n", v->pid,
                ts_page_status_name(v->status), v->error);
        return;
    }
    /* the command line comes from a page a program wrote: print it bounded and printable */
    char cmd[96];
    size_t i = 0;
    for (; i < sizeof cmd - 1 && v->hdr.cmdline[i]; i++) {
        unsigned char c = (unsigned char)v->hdr.cmdline[i];
        cmd[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    cmd[i] = '\0';
    fprintf(f, "tessera: summary of pid %d (%s%s)\n", v->pid, cmd,
            v->hdr.cmdline[i] ? "..." : "");
    uint32_t shown = 0;
    for (uint32_t k = 0; k < v->nslots; k++) {
        const ts_slot_view *sv = &v->slots[k];
        if (sv->status == TS_PAGE_OK) {
            slot_print(f, &sv->head);
            shown++;
        } else if (sv->status != TS_PAGE_EEMPTY) {
            fprintf(f, "tessera:   slot %u unreadable (%s): %s\n", sv->index,
                    ts_page_status_name(sv->status), sv->error);
        }
    }
    if (!shown)
        fprintf(f, "tessera:   no device was used through tessera\n");
}

int ts_run_summary_print(FILE *f, const char *dir)
{
    int *pids = NULL;
    size_t n = 0;
    int rc = ts_page_list(dir, &pids, &n);
    if (rc != 0) {
        fprintf(f, "tessera: summary: cannot read %s: %s\n", dir, strerror(rc));
        return 0;
    }
    if (n == 0)
        fprintf(f, "tessera: summary: no stats page was written: the program made no CUDA "
                   "allocation through tessera\n");
    for (size_t i = 0; i < n; i++) {
        ts_proc_view v;
        ts_proc_view_load(&v, dir, pids[i], false);
        view_print(f, &v);
        ts_proc_view_free(&v);
    }
    free(pids);
    return (int)n;
}

int ts_run_summary_cleanup(const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot read %s: %s", dir, strerror(errno));
        return errno;
    }
    struct dirent *e;
    /* only tessera's page files (and the names ts_page_gc renames them to) are removed: the
     * directory is private to this run, but anything else in it is left for the user to see */
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, TESSERA_PAGE_FILE_PREFIX, strlen(TESSERA_PAGE_FILE_PREFIX)) == 0 ||
            strncmp(e->d_name, ".tessera.", 9) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    if (rmdir(dir) != 0) {
        int saved = errno;
        snprintf(err, errlen, "left %s in place: %s", dir, strerror(saved));
        return saved;
    }
    return 0;
}
