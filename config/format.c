/* The configuration in force as one line (ts_config_format), and every key described
 * (ts_config_describe). */
#include "config/internal.h"

#include <stdio.h>
#include <string.h>

static void format_divisions(sbuf *b, const uint32_t *t)
{
    unsigned a = 0; /* end of the first run */
    while (a + 1 < TS_ROUNDUP_INTERVALS && t[a + 1] == t[0])
        a++;
    if (a == TS_ROUNDUP_INTERVALS - 1) {
        if (t[0] != 0 && is_pow2(t[0]))
            sb_printf(b, "%u", (unsigned)t[0]);
        else
            sb_printf(b, "[1:%u,>:%u]", (unsigned)t[0], (unsigned)t[0]);
        return;
    }
    unsigned z = TS_ROUNDUP_INTERVALS - 1; /* start of the last run */
    while (t[z - 1] == t[TS_ROUNDUP_INTERVALS - 1])
        z--;
    /* the first K:V also covers every lower interval; '>' covers everything after the last K */
    sb_printf(b, "[%llu:%u", 1ull << a, (unsigned)t[0]);
    for (unsigned i = a + 1; i < z; i++)
        sb_printf(b, ",%llu:%u", 1ull << i, (unsigned)t[i]);
    sb_printf(b, ",>:%u]", (unsigned)t[z]);
}

static void format_size(sbuf *b, size_t v)
{
    static const char suffix[] = "TGMK";
    for (unsigned i = 0; i < 4; i++) {
        unsigned shift = 40 - 10 * i;
        if (v != 0 && shift < sizeof(size_t) * 8 && (v & (((size_t)1 << shift) - 1)) == 0) {
            sb_printf(b, "%zu%c", v >> shift, suffix[i]);
            return;
        }
    }
    sb_printf(b, "%zu", v);
}

static void format_value(sbuf *b, const ts_config *cfg, const key_desc *k)
{
    const struct ts_config_not_applicable *na = &cfg->not_applicable;
    switch ((enum value_kind)k->kind) {
    case KIND_MIB: {
        size_t v = *(const size_t *)field_cptr(cfg, k);
        if ((k->flags & F_UNLIMITED) && v == SIZE_MAX)
            sb_str(b, "unlimited");
        else
            sb_printf(b, "%zu", v / MIB);
        break;
    }
    case KIND_SIZE: format_size(b, *(const size_t *)field_cptr(cfg, k)); break;
    case KIND_BOOL: sb_str(b, *(const bool *)field_cptr(cfg, k) ? "True" : "False"); break;
    case KIND_U32: sb_printf(b, "%u", (unsigned)*(const uint32_t *)field_cptr(cfg, k)); break;
    case KIND_FRACTION: {
        double d = *(const double *)field_cptr(cfg, k);
        char tmp[64];
        if ((k->flags & F_OPEN) && d == 0.0) {
            sb_str(b, "off");
        } else {
            cfg_format_double(d, tmp, sizeof tmp);
            sb_str(b, tmp);
        }
        break;
    }
    case KIND_DIVISIONS: format_divisions(b, field_cptr(cfg, k)); break;
    case KIND_CHOICE: sb_str(b, choice_name(k->choices, get_enum(cfg, k))); break;
    case KIND_PATH: sb_str(b, field_cptr(cfg, k)); break;
    case KIND_NA_BOOL: sb_str(b, (na->bools >> na_bit(k)) & 1 ? "True" : "False"); break;
    case KIND_NA_POW2: sb_printf(b, "%u", (unsigned)na->pinned_num_register_threads); break;
    case KIND_NA_MIB: sb_printf(b, "%zu", na->pinned_reserve_segment_size_mb); break;
    case KIND_NA_RAW:
        sb_str(b, key_index(k) == KEY_EXPANDABLE_SEGMENTS_RESERVE
                      ? na->expandable_segments_reserve
                      : na->expandable_segments_reserve_by_class);
        break;
    }
}

size_t ts_config_format(const ts_config *cfg, char *buf, size_t len)
{
    sbuf b;
    sb_init(&b, buf, len);
    for (unsigned i = 0; i < KEY_COUNT; i++) {
        const key_desc *k = &cfg_keys[i];
        if (is_not_applicable(k) && !(cfg->not_applicable_mask & (UINT32_C(1) << na_bit(k))))
            continue;
        if (k->kind == KIND_PATH && !*(const char *)field_cptr(cfg, k))
            continue; /* unset: no value would read back */
        sb_str(&b, b.len ? "," : "");
        sb_str(&b, k->name);
        sb_put(&b, ":", 1);
        format_value(&b, cfg, k);
    }
    return b.len;
}

/* Word-wrap text at width columns, every line indented by indent spaces. */
static void wrap(sbuf *b, const char *text, unsigned indent, unsigned width)
{
    const char *p = text;
    while (*p) {
        size_t room = width - indent, n = strlen(p);
        if (n > room) {
            n = room;
            while (n > 0 && p[n] != ' ')
                n--;
            if (n == 0) /* one long word */
                n = strcspn(p, " ");
        }
        sb_printf(b, "%*s%.*s\n", (int)indent, "", (int)n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
}

size_t ts_config_describe(char *buf, size_t len)
{
    static const struct {
        const char *title;
        unsigned first, end;
    } groups[] = {
        { "PyTorch keys (PyTorch's meaning and validation)", 0, KEY_CACHING },
        { "tessera keys", KEY_CACHING, KEY_FIRST_NA },
        { "PyTorch keys accepted but not applicable to tessera (validated, reported, ignored)",
          KEY_FIRST_NA, KEY_COUNT },
    };
    ts_config def;
    ts_config_defaults(&def);
    sbuf b;
    sb_init(&b, buf, len);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        sb_printf(&b, "%s%s:\n", g ? "\n" : "", groups[g].title);
        for (unsigned i = groups[g].first; i < groups[g].end; i++) {
            const key_desc *k = &cfg_keys[i];
            char range[256];
            cfg_range_text(k, def.large_segment_size / MIB, range, sizeof range);
            sb_printf(&b, "  %s\n", k->name);
            sb_printf(&b, "      value:   %s%s\n", range,
                      (k->flags & F_UNLIMITED) ? ", or unlimited" : "");
            sb_str(&b, "      default: ");
            if (is_not_applicable(k)) {
                sb_printf(&b, "%s (PyTorch)", k->pytorch_default);
            } else if (k->kind == KIND_PATH && !*(const char *)field_cptr(&def, k)) {
                sb_str(&b, "unset");
            } else {
                format_value(&b, &def, k);
                if ((k->flags & F_MIN_LARGE_SEG) && !(k->flags & F_UNLIMITED))
                    sb_str(&b, " (the value of large_segment_size_mb)");
            }
            sb_put(&b, "\n", 1);
            wrap(&b, k->help, 6, 96);
        }
    }
    return b.len;
}
