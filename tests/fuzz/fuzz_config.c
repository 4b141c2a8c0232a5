/* Fuzz target for the configuration parser.
 *
 * Arbitrary bytes (cut at the first NUL, as getenv would) are parsed in both modes. Checked:
 *  - no crash, no out-of-bounds access (ASan/UBSan do that part);
 *  - every message is one NUL-terminated line;
 *  - strict success implies lenient success with the same result;
 *  - on success, ts_config_format's output parses back (strict) to an identical struct, and
 *    formatting that again gives the same text;
 *  - ts_config_format's return value is the full length, whatever the buffer size.
 * Any mismatch aborts.
 */
#include "config/config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_message(const char *msg)
{
    size_t n = strnlen(msg, sizeof(((ts_config_diag *)0)->message));
    if (n >= sizeof(((ts_config_diag *)0)->message) || strchr(msg, '\n')) {
        fprintf(stderr, "bad message: %.*s\n", (int)n, msg);
        abort();
    }
}

static void on_warn(void *user, const char *msg)
{
    (*(unsigned *)user)++;
    check_message(msg);
}

static void fail(const char *what, const char *text, const char *a, const char *b)
{
    fprintf(stderr, "fuzz_config: %s\n  input:  %s\n  first:  %s\n  second: %s\n", what, text,
            a ? a : "", b ? b : "");
    abort();
}

static void round_trip(const ts_config *cfg, const char *input)
{
    static char out1[1 << 14], out2[1 << 14];
    size_t n = ts_config_format(cfg, out1, sizeof out1);
    if (n >= sizeof out1 || strlen(out1) != n)
        fail("format length", input, out1, NULL);

    /* a small buffer must give the same length and a NUL-terminated prefix */
    char small[17];
    size_t m = ts_config_format(cfg, small, sizeof small);
    if (m != n || strlen(small) != (n < sizeof small ? n : sizeof small - 1) ||
        strncmp(small, out1, strlen(small)) != 0)
        fail("format truncation", input, out1, small);
    if (ts_config_format(cfg, NULL, 0) != n)
        fail("format length with no buffer", input, out1, NULL);

    ts_config back;
    ts_config_diag diag;
    unsigned warnings = 0;
    if (ts_config_parse(&back, out1, "ROUNDTRIP", TS_CONFIG_STRICT, &diag, on_warn, &warnings) != 0)
        fail("format output does not parse", input, out1, diag.message);
    check_message(diag.message);
    if (!ts_config_equal(cfg, &back)) {
        ts_config_format(&back, out2, sizeof out2);
        fail("round trip changed the configuration", input, out1, out2);
    }
    ts_config_format(&back, out2, sizeof out2);
    if (strcmp(out1, out2) != 0)
        fail("format is not stable", input, out1, out2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    ts_config strict, lenient;
    ts_config_diag diag;
    unsigned warnings = 0;
    memset(&strict, 0xa5, sizeof strict);
    ts_config canary = strict;
    int rs = ts_config_parse(&strict, text, "FUZZ", TS_CONFIG_STRICT, &diag, on_warn, &warnings);
    check_message(diag.message);
    if (rs != 0 && memcmp(&strict, &canary, sizeof strict) != 0)
        fail("strict failure wrote *out", text, diag.message, NULL);
    if (rs != 0 && diag.message[0] == '\0')
        fail("strict failure without a message", text, NULL, NULL);

    int rl = ts_config_parse(&lenient, text, "FUZZ", TS_CONFIG_LENIENT, &diag, on_warn, &warnings);
    if (rl != 0)
        fail("lenient parse failed", text, NULL, NULL);
    if (rs == 0 && !ts_config_equal(&strict, &lenient))
        fail("strict and lenient disagree on a valid string", text, NULL, NULL);

    if (rs == 0)
        round_trip(&strict, text);
    round_trip(&lenient, text);

    free(text);
    return 0;
}
