/* ts_config_format (exact text, truncation, round trip over random configurations),
 * ts_config_describe (and the copy in docs/configuration.md), ts_config_divisions_for. */
#include <inttypes.h>
#include <locale.h>
#include <time.h>

#include "helpers.h"

static char *format(const ts_config *c)
{
    static char buf[4096];
    size_t n = ts_config_format(c, buf, sizeof buf);
    assert_true(n < sizeof buf);
    assert_int_equal(strlen(buf), n);
    return buf;
}

/* The value printed for one key, e.g. value_of(&c, "memory_limit") -> "8G"; NULL if absent. */
static const char *value_of(const ts_config *c, const char *key)
{
    static char val[512];
    const char *p = format(c);
    size_t kl = strlen(key);
    while (*p) {
        const char *colon = strchr(p, ':');
        if (!colon)
            return NULL;
        const char *v = colon + 1, *e = v;
        int depth = 0;
        while (*e && (depth || *e != ',')) { /* a list's commas do not end the entry */
            depth += *e == '[' ? 1 : *e == ']' ? -1 : 0;
            e++;
        }
        if ((size_t)(colon - p) == kl && strncmp(p, key, kl) == 0) {
            snprintf(val, sizeof val, "%.*s", (int)(e - v), v);
            return val;
        }
        p = *e ? e + 1 : e;
    }
    return NULL;
}

static void test_format_defaults(void **state)
{
    (void)state;
    ts_config c;
    ts_config_defaults(&c);
    assert_string_equal(format(&c),
                        "max_split_size_mb:unlimited,max_non_split_rounding_mb:20,"
                        "garbage_collection_threshold:off,roundup_power2_divisions:[1:0,>:0],"
                        "expandable_segments:False,per_process_memory_fraction:1,"
                        "large_segment_size_mb:20,backend:native,caching:True,memory_limit:0,"
                        "stats:True,oom_report:True,reuse_fence:order,stitching:False,"
                        "stitch_when:always,stitch_min_block_mb:2,stitch_max_ranges:4096,expandable_page_mb:0,handle_policy:page,"
                        "growth_batch_mb:0,defragment:False,verbose:False,history_events:0,"
                        "history_frames:False,pinned_cache:True,pinned_idle_s:10,lending:True,"
                        "lending_wait_ms:2000,lending_all_users:False");

    /* snprintf contract */
    size_t full = ts_config_format(&c, NULL, 0);
    assert_int_equal(full, strlen(format(&c)));
    char small[10];
    memset(small, 'x', sizeof small);
    assert_int_equal(ts_config_format(&c, small, sizeof small), full);
    assert_string_equal(small, "max_split");
    char one[1] = { 'x' };
    assert_int_equal(ts_config_format(&c, one, 1), full);
    assert_int_equal(one[0], '\0');
}

static void test_format_values(void **state)
{
    (void)state;
    static const struct {
        const char *in, *key, *out;
    } cases[] = {
        { "max_split_size_mb:64", "max_split_size_mb", "64" },
        { "max_split_size_mb:1099511627775", "max_split_size_mb", "1099511627775" },
        { "large_segment_size_mb:32", "max_non_split_rounding_mb", "32" },
        { "garbage_collection_threshold:0.60", "garbage_collection_threshold", "0.6" },
        { "garbage_collection_threshold:1e-5", "garbage_collection_threshold", "1e-05" },
        { "per_process_memory_fraction:0.3333333333333333", "per_process_memory_fraction",
          "0.3333333333333333" },
        { "per_process_memory_fraction:0", "per_process_memory_fraction", "0" },
        { "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", "roundup_power2_divisions",
          "[256:1,512:2,1024:4,>:8]" },
        { "roundup_power2_divisions:4", "roundup_power2_divisions", "4" },
        { "roundup_power2_divisions:[>:4]", "roundup_power2_divisions", "[1:0,>:4]" },
        { "roundup_power2_divisions:[32768:0]", "roundup_power2_divisions", "[1:0,>:0]" },
        { "roundup_power2_divisions:[8:2,32:8]", "roundup_power2_divisions", "[8:2,16:0,32:8,>:0]" },
        { "roundup_power2_divisions:[1:2,4:8]", "roundup_power2_divisions", "[1:2,2:0,4:8,>:0]" },
        { "roundup_power2_divisions:[65536:32,1:0]", "roundup_power2_divisions", "[1:0,>:32]" },
        { "roundup_power2_divisions:[16384:2,32768:4]", "roundup_power2_divisions", "[16384:2,>:4]" },
        { "memory_limit:8G", "memory_limit", "8G" },
        { "memory_limit:8192M", "memory_limit", "8G" },
        { "memory_limit:1536M", "memory_limit", "1536M" },
        { "memory_limit:3kib", "memory_limit", "3K" },
        { "memory_limit:1025", "memory_limit", "1025" },
        { "memory_limit:2T", "memory_limit", "2T" },
        { "memory_limit:1099511627777", "memory_limit", "1099511627777" },
        { "backend:cudaMallocAsync", "backend", "cudaMallocAsync" },
        { "reuse_fence:none", "reuse_fence", "none" },
        { "stitch_min_block_mb:6", "stitch_min_block_mb", "6" },
        { "pinned_num_register_threads:16", "pinned_num_register_threads", "16" },
        { "release_lock_on_cudamalloc:True", "release_lock_on_cudamalloc", "True" },
        { "pinned_free_catch_all:False", "pinned_free_catch_all", "False" },
        { "expandable_segments_reserve_by_class:[ a:1 , b : 2 ]",
          "expandable_segments_reserve_by_class", "[a:1,b:2]" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_config c;
        assert_true(parse_ok(cases[i].in, &c));
        const char *v = value_of(&c, cases[i].key);
        if (!v || strcmp(v, cases[i].out) != 0)
            print_error("%s: %s printed as '%s', want '%s'\n", cases[i].in, cases[i].key,
                        v ? v : "(absent)", cases[i].out);
        assert_non_null(v);
        assert_string_equal(v, cases[i].out);
    }
    /* the longest output fits TS_CONFIG_FORMAT_MAX */
    ts_config big;
    assert_true(parse_ok(
        "max_split_size_mb:1099511627774,max_non_split_rounding_mb:1099511627774,"
        "large_segment_size_mb:1024,"
        "garbage_collection_threshold:4.9406564584124654e-324,"
        "per_process_memory_fraction:4.9406564584124654e-324,"
        "roundup_power2_divisions:[1:2147483648,2:1073741824,4:2147483648,8:1073741824,"
        "16:2147483648,32:1073741824,64:2147483648,128:1073741824,256:2147483648,512:1073741824,"
        "1024:2147483648,2048:1073741824,4096:2147483648,8192:1073741824,16384:2147483648,"
        "32768:1073741824],backend:cudaMallocAsync,memory_limit:18446744073709551615,"
        "reuse_fence:events,stitch_min_block_mb:1099511627775,stitch_max_ranges:4096,"
        "expandable_segments:False,caching:False,stats:False,oom_report:False,stitching:False,"
        "defragment:False,verbose:False,"
        "release_lock_on_cudamalloc:False,pinned_use_cuda_host_register:False,"
        "pinned_num_register_threads:128,pinned_use_background_threads:False,"
        "pinned_reserve_segment_size_mb:18446744073709551615,pinned_free_catch_all:False,"
        "graph_capture_record_stream_reuse:False,throw_on_cudamalloc_oom:False,"
        "expandable_segments_reserve:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,"
        "expandable_segments_reserve_by_class:[xxxxxxxxxxxxxxxxxxxxxxxxxxxx:yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy],"
        "release_lock_on_hipmalloc:False,pinned_use_hip_host_register:False", &big));
    size_t longest = ts_config_format(&big, NULL, 0);
    assert_true(longest < TS_CONFIG_FORMAT_MAX);
    if (longest <= 1100) /* 1238 when written */
        print_error("longest format is only %zu characters\n", longest);
    assert_true(longest > 1100); /* really the long case */

    /* not applicable keys are printed only when given */
    ts_config c;
    ts_config_defaults(&c);
    assert_null(strstr(format(&c), "pinned_use"));
    assert_null(strstr(format(&c), "pinned_num"));
}

/* --- round trip over random configurations ------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned below(unsigned n)
{
    return (unsigned)(rnd() % n);
}

static double unit(void) /* in (0, 1) */
{
    return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
}

typedef struct text {
    char buf[4096];
    size_t len;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof t->buf - t->len);
    t->len += (size_t)n;
}

static const char *blank(void)
{
    static const char *const b[] = { "", "", "", " ", "\t", "  ", "\n" };
    return b[below(sizeof b / sizeof b[0])];
}

static const char *boolean(void)
{
    return below(2) ? "True" : "False";
}

/* One random valid entry for key k (an index into the list below). */
static void random_entry(text *t, unsigned k, unsigned large_seg_mb)
{
    static const char *const raw_values[] = { "40G", "0.5", "[compute:0.5,comm:2G]", "x", "[]" };
    unsigned p = below(17) + 1;
    switch (k) {
    case 0:
        switch (below(3)) {
        case 0: put(t, "max_split_size_mb:unlimited"); break;
        case 1: put(t, "max_split_size_mb:%u", large_seg_mb + below(100000)); break;
        default: put(t, "max_split_size_mb:%" PRIu64, (rnd() | ((uint64_t)1 << 39)) & (((uint64_t)1 << 40) - 1)); break;
        }
        break;
    case 1: put(t, "max_non_split_rounding_mb:%u", large_seg_mb + below(5000)); break;
    case 2:
        if (below(4) == 0)
            put(t, "garbage_collection_threshold:off");
        else
            put(t, "garbage_collection_threshold:%.*g", p, 0.01 + 0.89 * unit()); /* stays < 1 */
        break;
    case 3:
        if (below(3) == 0) {
            put(t, "roundup_power2_divisions:%u", 1u << below(32));
        } else {
            put(t, "roundup_power2_divisions:[");
            unsigned n = below(7);
            for (unsigned i = 0; i < n; i++) {
                unsigned v = below(3) == 0 ? 0 : 1u << below(32);
                if (below(5) == 0)
                    put(t, "%s>:%u,", blank(), v);
                else
                    put(t, "%s%" PRIu64 "%s:%u,", blank(), (uint64_t)1 << below(64), blank(), v);
            }
            if (n && below(2)) /* drop the trailing comma */
                t->buf[--t->len] = '\0';
            put(t, "]");
        }
        break;
    case 4: put(t, "expandable_segments:%s", boolean()); break;
    case 5:
        switch (below(4)) {
        case 0: put(t, "per_process_memory_fraction:0"); break;
        case 1: put(t, "per_process_memory_fraction:1"); break;
        default: put(t, "per_process_memory_fraction:%.*g", p, unit()); break;
        }
        break;
    case 6: put(t, "large_segment_size_mb:%u", large_seg_mb); break;
    case 7: put(t, "backend:%s", below(2) ? "native" : "cudaMallocAsync"); break;
    case 8: put(t, "caching:%s", boolean()); break;
    case 9: {
        static const char *const suf[] = { "", "K", "M", "G", "T", "k", "MiB", "GB" };
        unsigned s = below(8);
        uint64_t v = s == 0 ? rnd() >> below(64) : rnd() >> (40 + below(24));
        put(t, "memory_limit:%" PRIu64 "%s", v, suf[s]);
        break;
    }
    case 10: put(t, "stats:%s", boolean()); break;
    case 11: put(t, "oom_report:%s", boolean()); break;
    case 12: {
        static const char *const f[] = { "order", "events", "sync", "none" };
        put(t, "reuse_fence:%s", f[below(4)]);
        break;
    }
    case 13: put(t, "stitching:%s", boolean()); break;
    case 14: put(t, "stitch_min_block_mb:%u", 2 + below(1000)); break;
    case 15: put(t, "stitch_max_ranges:%u", 1 + below(4096)); break;
    case 16: put(t, "defragment:%s", boolean()); break;
    case 17: put(t, "verbose:%s", boolean()); break;
    case 18: put(t, "expandable_page_mb:%u", below(1025)); break;
    case 19: put(t, "handle_policy:%s", below(2) ? "page" : "geometric"); break;
    case 20: put(t, "growth_batch_mb:%u", below(1025)); break;
    default: {
        unsigned bit = k - 21;
        const char *name = ts_config_not_applicable_name(bit);
        if (strcmp(name, "pinned_num_register_threads") == 0)
            put(t, "%s:%u", name, 1u << below(8));
        else if (strcmp(name, "pinned_reserve_segment_size_mb") == 0)
            put(t, "%s:%u", name, 1 + below(100000));
        else if (strncmp(name, "expandable_segments_reserve", 27) == 0)
            put(t, "%s:%s", name, raw_values[below(5)]);
        else
            put(t, "%s:%s", name, boolean());
        break;
    }
    }
}

static void test_round_trip_random(void **state)
{
    (void)state;
    const char *env = getenv("TS_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "round trip: seed %" PRIu64 " (set TS_TEST_SEED to repeat)\n", seed);
    rng_state = seed;
    const unsigned nkeys = 21 + TS_CONFIG_NOT_APPLICABLE_COUNT;
    for (unsigned iter = 0; iter < 3000; iter++) {
        text t = { .len = 0 };
        t.buf[0] = '\0';
        unsigned large_seg_mb = 20;
        bool have_large = below(3) == 0;
        if (have_large)
            large_seg_mb = 11 + below(200);
        unsigned order[64];
        for (unsigned i = 0; i < nkeys; i++)
            order[i] = i;
        for (unsigned i = nkeys - 1; i > 0; i--) { /* shuffle */
            unsigned j = below(i + 1), x = order[i];
            order[i] = order[j];
            order[j] = x;
        }
        for (unsigned i = 0; i < nkeys; i++) {
            unsigned k = order[i];
            if (k == 6 ? !have_large : below(2) == 0)
                continue;
            put(&t, "%s", blank());
            random_entry(&t, k, large_seg_mb);
            put(&t, "%s,", blank());
        }
        if (t.len && below(2))
            t.buf[--t.len] = '\0';

        ts_config c, back;
        ts_config_diag diag;
        if (ts_config_parse(&c, t.buf, "RANDOM", TS_CONFIG_STRICT, &diag, NULL, NULL) != 0) {
            /* the one contradiction random keys can make: stitching without expandable segments */
            if (strstr(diag.message, "needs expandable segments, and expandable_segments:False"))
                continue;
            print_error("seed %" PRIu64 " iteration %u: '%s' did not parse: %s\n", seed, iter,
                        t.buf, diag.message);
            fail();
        }
        char first[4096], second[4096];
        snprintf(first, sizeof first, "%s", format(&c));
        if (ts_config_parse(&back, first, "FORMAT", TS_CONFIG_STRICT, &diag, NULL, NULL) != 0) {
            print_error("seed %" PRIu64 " iteration %u: format of '%s' is '%s', which did not parse: "
                        "%s\n", seed, iter, t.buf, first, diag.message);
            fail();
        }
        snprintf(second, sizeof second, "%s", format(&back));
        if (!ts_config_equal(&c, &back) || strcmp(first, second) != 0) {
            print_error("seed %" PRIu64 " iteration %u: '%s'\n  formats as '%s'\n  then as     '%s'\n",
                        seed, iter, t.buf, first, second);
            fail();
        }
    }
}

/* --- describe ------------------------------------------------------------------------------ */

static void test_describe(void **state)
{
    (void)state;
    size_t n = ts_config_describe(NULL, 0);
    assert_true(n > 1000);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    assert_int_equal(ts_config_describe(buf, n + 1), n);
    assert_int_equal(strlen(buf), n);
    /* every key of a configuration with everything given appears, with its default */
    ts_config c;
    assert_true(parse_ok("release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:False,"
                         "pinned_num_register_threads:8,pinned_use_background_threads:True,"
                         "pinned_reserve_segment_size_mb:64,pinned_free_catch_all:True,"
                         "graph_capture_record_stream_reuse:True,throw_on_cudamalloc_oom:False,"
                         "expandable_segments_reserve:40G,expandable_segments_reserve_by_class:x,"
                         "release_lock_on_hipmalloc:False,pinned_use_hip_host_register:True,"
                         "snapshot_on_oom:/tmp/oom-%p-%n.pickle", &c));
    char all[4096];
    snprintf(all, sizeof all, "%s", format(&c));
    unsigned keys = 0;
    for (char *save = NULL, *k = strtok_r(all, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(k, ':');
        if (!colon || k[0] == '>' || (k[0] >= '0' && k[0] <= '9'))
            continue; /* inside the divisions list */
        *colon = '\0';
        char line[128];
        snprintf(line, sizeof line, "\n  %s\n      value:   ", k);
        if (!strstr(buf, line))
            print_error("describe lacks %s\n", k);
        assert_non_null(strstr(buf, line));
        keys++;
    }
    assert_int_equal(keys, 30 + TS_CONFIG_NOT_APPLICABLE_COUNT);
    assert_non_null(strstr(buf, "  max_split_size_mb\n      value:   an integer from 20 to 1099511627775 MiB, or "
                                "unlimited\n      default: unlimited\n"));
    assert_non_null(strstr(buf, "  reuse_fence\n      value:   order, events, sync or none\n      "
                                "default: order\n"));
    /* truncation keeps a terminated prefix */
    char small[32];
    assert_int_equal(ts_config_describe(small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_memory_equal(small, buf, sizeof small - 1);
    free(buf);
}

/* docs/configuration.md must carry the current describe output (path from TS_CONFIG_DOC). */
static void test_docs_match_describe(void **state)
{
    (void)state;
    const char *path = getenv("TS_CONFIG_DOC");
    if (!path) {
        skip();
        return;
    }
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char doc[1 << 17];
    size_t len = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[len] = '\0';
    size_t n = ts_config_describe(NULL, 0);
    char *want = malloc(n + 1);
    assert_non_null(want);
    ts_config_describe(want, n + 1);
    if (!strstr(doc, want))
        print_error("%s does not contain the output of ts_config_describe; regenerate it with "
                    "config-describe (see the file)\n", path);
    assert_non_null(strstr(doc, want));
    free(want);
}

/* A decimal-comma locale must not change how numbers are read or printed. */
static void test_locale(void **state)
{
    (void)state;
    static const char *const names[] = { "de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8",
                                         "ru_RU.UTF-8", "ru_RU.utf8", "de_DE", "fr_FR" };
    const char *got = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !got; i++)
        got = setlocale(LC_NUMERIC, names[i]);
    if (!got) {
        skip(); /* no decimal-comma locale installed */
        return;
    }
    ts_config c;
    bool ok = parse_ok("garbage_collection_threshold:0.25,per_process_memory_fraction:0.5", &c);
    const char *gc = value_of(&c, "garbage_collection_threshold");
    char gcs[64];
    snprintf(gcs, sizeof gcs, "%s", gc ? gc : "");
    setlocale(LC_NUMERIC, "C");
    assert_true(ok);
    assert_true(c.garbage_collection_threshold == 0.25);
    assert_true(c.per_process_memory_fraction == 0.5);
    assert_string_equal(gcs, "0.25");
}

int run_format_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_defaults),
        cmocka_unit_test(test_format_values),
        cmocka_unit_test(test_round_trip_random),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_docs_match_describe),
        cmocka_unit_test(test_locale),
    };
    return cmocka_run_group_tests_name("config format", tests, NULL, NULL);
}
