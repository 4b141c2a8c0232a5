/* Shared helpers for the configuration tests. */
#ifndef TS_TEST_CONFIG_HELPERS_H
#define TS_TEST_CONFIG_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"

#define MiB ((size_t)1 << 20)
#define STRICT_VAR "TESSERA_ALLOC_CONF"
#define LENIENT_VAR "PYTORCH_CUDA_ALLOC_CONF"

/* Everything the warn callback received. */
typedef struct warnings {
    unsigned count;    /* all messages */
    unsigned problems; /* messages ending in "; ignored" */
    char msg[16][512];
} warnings;

void collect_warning(void *user, const char *message);

/* Strict parse of text that must be valid; also checks that the lenient parse agrees and reports
 * no problem. Returns false (after printing why) otherwise. */
bool parse_ok(const char *text, ts_config *out);

/* Strict parse of text that must fail with "TESSERA_ALLOC_CONF: <tail>" (tail NULL: any message)
 * and leave *out untouched; and the lenient parse must report "PYTORCH_CUDA_ALLOC_CONF: <tail>;
 * ignored" as its first problem. *lenient_out (if not NULL) receives the lenient result. */
bool parse_error(const char *text, const char *tail, ts_config *lenient_out);

/* Lenient parse with the warnings collected. */
void parse_lenient(const char *text, ts_config *out, warnings *w);

int run_value_tests(void);
int run_syntax_tests(void);
int run_format_tests(void);

/* tessera's default: what no configuration (or one that names no policy key) gives, PyTorch's
 * table values with defragment, coarse handles and stitching under pressure. */
static inline void tessera_default(ts_config *c)
{
    ts_config_defaults(c);
    c->defragment = c->expandable_segments = c->stitching = true;
    c->stitch_when = TS_STITCH_PRESSURE;
    c->handle_policy = TS_HANDLES_COARSE; /* defragment's */
    c->growth_batch = c->large_segment_size; /* coarse handles': a whole one */
    c->expandable_page = 2 * MiB; /* defragment's page before a device is known */
}

#endif
