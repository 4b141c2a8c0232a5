/* libFuzzer target: the stats page reader and every tessera-stat output over arbitrary bytes.
 *
 * Each input is parsed as is (truncated pages, foreign bytes) and, when its header declares a
 * total size up to 4 MiB, also zero-padded to that size, so that short seeds (pages with their
 * trailing zeros trimmed, see tests/fuzz/corpus/statspage/) reach slot, map and output code.
 * The same bytes also go through tessera-stat symbolize's pickle pass (no symbol tables: no file
 * is opened). Nothing may crash, hang, read out of bounds or trip a sanitizer. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "statspage/render.h"
#include "statspage/symbolize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PADDED (4u << 20)

static FILE *out;
static tessera_page_segment *segs;
static tessera_page_block *blocks;

static void render_all(ts_page *pg, int status, int owner)
{
    ts_proc_view v;
    memset(&v, 0, sizeof v);
    ts_proc_view_from_page(&v, pg, status, owner, "fuzz");
    ts_render_env env;
    memset(&env, 0, sizeof env);
    env.boot_time_s = 1700000000;
    ts_render_table(out, &v, 1, "/fuzz");
    ts_render_detail(out, &v, &env);
    ts_render_json(out, &v, 1);
    ts_render_prometheus(out, &v, 1);
    if (status == TS_PAGE_OK) {
        tessera_page_slot_head head;
        for (uint32_t i = 0; i < pg->hdr.slot_count; i++) {
            if (ts_page_snapshot(pg, i, &head, segs, blocks) != TS_PAGE_OK)
                continue;
            ts_render_map(out, &v, &head, segs, blocks, 64);
            ts_render_map(out, &v, &head, segs, blocks, 8);
        }
    }
    ts_proc_view_free(&v);
}

static void parse_and_render(const uint8_t *buf, size_t len)
{
    ts_page pg;
    int status = ts_page_parse(&pg, buf, len);
    char why[256];
    (void)why;
    render_all(&pg, status, TS_OWNER_LIVE);
    render_all(&pg, status, TS_OWNER_DEAD);
    ts_page_close(&pg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!out) {
        out = fopen("/dev/null", "w");
        segs = calloc(TESSERA_PAGE_MAX_SEGMENTS, sizeof *segs);
        blocks = calloc(TESSERA_PAGE_MAX_BLOCKS, sizeof *blocks);
        if (!out || !segs || !blocks)
            abort();
    }
    parse_and_render(data, size);
    unsigned char *sym_out = NULL;
    size_t sym_len = 0;
    char err[256];
    (void)ts_snap_symbolize(data, size, NULL, &sym_out, &sym_len, NULL, err, sizeof err);
    free(sym_out);

    if (size >= 32) {
        uint64_t total;
        memcpy(&total, data + 24, sizeof total);
        if (total > size && total <= MAX_PADDED) {
            uint8_t *padded = calloc(1, (size_t)total);
            if (padded) {
                memcpy(padded, data, size);
                parse_and_render(padded, (size_t)total);
                free(padded);
            }
        }
    }
    return 0;
}
