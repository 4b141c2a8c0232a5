/* Syntax and separators with positions, strict versus lenient, unknown keys, long input, and the
 * precedence of the three environment variables. */
#include "helpers.h"

static void test_separator_errors(void **state)
{
    (void)state;
    /* PyTorch's newest tokenizer ignores this mistake; strict mode does not */
    assert_true(parse_error("expandable_segments,True",
                            "key 'expandable_segments' at position 0: expected ':' at position 19 "
                            "but found ',' (syntax: key:value)", NULL));
    /* positions count the original characters, blanks included */
    assert_true(parse_error("stats:False,  expandable_segments , True",
                            "key 'expandable_segments' at position 14: expected ':' at position 34 "
                            "but found ',' (syntax: key:value)", NULL));
    assert_true(parse_error("expandable_segments",
                            "key 'expandable_segments' at position 0: expected ':' at position 19 "
                            "but found the end (syntax: key:value)", NULL));
    assert_true(parse_error("caching:False:True",
                            "key 'caching' at position 0: expected ',' or the end at position 13 but "
                            "found ':' (syntax: key:value,key:value)", NULL));
    assert_true(parse_error("caching:False]",
                            "key 'caching' at position 0: expected ',' or the end at position 13 but "
                            "found ']' (syntax: key:value,key:value)", NULL));
    assert_true(parse_error("roundup_power2_divisions:[1:2]x",
                            "key 'roundup_power2_divisions' at position 0: expected ',' or the end at "
                            "position 30 but found 'x' (syntax: key:value,key:value)", NULL));
    assert_true(parse_error(",verbose:True",
                            "position 0: found ',' where a key was expected (syntax: "
                            "key:value,key:value,...)", NULL));
    assert_true(parse_error("stats:False,,verbose:True",
                            "position 12: found ',' where a key was expected (syntax: "
                            "key:value,key:value,...)", NULL));
    assert_true(parse_error("stats:False,,", NULL, NULL));
    assert_true(parse_error(":True", NULL, NULL));
    assert_true(parse_error("[stats:True]", NULL, NULL));
    assert_true(parse_error("stats:",
                            "key 'stats' at position 0: missing value at position 6 (found the end)",
                            NULL));
    assert_true(parse_error("stats:,verbose:True",
                            "key 'stats' at position 0: missing value at position 6 (found ',')", NULL));
    assert_true(parse_error("stats::True", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[1:2",
                            "key 'roundup_power2_divisions' at position 0: the list opened at "
                            "position 25 is not closed (expected ',' or ']' but reached the end)",
                            NULL));
    assert_true(parse_error("roundup_power2_divisions:[1:2,",
                            "key 'roundup_power2_divisions' at position 0: the list opened at "
                            "position 25 is not closed (expected K:V or ']' but reached the end)",
                            NULL));
    assert_true(parse_error("roundup_power2_divisions:[1,2]",
                            "key 'roundup_power2_divisions' at position 0: expected ':' at position "
                            "27 in the list but found ',' (syntax: [K:V,K:V,...])", NULL));
    assert_true(parse_error("roundup_power2_divisions:[1:]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[1:2:3]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[,]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[[1:2]]", NULL, NULL));
    /* trailing commas are fine at the end and inside lists; blanks anywhere */
    ts_config c;
    assert_true(parse_ok("roundup_power2_divisions:[1:2,],", &c));
    assert_int_equal(c.roundup_power2_divisions[0], 2);
    assert_true(parse_ok("\tverbose : True ,\n stats\t:\tFalse , ", &c));
    assert_true(c.verbose && !c.stats);
    /* blanks inside a word are dropped too (as PyTorch's tokenizer does) */
    assert_true(parse_ok("ver bose:Tr ue", &c));
    assert_true(c.verbose);
}

static void test_strict_leaves_out_untouched(void **state)
{
    (void)state;
    /* valid keys before and after the bad one: nothing is half-applied */
    ts_config out, before;
    memset(&out, 0x3c, sizeof out);
    before = out;
    ts_config_diag diag;
    int rc = ts_config_parse(&out, "caching:False,memory_limit:1G,stitch_max_ranges:0,verbose:True",
                             STRICT_VAR, TS_CONFIG_STRICT, &diag, NULL, NULL);
    assert_int_equal(rc, -1);
    assert_memory_equal(&out, &before, sizeof out);
    assert_string_equal(diag.message,
                        STRICT_VAR ": key 'stitch_max_ranges' at position 30: value '0' is too small "
                                   "(must be an integer from 1 to 4096)");
    /* the first problem is the one reported */
    rc = ts_config_parse(&out, "stats:x,verbose:y", STRICT_VAR, TS_CONFIG_STRICT, &diag, NULL, NULL);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(diag.message, "'stats'"));
    /* a syntax error is found before any value is applied, even when it comes later */
    rc = ts_config_parse(&out, "stats:x,verbose,True", STRICT_VAR, TS_CONFIG_STRICT, &diag, NULL, NULL);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(diag.message, "'verbose'"));
    assert_memory_equal(&out, &before, sizeof out);
    /* a NULL diag is allowed */
    assert_int_equal(ts_config_parse(&out, "stats:x", NULL, TS_CONFIG_STRICT, NULL, NULL, NULL), -1);
    assert_memory_equal(&out, &before, sizeof out);
}

static void test_lenient_keeps_going(void **state)
{
    (void)state;
    ts_config c;
    warnings w;
    parse_lenient("caching:False,max_split_size_mb:10,expandable_segments,True,memory_limit:2G,"
                  "stitch_max_ranges:0,bogus:1,verbose:True,roundup_power2_divisions:[3:1],"
                  "reuse_fence:sync,stats:[x:y",
                  &c, &w);
    /* max_split_size_mb, the missing ':' (twice: 'expandable_segments' and 'True'),
     * stitch_max_ranges, bogus, the bad interval, the unclosed list */
    assert_int_equal(w.problems, 7);
    assert_int_equal(w.count, 7);
    assert_false(c.caching);
    assert_true(c.max_split_size == SIZE_MAX);
    assert_true(c.expandable_segments); /* not given (no ':'): tessera's default policy */
    assert_int_equal(c.handle_policy, TS_HANDLES_COARSE);
    assert_true(c.memory_limit == (size_t)2 << 30);
    assert_int_equal(c.stitch_max_ranges, 4096);
    assert_true(c.verbose);
    assert_int_equal(c.roundup_power2_divisions[0], 0);
    assert_int_equal(c.reuse_fence, TS_FENCE_SYNC);
    assert_true(c.stats);
    assert_string_equal(w.msg[0], LENIENT_VAR ": key 'expandable_segments' at position 35: "
                                  "expected ':' at position 54 but found ',' (syntax: key:value); "
                                  "ignored");
    /* syntax problems (pass 1) come first, then value problems in order */
    assert_string_equal(w.msg[3], LENIENT_VAR ": key 'max_split_size_mb' at position 14: value '10' "
                                  "is too small (must be an integer from 20 to 1099511627775 MiB); ignored");

    /* an invalid value leaves an earlier valid one in place */
    parse_lenient("max_split_size_mb:100,max_split_size_mb:5", &c, &w);
    assert_int_equal(w.problems, 1);
    assert_true(c.max_split_size == 100 * MiB);

    /* a NULL callback is allowed; lenient never fails */
    assert_int_equal(ts_config_parse(&c, "stats:x,,:", "X", TS_CONFIG_LENIENT, NULL, NULL, NULL), 0);
    assert_true(c.stats);
}

static void test_unknown_keys(void **state)
{
    (void)state;
    assert_true(parse_error("max_split_size:30",
                            "unknown key 'max_split_size' at position 0 (did you mean "
                            "'max_split_size_mb'?)", NULL));
    assert_true(parse_error("max_spilt_size_mb:30",
                            "unknown key 'max_spilt_size_mb' at position 0 (did you mean "
                            "'max_split_size_mb'?)", NULL));
    assert_true(parse_error("stats:True, expandable_segment:True",
                            "unknown key 'expandable_segment' at position 12 (did you mean "
                            "'expandable_segments'?)", NULL));
    assert_true(parse_error("Verbose:True",
                            "unknown key 'Verbose' at position 0 (did you mean 'verbose'?)", NULL));
    assert_true(parse_error("turbo:True",
                            "unknown key 'turbo' at position 0 (see docs/configuration.md for the "
                            "keys)", NULL));
    assert_true(parse_error("pinned_max_cached_size_mb:5", NULL, NULL));
    assert_true(parse_error(">:4", NULL, NULL));
    /* an unknown key with a list value is skipped whole */
    ts_config c;
    warnings w;
    parse_lenient("foo:[a:b,c:d],verbose:True", &c, &w);
    assert_int_equal(w.problems, 1);
    assert_true(c.verbose);
    /* lenient: once per key name per call */
    parse_lenient("foo:1,bar:2,foo:3,verbos:True,foo:[x:y],bar:4", &c, &w);
    assert_int_equal(w.problems, 3);
    assert_string_equal(w.msg[0], LENIENT_VAR ": unknown key 'foo' at position 0 (see "
                                  "docs/configuration.md for the keys); ignored");
    assert_string_equal(w.msg[2], LENIENT_VAR ": unknown key 'verbos' at position 18 (did you mean "
                                  "'verbose'?); ignored");
    parse_lenient("foo:1", &c, &w); /* a new call warns again */
    assert_int_equal(w.problems, 1);
    /* control bytes in the offending text are escaped; the message stays one line */
    assert_true(parse_error("a\nb\x01:1", "unknown key 'ab\\x01' at position 0 (see "
                                          "docs/configuration.md for the keys)", NULL));
}

static void test_long_input(void **state)
{
    (void)state;
    /* a long string of entries: no limit */
    static const char entry[] = "stats:False, verbose:True,";
    size_t reps = 20000;
    char *big = malloc(reps * (sizeof entry - 1) + 32);
    assert_non_null(big);
    char *p = big;
    for (size_t i = 0; i < reps; i++, p += sizeof entry - 1)
        memcpy(p, entry, sizeof entry - 1);
    strcpy(p, "caching:False");
    ts_config c;
    assert_true(parse_ok(big, &c));
    assert_true(!c.stats && c.verbose && !c.caching);
    free(big);

    /* a single token up to TS_CONFIG_TOKEN_MAX is fine; one more is an error with its position */
    char text[TS_CONFIG_TOKEN_MAX * 2 + 64];
    int n = snprintf(text, sizeof text, "memory_limit:");
    memset(text + n, '0', TS_CONFIG_TOKEN_MAX - 1);
    strcpy(text + n + TS_CONFIG_TOKEN_MAX - 1, "1");
    assert_true(parse_ok(text, &c));
    assert_true(c.memory_limit == 1);
    memset(text + n, '0', TS_CONFIG_TOKEN_MAX);
    strcpy(text + n + TS_CONFIG_TOKEN_MAX, "1");
    assert_true(parse_error(text, "key 'memory_limit' at position 0: value at position 13 is too long "
                                  "(at most 256 characters)", NULL));
    /* blanks do not count towards the limit */
    n = snprintf(text, sizeof text, "memory_limit:");
    for (int i = 0; i < TS_CONFIG_TOKEN_MAX - 1; i++)
        text[n++] = i % 2 ? ' ' : '0';
    strcpy(text + n, "1G");
    assert_true(parse_ok(text, &c));
    assert_true(c.memory_limit == (size_t)1 << 30);
    /* an over-long key, in the message cut to 48 characters */
    memset(text, 'k', TS_CONFIG_TOKEN_MAX + 1);
    strcpy(text + TS_CONFIG_TOKEN_MAX + 1, ":1");
    char want[200];
    snprintf(want, sizeof want, "position 0: key '%.48s...' is too long (at most 256 characters)",
             text);
    assert_true(parse_error(text, want, NULL));
}

/* --- environment --------------------------------------------------------------------------- */

static const char *const env_vars[] = { "TESSERA_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
                                        "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF" };

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
        unsetenv(env_vars[i]);
    return 0;
}

static void test_env_none(void **state)
{
    (void)state;
    ts_config c, def;
    const char *source = "junk";
    ts_config_diag diag;
    memset(&c, 0x77, sizeof c);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, NULL, NULL), 0);
    assert_null(source);
    tessera_default(&def); /* no variable: tessera's default */
    assert_true(ts_config_equal(&c, &def));
    /* PYTORCH_HIP_ALLOC_CONF is not read on CUDA */
    setenv("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:False", 1);
    assert_int_equal(ts_config_from_env(&c, &source, NULL, NULL, NULL), 0);
    assert_null(source);
    assert_true(c.expandable_segments);
    /* source may be NULL */
    assert_int_equal(ts_config_from_env(&c, NULL, NULL, NULL, NULL), 0);
}

static void test_env_precedence(void **state)
{
    (void)state;
    ts_config c;
    const char *source;
    ts_config_diag diag;
    warnings w = { 0 };

    setenv("PYTORCH_ALLOC_CONF", "expandable_segments:False", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "PYTORCH_ALLOC_CONF");
    assert_false(c.expandable_segments); /* the PyTorch variables name the policy too */

    /* PYTORCH_CUDA_ALLOC_CONF wins and is used alone (not merged): no policy key there, so
     * tessera's default policy, not the other variable's expandable_segments:False */
    setenv("PYTORCH_CUDA_ALLOC_CONF", "stats:False", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "PYTORCH_CUDA_ALLOC_CONF");
    assert_false(c.stats);
    assert_true(c.expandable_segments);
    assert_int_equal(c.stitch_when, TS_STITCH_PRESSURE);

    /* set but empty still wins */
    setenv("PYTORCH_CUDA_ALLOC_CONF", "", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "PYTORCH_CUDA_ALLOC_CONF");
    assert_true(c.stats);
    assert_true(c.expandable_segments); /* tessera's default, not PYTORCH_ALLOC_CONF's */

    /* TESSERA_ALLOC_CONF wins over both */
    setenv("PYTORCH_CUDA_ALLOC_CONF", "stats:False", 1);
    setenv("TESSERA_ALLOC_CONF", "verbose:True", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "TESSERA_ALLOC_CONF");
    assert_true(c.verbose && c.stats && c.expandable_segments);
    setenv("TESSERA_ALLOC_CONF", "", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "TESSERA_ALLOC_CONF");
    assert_true(!c.verbose && c.stats);
    assert_int_equal(w.count, 0);
}

static void test_env_modes(void **state)
{
    (void)state;
    ts_config c, before;
    const char *source;
    ts_config_diag diag;
    warnings w = { 0 };

    /* TESSERA_ALLOC_CONF is strict: error, *out untouched, even though the others are valid */
    setenv("PYTORCH_CUDA_ALLOC_CONF", "stats:False", 1);
    setenv("TESSERA_ALLOC_CONF", "verbose:True,max_split_size_mb:1", 1);
    memset(&c, 0x11, sizeof c);
    before = c;
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), -1);
    assert_string_equal(source, "TESSERA_ALLOC_CONF");
    assert_memory_equal(&c, &before, sizeof c);
    assert_string_equal(diag.message, "TESSERA_ALLOC_CONF: key 'max_split_size_mb' at position 13: "
                                      "value '1' is too small (must be an integer from 20 to 1099511627775 MiB)");

    /* the PyTorch variables are lenient: warned about, defaults kept, rest applied */
    unsetenv("TESSERA_ALLOC_CONF");
    setenv("PYTORCH_CUDA_ALLOC_CONF", "verbose:True,max_split_size_mb:1,new_pytorch_key:7", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "PYTORCH_CUDA_ALLOC_CONF");
    assert_true(c.verbose);
    assert_true(c.max_split_size == SIZE_MAX);
    assert_int_equal(w.problems, 2);
    assert_string_equal(w.msg[0], "PYTORCH_CUDA_ALLOC_CONF: key 'max_split_size_mb' at position 13: "
                                  "value '1' is too small (must be an integer from 20 to 1099511627775 MiB); ignored");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    memset(&w, 0, sizeof w);
    setenv("PYTORCH_ALLOC_CONF", "expandable_segments:yes", 1);
    assert_int_equal(ts_config_from_env(&c, &source, &diag, collect_warning, &w), 0);
    assert_string_equal(source, "PYTORCH_ALLOC_CONF");
    assert_int_equal(w.problems, 1);
    assert_non_null(strstr(w.msg[0], "PYTORCH_ALLOC_CONF: key 'expandable_segments'"));
}

/* The policy names every tool takes: a whole string "pytorch" is PyTorch's policy (the key
 * table's values, what expandable_segments:False gives), "default" tessera's (what no string
 * gives), in every variable and mode; a name inside a longer string, or spelled otherwise, is
 * an unknown key. */
static void test_named_policies(void **state)
{
    (void)state;
    ts_config named, spelled, table;
    ts_config_defaults(&table);
    assert_true(parse_ok("pytorch", &named));
    assert_true(parse_ok("expandable_segments:False", &spelled));
    assert_true(ts_config_equal(&named, &spelled));
    assert_true(ts_config_equal(&named, &table));
    assert_false(named.expandable_segments);
    assert_true(parse_ok("default", &named));
    assert_true(parse_ok("", &spelled));
    assert_true(ts_config_equal(&named, &spelled));
    assert_true(named.defragment);
    assert_false(ts_config_equal(&named, &table));
    assert_string_equal(ts_config_named_policy("pytorch"), "expandable_segments:False");
    assert_string_equal(ts_config_named_policy("default"), "");
    assert_null(ts_config_named_policy("PyTorch"));
    assert_null(ts_config_named_policy("pytorch,verbose:True"));
    assert_null(ts_config_named_policy(NULL));
    assert_true(parse_error("pytorch,verbose:True",
                            "key 'pytorch' at position 0: expected ':' at position 7 but found ','"
                            " (syntax: key:value)",
                            NULL));
    assert_true(parse_error("Default", NULL, NULL));
}

int run_syntax_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_separator_errors),
        cmocka_unit_test(test_strict_leaves_out_untouched),
        cmocka_unit_test(test_lenient_keeps_going),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_named_policies),
        cmocka_unit_test_setup_teardown(test_env_none, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_precedence, clear_env, clear_env),
        cmocka_unit_test_setup_teardown(test_env_modes, clear_env, clear_env),
    };
    return cmocka_run_group_tests_name("config syntax and environment", tests, NULL, NULL);
}
