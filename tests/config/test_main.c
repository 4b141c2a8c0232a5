/* Configuration parser tests: values (test_values.c), syntax, modes and the environment
 * (test_syntax.c), format, round trip, describe and the divisions lookup (test_format.c). */
#include "helpers.h"

void collect_warning(void *user, const char *message)
{
    warnings *w = user;
    size_t n = strlen(message);
    if (n >= 9 && strcmp(message + n - 9, "; ignored") == 0)
        w->problems++;
    if (w->count < sizeof w->msg / sizeof w->msg[0])
        snprintf(w->msg[w->count], sizeof w->msg[0], "%s", message);
    w->count++;
}

void parse_lenient(const char *text, ts_config *out, warnings *w)
{
    memset(w, 0, sizeof *w);
    int rc = ts_config_parse(out, text, LENIENT_VAR, TS_CONFIG_LENIENT, NULL, collect_warning, w);
    assert_int_equal(rc, 0);
}

bool parse_ok(const char *text, ts_config *out)
{
    ts_config_diag diag;
    warnings w = { 0 };
    if (ts_config_parse(out, text, STRICT_VAR, TS_CONFIG_STRICT, &diag, collect_warning, &w) != 0) {
        print_error("strict parse of '%s' failed: %s\n", text, diag.message);
        return false;
    }
    ts_config lenient;
    parse_lenient(text, &lenient, &w);
    if (w.problems != 0) {
        print_error("lenient parse of '%s' reported: %s\n", text, w.msg[0]);
        return false;
    }
    if (!ts_config_equal(out, &lenient)) {
        print_error("strict and lenient parses of '%s' differ\n", text);
        return false;
    }
    return true;
}

bool parse_error(const char *text, const char *tail, ts_config *lenient_out)
{
    ts_config out, canary;
    memset(&out, 0x5a, sizeof out);
    canary = out;
    ts_config_diag diag;
    warnings w = { 0 };
    if (ts_config_parse(&out, text, STRICT_VAR, TS_CONFIG_STRICT, &diag, collect_warning, &w) != -1) {
        print_error("strict parse of '%s' succeeded\n", text);
        return false;
    }
    if (memcmp(&out, &canary, sizeof out) != 0) {
        print_error("strict parse of '%s' failed but wrote *out\n", text);
        return false;
    }
    if (w.count != 0) {
        print_error("strict parse of '%s' failed but warned: %s\n", text, w.msg[0]);
        return false;
    }
    char want[600];
    if (tail) {
        snprintf(want, sizeof want, "%s: %s", STRICT_VAR, tail);
        if (strcmp(diag.message, want) != 0) {
            print_error("strict message for '%s'\n   got: %s\n  want: %s\n", text, diag.message, want);
            return false;
        }
    } else if (strncmp(diag.message, STRICT_VAR ": ", strlen(STRICT_VAR) + 2) != 0) {
        print_error("strict message for '%s' lacks the variable: %s\n", text, diag.message);
        return false;
    }
    ts_config lenient;
    parse_lenient(text, &lenient, &w);
    if (lenient_out)
        *lenient_out = lenient;
    if (w.problems == 0) {
        print_error("lenient parse of '%s' reported nothing\n", text);
        return false;
    }
    if (tail) {
        snprintf(want, sizeof want, "%s: %s; ignored", LENIENT_VAR, tail);
        if (strcmp(w.msg[0], want) != 0) {
            print_error("lenient message for '%s'\n   got: %s\n  want: %s\n", text, w.msg[0], want);
            return false;
        }
    }
    return true;
}

int main(void)
{
    int failed = 0;
    failed += run_value_tests();
    failed += run_syntax_tests();
    failed += run_format_tests();
    return failed ? 1 : 0;
}
