/* Every key: accepted values with the exact stored result, rejected values with the message. */
#include "helpers.h"

static void test_defaults(void **state)
{
    (void)state;
    ts_config c;
    ts_config_defaults(&c);
    assert_true(c.max_split_size == SIZE_MAX);
    assert_true(c.max_non_split_rounding == 20 * MiB);
    assert_true(c.garbage_collection_threshold == 0.0);
    for (unsigned i = 0; i < TS_ROUNDUP_INTERVALS; i++)
        assert_int_equal(c.roundup_power2_divisions[i], 0);
    assert_false(c.expandable_segments);
    assert_true(c.per_process_memory_fraction == 1.0);
    assert_true(c.large_segment_size == 20 * MiB);
    assert_int_equal(c.backend, TS_BACKEND_NATIVE);
    assert_true(c.caching);
    assert_true(c.memory_limit == 0);
    assert_true(c.stats);
    assert_true(c.oom_report);
    assert_int_equal(c.reuse_fence, TS_FENCE_ORDER);
    assert_false(c.stitching);
    assert_true(c.stitch_min_block == 2 * MiB);
    assert_int_equal(c.stitch_max_ranges, 4096);
    assert_true(c.expandable_page == 0);
    assert_int_equal(c.handle_policy, TS_HANDLES_PAGE);
    assert_false(c.defragment);
    assert_false(c.verbose);
    assert_int_equal(c.not_applicable_mask, 0);

    /* the empty string, blanks and a lone trailing comma after an entry all give tessera's
     * default: the table's values with the default policy (no policy key named) */
    tessera_default(&c);
    ts_config p;
    assert_true(parse_ok("", &p));
    assert_true(ts_config_equal(&c, &p));
    assert_true(parse_ok(" \t\n\r ", &p));
    assert_true(ts_config_equal(&c, &p));
    assert_true(parse_ok(NULL, &p));
    assert_true(ts_config_equal(&c, &p));
    assert_true(parse_ok("stats:True,", &p));
    assert_true(ts_config_equal(&c, &p));
}

static void test_max_split_size(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("max_split_size_mb:20", &c));
    assert_true(c.max_split_size == 20 * MiB);
    assert_true(parse_ok("max_split_size_mb:1024", &c));
    assert_true(c.max_split_size == 1024 * MiB);
    assert_true(parse_ok("max_split_size_mb:unlimited", &c));
    assert_true(c.max_split_size == SIZE_MAX);
    /* the largest: its bytes stay below 1 EiB; one more is refused, however PyTorch caps it */
    assert_true(parse_ok("max_split_size_mb:1099511627775", &c));
    assert_true(c.max_split_size == ((size_t)1 << 60) - MiB);
    assert_true(parse_error("max_split_size_mb:1099511627776",
                            "key 'max_split_size_mb' at position 0: value '1099511627776' is too "
                            "large (must be an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_split_size_mb:18446744073709551615", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:17592186044416", NULL, NULL)); /* SIZE_MAX / MiB + 1 */
    assert_true(parse_ok("max_split_size_mb: 0 0 2 0 ", &c)); /* blanks dropped, leading zeros */
    assert_true(c.max_split_size == 20 * MiB);

    assert_true(parse_error("max_split_size_mb:10",
                            "key 'max_split_size_mb' at position 0: value '10' is too small (must be "
                            "an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_split_size_mb:19",
                            "key 'max_split_size_mb' at position 0: value '19' is too small (must be "
                            "an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_split_size_mb:0", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:-1",
                            "key 'max_split_size_mb' at position 0: value '-1' is not an integer "
                            "(must be an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_split_size_mb:+30", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:30.5", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:30abc", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:Unlimited", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:0x40", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:18446744073709551616",
                            "key 'max_split_size_mb' at position 0: value '18446744073709551616' is "
                            "out of range (must be an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_split_size_mb:99999999999999999999999999999999", NULL, NULL));
    assert_true(parse_error("max_split_size_mb:[1:2]",
                            "key 'max_split_size_mb' at position 0: value '[1:2]' is a list (must be "
                            "an integer from 20 to 1099511627775 MiB)", NULL));
}

static void test_max_non_split_rounding(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("max_non_split_rounding_mb:20", &c));
    assert_true(c.max_non_split_rounding == 20 * MiB);
    assert_true(parse_ok("max_non_split_rounding_mb:512", &c));
    assert_true(c.max_non_split_rounding == 512 * MiB);
    /* bounded: a size past 1 EiB plus a request would wrap in the oversize rule */
    assert_true(parse_ok("max_non_split_rounding_mb:1099511627775", &c));
    assert_true(c.max_non_split_rounding == ((size_t)1 << 60) - MiB);
    assert_true(parse_error("max_non_split_rounding_mb:1099511627776",
                            "key 'max_non_split_rounding_mb' at position 0: value '1099511627776' is "
                            "too large (must be an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_non_split_rounding_mb:18446744073709551615", NULL, NULL));
    assert_true(parse_error("max_non_split_rounding_mb:19",
                            "key 'max_non_split_rounding_mb' at position 0: value '19' is too small "
                            "(must be an integer from 20 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_non_split_rounding_mb:unlimited", NULL, NULL));
}

static void test_large_segment_size(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("large_segment_size_mb:11", &c));
    assert_true(c.large_segment_size == 11 * MiB);
    assert_true(c.max_non_split_rounding == 11 * MiB); /* its default follows */
    assert_true(c.max_split_size == SIZE_MAX);
    assert_true(parse_error("large_segment_size_mb:10",
                            "key 'large_segment_size_mb' at position 0: value '10' is too small "
                            "(must be an integer from 11 to 1024 MiB)", NULL));
    assert_true(parse_error("large_segment_size_mb:0", NULL, NULL));
    /* A segment larger than any device would make every 1-10 MiB request fail. */
    assert_true(parse_error("large_segment_size_mb:999999",
                            "key 'large_segment_size_mb' at position 0: value '999999' is too "
                            "large (must be an integer from 11 to 1024 MiB)", NULL));
    assert_true(parse_error("large_segment_size_mb:1025", NULL, NULL));
    assert_true(parse_ok("large_segment_size_mb:1024", &c));
    assert_true(c.large_segment_size == 1024 * MiB);

    /* It lowers the minimum of the two rounding keys, wherever it appears... */
    assert_true(parse_ok("max_split_size_mb:12,max_non_split_rounding_mb:11,large_segment_size_mb:11", &c));
    assert_true(c.max_split_size == 12 * MiB);
    assert_true(c.max_non_split_rounding == 11 * MiB);
    /* ... and raises it, wherever it appears. */
    assert_true(parse_error("max_split_size_mb:40,large_segment_size_mb:64",
                            "key 'max_split_size_mb' at position 0: value '40' is too small (must be "
                            "an integer from 64 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("large_segment_size_mb:64,max_split_size_mb:40",
                            "key 'max_split_size_mb' at position 25: value '40' is too small (must be "
                            "an integer from 64 to 1099511627775 MiB)", NULL));
    assert_true(parse_error("max_non_split_rounding_mb:63, large_segment_size_mb:64",
                            "key 'max_non_split_rounding_mb' at position 0: value '63' is too small "
                            "(must be an integer from 64 to 1099511627775 MiB)", NULL));
    assert_true(parse_ok("max_split_size_mb:64,max_non_split_rounding_mb:100,large_segment_size_mb:64", &c));
    assert_true(c.max_split_size == 64 * MiB);
    assert_true(c.max_non_split_rounding == 100 * MiB);
    assert_true(c.large_segment_size == 64 * MiB);
    /* given twice: the last valid one wins */
    assert_true(parse_ok("large_segment_size_mb:64,large_segment_size_mb:32", &c));
    assert_true(c.large_segment_size == 32 * MiB);
    assert_true(c.max_non_split_rounding == 32 * MiB);

    /* Lenient: a bad large_segment_size_mb keeps 20, and the minimum stays 20. */
    warnings w;
    parse_lenient("max_split_size_mb:25,large_segment_size_mb:5", &c, &w);
    assert_int_equal(w.problems, 1);
    assert_true(c.large_segment_size == 20 * MiB);
    assert_true(c.max_split_size == 25 * MiB);
    /* Lenient: a good one that rejects a later max_split_size_mb */
    parse_lenient("max_split_size_mb:25,large_segment_size_mb:30", &c, &w);
    assert_int_equal(w.problems, 1);
    assert_true(c.large_segment_size == 30 * MiB);
    assert_true(c.max_split_size == SIZE_MAX);
    assert_true(c.max_non_split_rounding == 30 * MiB);
}

static void test_garbage_collection_threshold(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("garbage_collection_threshold:0.6", &c));
    assert_true(c.garbage_collection_threshold == 0.6);
    assert_true(parse_ok("garbage_collection_threshold:.5", &c));
    assert_true(c.garbage_collection_threshold == 0.5);
    assert_true(parse_ok("garbage_collection_threshold:6e-1", &c));
    assert_true(c.garbage_collection_threshold == 0.6);
    assert_true(parse_ok("garbage_collection_threshold:0.999999", &c));
    assert_true(c.garbage_collection_threshold == 0.999999);
    assert_true(parse_ok("garbage_collection_threshold:off", &c));
    assert_true(c.garbage_collection_threshold == 0.0);

    static const char range[] = "(must be a number in (0, 1), exclusive, or off)";
    char want[256];
    snprintf(want, sizeof want,
             "key 'garbage_collection_threshold' at position 0: value '0' is out of range %s", range);
    assert_true(parse_error("garbage_collection_threshold:0", want, NULL));
    snprintf(want, sizeof want,
             "key 'garbage_collection_threshold' at position 0: value '1.0' is out of range %s", range);
    assert_true(parse_error("garbage_collection_threshold:1.0", want, NULL));
    snprintf(want, sizeof want,
             "key 'garbage_collection_threshold' at position 0: value 'abc' is not a number %s", range);
    assert_true(parse_error("garbage_collection_threshold:abc", want, NULL));
    assert_true(parse_error("garbage_collection_threshold:1", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:-0.5", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:nan", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:inf", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:0x0.8p0", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:0.5.5", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:1e999", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:1e-999", NULL, NULL)); /* reads as 0 */
    assert_true(parse_error("garbage_collection_threshold:.", NULL, NULL));
    assert_true(parse_error("garbage_collection_threshold:5e", NULL, NULL));
}

static void test_per_process_memory_fraction(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("per_process_memory_fraction:0", &c));
    assert_true(c.per_process_memory_fraction == 0.0);
    assert_true(parse_ok("per_process_memory_fraction:1", &c));
    assert_true(c.per_process_memory_fraction == 1.0);
    assert_true(parse_ok("per_process_memory_fraction:0.75", &c));
    assert_true(c.per_process_memory_fraction == 0.75);
    assert_true(parse_ok("per_process_memory_fraction:-0", &c));
    assert_true(c.per_process_memory_fraction == 0.0);
    assert_true(parse_error("per_process_memory_fraction:1.01",
                            "key 'per_process_memory_fraction' at position 0: value '1.01' is out of "
                            "range (must be a number in [0, 1])", NULL));
    assert_true(parse_error("per_process_memory_fraction:-0.1", NULL, NULL));
    assert_true(parse_error("per_process_memory_fraction:off", NULL, NULL));
    assert_true(parse_error("per_process_memory_fraction:half", NULL, NULL));
}

static void expect_table(const ts_config *c, const uint32_t want[TS_ROUNDUP_INTERVALS])
{
    for (unsigned i = 0; i < TS_ROUNDUP_INTERVALS; i++) {
        if (c->roundup_power2_divisions[i] != want[i])
            print_error("index %u: got %u, want %u\n", i, c->roundup_power2_divisions[i], want[i]);
        assert_int_equal(c->roundup_power2_divisions[i], want[i]);
    }
}

static void test_divisions_scalar(void **state)
{
    (void)state;
    ts_config c;
    static const uint32_t ones[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    static const uint32_t fours[16] = { 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4 };
    assert_true(parse_ok("roundup_power2_divisions:1", &c));
    expect_table(&c, ones);
    assert_true(parse_ok("roundup_power2_divisions:4", &c));
    expect_table(&c, fours);
    assert_true(parse_ok("roundup_power2_divisions:2147483648", &c));
    assert_int_equal(c.roundup_power2_divisions[7], 2147483648u);

    static const char range[] = "(must be a power of two, or a list [K:V,...,>:V] with K a power "
                                "of two (MiB) and V 0 or a power of two)";
    char want[300];
    snprintf(want, sizeof want,
             "key 'roundup_power2_divisions' at position 0: value '3' is not a power of two %s", range);
    assert_true(parse_error("roundup_power2_divisions:3", want, NULL));
    snprintf(want, sizeof want,
             "key 'roundup_power2_divisions' at position 0: value '0' is not a power of two %s", range);
    assert_true(parse_error("roundup_power2_divisions:0", want, NULL));
    snprintf(want, sizeof want,
             "key 'roundup_power2_divisions' at position 0: value '4294967296' is too large %s", range);
    assert_true(parse_error("roundup_power2_divisions:4294967296", want, NULL));
    assert_true(parse_error("roundup_power2_divisions:-4", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:four", NULL, NULL));
}

static void test_divisions_list(void **state)
{
    (void)state;
    ts_config c;
    /* the worked example: index <= 8 -> 1, 9 -> 2, 10 -> 4, 11..15 -> 8 */
    static const uint32_t example[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8 };
    assert_true(parse_ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", &c));
    expect_table(&c, example);
    assert_true(parse_ok(" roundup_power2_divisions : [ 2 56 : 1 ,\t512:2, 1024 :4 ,> : 8 , ] ", &c));
    expect_table(&c, example);

    /* the first K:V fills every lower index; later ones only their own */
    static const uint32_t first_fills[16] = { 2, 2, 2, 2, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    assert_true(parse_ok("roundup_power2_divisions:[8:2,32:8]", &c));
    expect_table(&c, first_fills);
    /* K = 1 is index 0; nothing lower to fill */
    static const uint32_t k1[16] = { 2, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    assert_true(parse_ok("roundup_power2_divisions:[1:2,4:8]", &c));
    expect_table(&c, k1);
    /* '>' with no K before it fills every interval after the first, as PyTorch's parser
     * does (it counts from interval 0): sizes below 2 MiB keep their value */
    static const uint32_t after0[16] = { 0, 16, 16, 16, 16, 16, 16, 16,
                                         16, 16, 16, 16, 16, 16, 16, 16 };
    assert_true(parse_ok("roundup_power2_divisions:[>:16]", &c));
    expect_table(&c, after0);
    assert_true(parse_ok("roundup_power2_divisions:4,roundup_power2_divisions:[>:16]", &c));
    expect_table(&c, (const uint32_t[16]){ 4, 16, 16, 16, 16, 16, 16, 16,
                                           16, 16, 16, 16, 16, 16, 16, 16 });
    /* a '>' then a first K:V: the K:V fills below it, over what '>' wrote */
    assert_true(parse_ok("roundup_power2_divisions:[>:4,256:2]", &c));
    expect_table(&c, (const uint32_t[16]){ 2, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4 });
    /* '>' fills after the LAST explicit index, even when the list is not in order */
    static const uint32_t unordered[16] = { 4, 4, 4, 4, 4, 4, 4, 4, 1, 2, 2, 2, 2, 2, 2, 2 };
    assert_true(parse_ok("roundup_power2_divisions:[1024:4,256:1,512:2,>:2]", &c));
    expect_table(&c, unordered);
    /* K above 32768 MiB clamps to index 15; K below 2 MiB is index 0; V 0 allowed */
    static const uint32_t clamp[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32 };
    assert_true(parse_ok("roundup_power2_divisions:[1:0,9223372036854775808:32]", &c));
    expect_table(&c, clamp);
    /* here the first K:V (index 15) fills 0..14, then 1:0 sets index 0 */
    assert_true(parse_ok("roundup_power2_divisions:[65536:32,1:0]", &c));
    expect_table(&c, (const uint32_t[16]){ 0, 32, 32, 32, 32, 32, 32, 32,
                                           32, 32, 32, 32, 32, 32, 32, 32 });
    /* an empty list changes nothing; a scalar then a list: the list edits the scalar's table */
    static const uint32_t zeros[16] = { 0 };
    assert_true(parse_ok("roundup_power2_divisions:[]", &c));
    expect_table(&c, zeros);
    static const uint32_t edit[16] = { 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1, 4, 4, 4, 4, 4 };
    assert_true(parse_ok("roundup_power2_divisions:4,roundup_power2_divisions:[1024:1]", &c));
    expect_table(&c, (const uint32_t[16]){ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 4 });
    assert_true(parse_ok("roundup_power2_divisions:4,roundup_power2_divisions:[1:4,1024:1]", &c));
    expect_table(&c, edit);

    assert_true(parse_error("roundup_power2_divisions:[256:1,3:2]",
                            "key 'roundup_power2_divisions' at position 0: interval '3' at position "
                            "32 is not a power of two (intervals are sizes in MiB that are powers "
                            "of two, or '>' for all later intervals)", NULL));
    assert_true(parse_error("roundup_power2_divisions:[0:2]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[x:2]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[18446744073709551616:2]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[256:3]",
                            "key 'roundup_power2_divisions' at position 0: division '3' at position "
                            "30 is not 0 or a power of two (must be 0 or a power of two <= "
                            "2147483648)", NULL));
    assert_true(parse_error("roundup_power2_divisions:[>:5]", NULL, NULL));
    assert_true(parse_error("roundup_power2_divisions:[256:4294967296]", NULL, NULL));

    /* lenient: a bad item drops the whole list; the table keeps its default */
    warnings w;
    parse_lenient("roundup_power2_divisions:[256:1,512:3,>:8],stats:False", &c, &w);
    assert_int_equal(w.problems, 1);
    expect_table(&c, zeros);
    assert_false(c.stats);
}

static void test_booleans(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        size_t offset;
    } bools[] = {
        { "expandable_segments", offsetof(ts_config, expandable_segments) },
        { "caching", offsetof(ts_config, caching) },
        { "stats", offsetof(ts_config, stats) },
        { "oom_report", offsetof(ts_config, oom_report) },
        { "stitching", offsetof(ts_config, stitching) },
        { "defragment", offsetof(ts_config, defragment) },
        { "verbose", offsetof(ts_config, verbose) },
    };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        char text[128], want[256];
        ts_config c;
        snprintf(text, sizeof text, "%s:True", bools[i].key);
        assert_true(parse_ok(text, &c));
        assert_true(*(bool *)((char *)&c + bools[i].offset));
        snprintf(text, sizeof text, "%s:False", bools[i].key);
        assert_true(parse_ok(text, &c));
        assert_false(*(bool *)((char *)&c + bools[i].offset));
        static const char *const bad[] = { "true", "false", "TRUE", "1", "0", "yes", "on", "Tru" };
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            snprintf(text, sizeof text, "%s:%s", bools[i].key, bad[j]);
            snprintf(want, sizeof want, "key '%s' at position 0: value '%s' is not a boolean "
                                        "(must be True or False (case-sensitive))",
                     bools[i].key, bad[j]);
            assert_true(parse_error(text, want, NULL));
        }
    }
}

static void test_backend(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("backend:native", &c));
    assert_int_equal(c.backend, TS_BACKEND_NATIVE);
    assert_true(parse_ok("backend:cudaMallocAsync", &c));
    assert_int_equal(c.backend, TS_BACKEND_CUDA_MALLOC_ASYNC);
    assert_true(parse_error("backend:cudamallocasync",
                            "key 'backend' at position 0: value 'cudamallocasync' is not a valid "
                            "option (must be native or cudaMallocAsync)", NULL));
    assert_true(parse_error("backend:hipMallocAsync", NULL, NULL));
    assert_true(parse_error("backend:Native", NULL, NULL));

    /* a note (not a problem) when keys that only the native backend reads are given */
    warnings w;
    parse_lenient("max_split_size_mb:100,backend:cudaMallocAsync,garbage_collection_threshold:0.5", &c, &w);
    assert_int_equal(w.problems, 0);
    assert_int_equal(w.count, 1);
    assert_string_equal(w.msg[0], LENIENT_VAR ": backend:cudaMallocAsync ignores max_split_size_mb, "
                                  "garbage_collection_threshold (tessera passes allocations "
                                  "through uncached)");
    assert_int_equal(c.backend, TS_BACKEND_CUDA_MALLOC_ASYNC);
    assert_true(c.max_split_size == 100 * MiB);
    assert_string_equal(ts_config_backend_name(TS_BACKEND_CUDA_MALLOC_ASYNC), "cudaMallocAsync");
    assert_string_equal(ts_config_backend_name((ts_backend_kind)7), "?");
}

static void test_memory_limit(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t bytes;
    } good[] = {
        { "0", 0 },
        { "1", 1 },
        { "4096", 4096 },
        { "1K", (size_t)1 << 10 },
        { "3k", (size_t)3 << 10 },
        { "3KiB", (size_t)3 << 10 },
        { "3kb", (size_t)3 << 10 },
        { "512M", (size_t)512 << 20 },
        { "1536MiB", (size_t)1536 << 20 },
        { "8G", (size_t)8 << 30 },
        { "8GB", (size_t)8 << 30 },
        { "2T", (size_t)2 << 40 },
        { "16777215T", (size_t)16777215 << 40 },
        { "18446744073709551615", SIZE_MAX },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char text[64];
        ts_config c;
        snprintf(text, sizeof text, "memory_limit:%s", good[i].text);
        assert_true(parse_ok(text, &c));
        assert_true(c.memory_limit == good[i].bytes);
    }
    static const char range[] = "(must be a size in bytes with an optional K, M, G or T suffix "
                                "(binary multiples), 0 for no limit)";
    char want[300];
    snprintf(want, sizeof want, "key 'memory_limit' at position 0: value '16777216T' is too large %s",
             range);
    assert_true(parse_error("memory_limit:16777216T", want, NULL)); /* 2^64 bytes */
    snprintf(want, sizeof want, "key 'memory_limit' at position 0: value '8X' is not a size %s", range);
    assert_true(parse_error("memory_limit:8X", want, NULL));
    assert_true(parse_error("memory_limit:18446744073709551616", NULL, NULL));
    assert_true(parse_error("memory_limit:17179869184G", NULL, NULL));
    assert_true(parse_error("memory_limit:99999999999999999999999K", NULL, NULL));
    assert_true(parse_error("memory_limit:G", NULL, NULL));
    assert_true(parse_error("memory_limit:-1", NULL, NULL));
    assert_true(parse_error("memory_limit:1.5G", NULL, NULL));
    assert_true(parse_error("memory_limit:8GG", NULL, NULL));
    assert_true(parse_error("memory_limit:8Gi", NULL, NULL));
    assert_true(parse_error("memory_limit:none", NULL, NULL));
}

static void test_reuse_fence(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("reuse_fence:order", &c));
    assert_int_equal(c.reuse_fence, TS_FENCE_ORDER);
    assert_true(parse_ok("reuse_fence:events", &c));
    assert_int_equal(c.reuse_fence, TS_FENCE_EVENTS);
    assert_true(parse_ok("reuse_fence:sync", &c));
    assert_int_equal(c.reuse_fence, TS_FENCE_SYNC);
    assert_true(parse_ok("reuse_fence:none", &c));
    assert_int_equal(c.reuse_fence, TS_FENCE_NONE);
    assert_true(parse_error("reuse_fence:Events",
                            "key 'reuse_fence' at position 0: value 'Events' is not a valid option "
                            "(must be order, events, sync or none)", NULL));
    assert_string_equal(ts_config_fence_name(TS_FENCE_SYNC), "sync");
}

static void test_history_and_snapshot_keys(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("history_events:4096,history_frames:True", &c));
    assert_int_equal(c.history_events, 4096);
    assert_true(c.history_frames);
    assert_string_equal(c.snapshot_on_oom, "");
    assert_true(parse_error("history_events:16777217",
                            "key 'history_events' at position 0: value '16777217' is too large "
                            "(must be an integer from 0 to 16777216)", NULL));
    assert_true(parse_ok("snapshot_on_oom:/tmp/oom-%p-%n-100%%.pickle", &c));
    assert_string_equal(c.snapshot_on_oom, "/tmp/oom-%p-%n-100%%.pickle");
    /* only %p, %n and %% expand: a printf-style directive is refused, not passed on */
    assert_true(parse_error("snapshot_on_oom:/tmp/%s.pickle",
                            "key 'snapshot_on_oom' at position 0: value '/tmp/%s.pickle' is not a "
                            "path template (must be a file path without ':', ',' or spaces; %p: "
                            "the pid, %n: a count, %%: %)", NULL));
    assert_true(parse_error("snapshot_on_oom:/tmp/x%", NULL, NULL));
    assert_true(parse_error("snapshot_on_oom:/tmp/a\x01b", NULL, NULL)); /* control byte */
    char text[400];
    memset(text, 0, sizeof text);
    memcpy(text, "snapshot_on_oom:/", 17);
    memset(text + 17, 'a', 300);
    assert_true(parse_error(text, NULL, NULL));
}

static void test_stitch_keys(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("stitch_min_block_mb:2", &c));
    assert_true(c.stitch_min_block == 2 * MiB);
    assert_true(parse_ok("stitch_min_block_mb:64", &c));
    assert_true(c.stitch_min_block == 64 * MiB);
    assert_true(parse_error("stitch_min_block_mb:1",
                            "key 'stitch_min_block_mb' at position 0: value '1' is too small (must be "
                            "an integer from 2 to 1099511627775 MiB)", NULL));
    assert_true(parse_ok("stitch_min_block_mb:1099511627775", &c));
    assert_true(parse_error("stitch_min_block_mb:1099511627776",
                            "key 'stitch_min_block_mb' at position 0: value '1099511627776' is too "
                            "large (must be an integer from 2 to 1099511627775 MiB)", NULL));
    assert_true(parse_ok("stitch_max_ranges:1", &c));
    assert_int_equal(c.stitch_max_ranges, 1);
    assert_true(parse_ok("stitch_max_ranges:4096", &c));
    assert_int_equal(c.stitch_max_ranges, 4096);
    assert_true(parse_error("stitch_max_ranges:0",
                            "key 'stitch_max_ranges' at position 0: value '0' is too small (must be "
                            "an integer from 1 to 4096)", NULL));
    assert_true(parse_error("stitch_max_ranges:4097",
                            "key 'stitch_max_ranges' at position 0: value '4097' is too large (must "
                            "be an integer from 1 to 4096)", NULL));
    assert_true(parse_error("stitch_max_ranges:4294967297", NULL, NULL));
}

static void test_expandable_page_and_handles(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("expandable_page_mb:0,expandable_segments:True", &c));
    assert_true(c.expandable_page == 0); /* PyTorch's pages: 2 MiB small, 20 MiB large */
    /* with defragment, 0 is every device's granularity, said as such before any device */
    assert_true(parse_ok("expandable_page_mb:0", &c));
    assert_true(c.defragment && c.expandable_page == 2 * MiB);
    assert_true(parse_ok("defragment:True,expandable_page_mb:0", &c));
    assert_true(c.expandable_page == 2 * MiB);
    /* on a device, a page is whole granules of it, whatever was asked */
    ts_config_device big = {4 * MiB}, none = {0};
    ts_config_resolve(&c, &big);
    assert_true(c.expandable_page == 4 * MiB);
    assert_true(parse_ok("expandable_page_mb:6", &c));
    ts_config_resolve(&c, &big);
    assert_true(c.expandable_page == 8 * MiB);
    assert_true(parse_ok("expandable_page_mb:8", &c));
    ts_config_resolve(&c, &big);
    assert_true(c.expandable_page == 8 * MiB);
    ts_config_resolve(&c, &big); /* idempotent */
    assert_true(c.expandable_page == 8 * MiB);
    assert_true(parse_ok("expandable_page_mb:6,expandable_segments:False", &c));
    ts_config_resolve(&c, &big); /* no expandable segments: the page is not used, not touched */
    assert_true(c.expandable_page == 6 * MiB);
    assert_true(parse_ok("expandable_page_mb:6", &c));
    ts_config_resolve(&c, &none);
    assert_false(c.expandable_segments);
    assert_true(parse_ok("expandable_page_mb:2", &c));
    assert_true(c.expandable_page == 2 * MiB);
    assert_true(parse_ok("expandable_page_mb:1024", &c));
    assert_true(c.expandable_page == 1024 * MiB);
    /* a page larger than a segment may be (2^44 MiB wrapped to 0 bytes: a division by zero at
     * the first allocation; 2^32 MiB: every allocation "device is full") */
    assert_true(parse_error("expandable_page_mb:1025",
                            "key 'expandable_page_mb' at position 0: value '1025' is too large (must "
                            "be an integer from 0 to 1024 MiB, 0 for the default)", NULL));
    assert_true(parse_error("expandable_page_mb:4294967296", NULL, NULL));
    assert_true(parse_error("expandable_page_mb:17592186044416", NULL, NULL));
    assert_true(parse_ok("handle_policy:geometric", &c));
    assert_int_equal(c.handle_policy, TS_HANDLES_GEOMETRIC);
    assert_true(parse_ok("handle_policy:coarse", &c));
    assert_int_equal(c.handle_policy, TS_HANDLES_COARSE);
    assert_true(parse_ok("handle_policy:page", &c));
    assert_int_equal(c.handle_policy, TS_HANDLES_PAGE);
    assert_true(parse_error("handle_policy:pages",
                            "key 'handle_policy' at position 0: value 'pages' is not a valid option "
                            "(must be page, geometric or coarse)", NULL));
}

static void test_defragment(void **state)
{
    (void)state;
    ts_config c;
    assert_true(parse_ok("defragment:True", &c));
    assert_true(c.defragment && c.expandable_segments && c.stitching);
    /* explicit settings win, in either order, unless they contradict: stitching (on with
     * defragment) cannot run without expandable segments. Strict refuses the string; lenient
     * says so and keeps expandable segments on, which is what is in force and printed. */
    assert_true(parse_error("expandable_segments:False,defragment:True",
                            "stitching:True (from defragment:True) needs expandable segments, and "
                            "expandable_segments:False is given: drop one of them", NULL));
    assert_true(parse_error("stitching:True,expandable_segments:False",
                            "stitching:True needs expandable segments, and "
                            "expandable_segments:False is given: drop one of them", NULL));
    assert_true(parse_ok("expandable_segments:False,defragment:True,stitching:False", &c));
    assert_true(c.defragment && !c.expandable_segments && !c.stitching);
    warnings w;
    parse_lenient("expandable_segments:False,defragment:True", &c, &w);
    assert_int_equal(w.problems, 1);
    assert_true(c.defragment && c.expandable_segments && c.stitching);
    /* stitching alone brings expandable segments with it, in the parsed (printed) configuration */
    assert_true(parse_ok("stitching:True", &c));
    assert_true(c.stitching && c.expandable_segments);
    assert_true(parse_ok("defragment:True,stitching:False", &c));
    assert_true(c.defragment && c.expandable_segments && !c.stitching);
    assert_true(parse_ok("defragment:False", &c));
    assert_true(!c.defragment && !c.expandable_segments && !c.stitching);
    assert_true(parse_ok("defragment:True,defragment:False", &c));
    assert_true(!c.defragment && !c.expandable_segments && !c.stitching);
    /* lenient: an invalid expandable_segments counts as not set */
    parse_lenient("expandable_segments:maybe,defragment:True", &c, &w);
    assert_int_equal(w.problems, 1);
    assert_true(c.defragment && c.expandable_segments && c.stitching);
    /* the default policy (no policy key): defragment with coarse handles, stitching under
     * pressure; a given handle_policy or stitch_when wins, and a named policy is that policy.
     * planned memory is gone: plan is an unknown key */
    assert_true(parse_ok("stats:True", &c));
    assert_true(c.defragment && c.expandable_segments && c.stitching);
    assert_int_equal(c.handle_policy, TS_HANDLES_COARSE);
    assert_int_equal(c.stitch_when, TS_STITCH_PRESSURE);
    assert_true(c.growth_batch == 20 * MiB); /* a whole coarse handle per sequential growth */
    assert_true(parse_ok("large_segment_size_mb:40", &c));
    assert_true(c.growth_batch == 40 * MiB);
    assert_true(parse_ok("growth_batch_mb:0", &c));
    assert_true(c.handle_policy == TS_HANDLES_COARSE && c.growth_batch == 0);
    assert_true(parse_ok("handle_policy:page", &c));
    assert_true(c.defragment && c.handle_policy == TS_HANDLES_PAGE);
    assert_true(c.growth_batch == 0); /* page handles' batches buy no driver time on a GPU */
    assert_true(parse_ok("handle_policy:geometric,defragment:True", &c));
    assert_true(c.handle_policy == TS_HANDLES_GEOMETRIC);
    assert_true(parse_ok("stitch_when:always", &c));
    assert_true(c.defragment && c.stitch_when == TS_STITCH_ALWAYS);
    assert_true(parse_ok("defragment:True", &c));
    assert_int_equal(c.stitch_when, TS_STITCH_ALWAYS);
    assert_int_equal(c.handle_policy, TS_HANDLES_COARSE); /* defragment's handles */
    assert_true(c.growth_batch == 0); /* stitching first: nothing held ahead */
    assert_true(parse_ok("defragment:True,stitch_when:pressure", &c));
    assert_true(c.growth_batch == 20 * MiB);
    assert_true(parse_ok("expandable_segments:True", &c));
    assert_true(!c.defragment && !c.stitching);
    assert_int_equal(c.handle_policy, TS_HANDLES_PAGE); /* PyTorch's */
    assert_true(parse_error("plan:True", "unknown key 'plan' at position 0 (see docs/configuration.md for "
                            "the keys)", NULL));
}

static void test_not_applicable(void **state)
{
    (void)state;
    static const char *const names[TS_CONFIG_NOT_APPLICABLE_COUNT] = {
        "release_lock_on_cudamalloc",          "pinned_use_cuda_host_register",
        "pinned_num_register_threads",         "pinned_use_background_threads",
        "pinned_reserve_segment_size_mb",      "pinned_free_catch_all",
        "graph_capture_record_stream_reuse",   "throw_on_cudamalloc_oom",
        "expandable_segments_reserve",         "expandable_segments_reserve_by_class",
        "release_lock_on_hipmalloc",           "pinned_use_hip_host_register",
    };
    static const char *const values[TS_CONFIG_NOT_APPLICABLE_COUNT] = {
        "True", "False", "8", "True", "64", "True", "False", "True", "40G", "[compute:0.5,comm:2G]",
        "False", "True",
    };
    for (unsigned bit = 0; bit < TS_CONFIG_NOT_APPLICABLE_COUNT; bit++) {
        assert_string_equal(ts_config_not_applicable_name(bit), names[bit]);
        char text[128], note[200];
        snprintf(text, sizeof text, "%s:%s", names[bit], values[bit]);
        ts_config c, def;
        assert_true(parse_ok(text, &c));
        assert_int_equal(c.not_applicable_mask, 1u << bit);
        /* nothing else changes */
        tessera_default(&def);
        c.not_applicable_mask = 0;
        memset(&c.not_applicable, 0, sizeof c.not_applicable);
        assert_true(ts_config_equal(&c, &def));
        /* one line each, in both modes */
        warnings w;
        parse_lenient(text, &c, &w);
        assert_int_equal(w.count, 1);
        snprintf(note, sizeof note, LENIENT_VAR ": key '%s' is not applicable to tessera (accepted "
                                    "and ignored)", names[bit]);
        assert_string_equal(w.msg[0], note);
    }
    assert_null(ts_config_not_applicable_name(TS_CONFIG_NOT_APPLICABLE_COUNT));
    assert_null(ts_config_not_applicable_name(~0u));

    /* all at once, given twice: one note per key */
    char all[2048] = "";
    for (int round = 0; round < 2; round++)
        for (unsigned bit = 0; bit < TS_CONFIG_NOT_APPLICABLE_COUNT; bit++) {
            strcat(all, names[bit]);
            strcat(all, ":");
            strcat(all, values[bit]);
            strcat(all, ",");
        }
    ts_config c;
    warnings w;
    parse_lenient(all, &c, &w);
    assert_int_equal(w.problems, 0);
    assert_int_equal(w.count, TS_CONFIG_NOT_APPLICABLE_COUNT);
    assert_int_equal(c.not_applicable_mask, (1u << TS_CONFIG_NOT_APPLICABLE_COUNT) - 1);
    assert_int_equal(c.not_applicable.pinned_num_register_threads, 8);
    assert_true(c.not_applicable.pinned_reserve_segment_size_mb == 64);
    assert_string_equal(c.not_applicable.expandable_segments_reserve, "40G");
    assert_string_equal(c.not_applicable.expandable_segments_reserve_by_class, "[compute:0.5,comm:2G]");

    /* validated like PyTorch */
    assert_true(parse_ok("pinned_num_register_threads:1", &c));
    assert_true(parse_ok("pinned_num_register_threads:128", &c));
    assert_true(parse_error("pinned_num_register_threads:3",
                            "key 'pinned_num_register_threads' at position 0: value '3' is not a "
                            "power of two (must be a power of two <= 128)", NULL));
    assert_true(parse_error("pinned_num_register_threads:256",
                            "key 'pinned_num_register_threads' at position 0: value '256' is too "
                            "large (must be a power of two <= 128)", NULL));
    assert_true(parse_error("pinned_num_register_threads:0", NULL, NULL));
    assert_true(parse_error("pinned_reserve_segment_size_mb:0",
                            "key 'pinned_reserve_segment_size_mb' at position 0: value '0' is too "
                            "small (must be an integer > 0 MiB)", NULL));
    assert_true(parse_error("release_lock_on_cudamalloc:1", NULL, NULL));
    assert_true(parse_error("pinned_use_cuda_host_register:[True]", NULL, NULL));
    /* uninterpreted values: anything, but tessera keeps at most 63 characters */
    assert_true(parse_ok("expandable_segments_reserve:whatever,expandable_segments_reserve_by_class:x", &c));
    assert_true(parse_ok("expandable_segments_reserve_by_class:[ a : b , c : d ]", &c));
    assert_string_equal(c.not_applicable.expandable_segments_reserve_by_class, "[a:b,c:d]");
    assert_true(parse_error("expandable_segments_reserve_by_class:[a:[b]]", NULL, NULL));
    assert_true(parse_error("expandable_segments_reserve_by_class:[aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1,"
                            "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb:2]",
                            "key 'expandable_segments_reserve_by_class' at position 0: value "
                            "'[aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1,bbbbbbbbbbbbbb...' is too long (tessera "
                            "keeps at most 63 characters) (must be any value or [list] (not "
                            "interpreted))", NULL));
}

int run_value_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_max_split_size),
        cmocka_unit_test(test_max_non_split_rounding),
        cmocka_unit_test(test_large_segment_size),
        cmocka_unit_test(test_garbage_collection_threshold),
        cmocka_unit_test(test_per_process_memory_fraction),
        cmocka_unit_test(test_divisions_scalar),
        cmocka_unit_test(test_divisions_list),
        cmocka_unit_test(test_booleans),
        cmocka_unit_test(test_backend),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_reuse_fence),
        cmocka_unit_test(test_stitch_keys),
        cmocka_unit_test(test_history_and_snapshot_keys),
        cmocka_unit_test(test_expandable_page_and_handles),
        cmocka_unit_test(test_defragment),
        cmocka_unit_test(test_not_applicable),
    };
    return cmocka_run_group_tests_name("config values", tests, NULL, NULL);
}
