/* The configuration parser (the key table is keys.c, the tokenizer lex.c).
 *
 * Syntax (PyTorch's tokenizer): the separators are , : [ ] and whitespace is dropped everywhere,
 * even inside words ("max split" reads as "maxsplit"). Grammar, checked here although the newest
 * PyTorch tokenizer ignores separator mistakes:
 *
 *   config := [ entry { ',' entry } ] [ ',' ]
 *   entry  := WORD ':' ( WORD | '[' [ item { ',' item } ] [ ',' ] ']' )
 *   item   := WORD ':' WORD
 *
 * The string is walked twice. Pass 1 checks the syntax and applies large_segment_size_mb, which
 * sets the default and the minimum of max_split_size_mb and max_non_split_rounding_mb wherever it
 * appears. Pass 2 applies every other key. Both passes recover from a syntax error the same way
 * (skip to the next ',' outside brackets), so they see the same entries; only pass 1 reports
 * syntax problems. Nothing here allocates: tokens are copied into fixed buffers, and a single
 * token longer than TS_CONFIG_TOKEN_MAX is a syntax error, whatever the length of the string.
 */
#include "config/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIVISIONS_MAX ((uint64_t)1 << 31) /* largest power of two a uint32_t entry holds */
#define UNKNOWN_SEEN_MAX 32               /* distinct unknown keys remembered per call */

/* ------------------------------------------------------------------------------------------ */
/* Parser state and problem reporting                                                          */
/* ------------------------------------------------------------------------------------------ */

typedef struct parser {
    const char *text;
    const char *var;
    ts_config_mode mode;
    ts_config_diag *diag;
    ts_config_warn_fn warn;
    void *user;
    int pass;       /* 1: syntax and F_EARLY keys; 2: everything else */
    bool failed;    /* strict: *diag holds the first problem */
    uint64_t given; /* bit per key_id: applied successfully */
    ts_config cfg;  /* work copy; *out is written only at the end */
    uint64_t unknown_seen[UNKNOWN_SEEN_MAX];
    unsigned unknown_count;
} parser;

/* Report one problem. Returns true when parsing must stop (strict mode). */
static bool problem(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool problem(parser *p, const char *fmt, ...)
{
    char msg[sizeof p->diag->message];
    sbuf b;
    sb_init(&b, msg, sizeof msg);
    sb_printf(&b, "%s: ", p->var);
    va_list ap;
    va_start(ap, fmt);
    if (b.len < sizeof msg)
        vsnprintf(msg + b.len, sizeof msg - b.len, fmt, ap);
    va_end(ap);
    if (p->mode == TS_CONFIG_STRICT) {
        if (!p->failed && p->diag)
            memcpy(p->diag->message, msg, sizeof msg);
        p->failed = true;
        return true;
    }
    size_t n = strlen(msg);
    snprintf(msg + n, sizeof msg - n, "; ignored");
    if (p->warn)
        p->warn(p->user, msg);
    return false;
}

/* Informational line (not applicable keys, backend notes): both modes, after a good parse. */
static void note(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(parser *p, const char *fmt, ...)
{
    if (!p->warn)
        return;
    char msg[sizeof p->diag->message];
    int n = snprintf(msg, sizeof msg, "%s: ", p->var);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof msg)
        vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    p->warn(p->user, msg);
}

/* Syntax problems are found by both passes but reported by pass 1 only. */
static bool syntax_problem(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool syntax_problem(parser *p, const char *fmt, ...)
{
    if (p->pass != 1)
        return false;
    char msg[sizeof p->diag->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return problem(p, "%s", msg);
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* One syntactically valid entry, handed to the key's handler. */
typedef struct entry {
    const key_desc *key;
    size_t key_pos;
    const token *val; /* the value; for a list, its '[' */
    size_t list_end;  /* lists: index just after ']' */
} entry;

static bool is_list(const entry *e)
{
    return e->val->type == T_LBRACKET;
}

/* Whitespace-free text of the value (a word, or a list from '[' to ']'). Returns its length. */
static size_t value_text(const parser *p, const entry *e, char *dst, size_t cap)
{
    if (!is_list(e)) {
        snprintf(dst, cap, "%s", e->val->text);
        return e->val->len;
    }
    size_t n = 0;
    for (size_t i = e->val->pos; i < e->list_end; i++) {
        if (is_space(p->text[i]))
            continue;
        if (n + 1 < cap)
            dst[n] = p->text[i];
        n++;
    }
    if (cap)
        dst[n < cap ? n : cap - 1] = '\0';
    return n;
}

/* Value problems. They return true ("there was a problem"); p->failed says whether to stop. */

/* "key 'k' at position P: value 'v' <what> (must be <range>)" */
static bool bad_value(parser *p, const entry *e, const char *what)
{
    char text[TS_CONFIG_TOKEN_MAX + 1], q[SHOW_MAX * 4 + 8], range[256];
    size_t n = value_text(p, e, text, sizeof text);
    cfg_show(q, sizeof q, text, n < sizeof text ? n : sizeof text - 1);
    cfg_range_text(e->key, p->cfg.large_segment_size / MIB, range, sizeof range);
    problem(p, "key '%s' at position %zu: value '%s'%s %s (must be %s)", e->key->name, e->key_pos,
            q, n >= sizeof text ? "..." : "", what, range);
    return true;
}

/* A problem with one item of a list: "key 'k' at position P: <part> 't' at position Q <what> (<range>)" */
static bool bad_item(parser *p, const entry *e, const char *part, const token *t, const char *what,
                     const char *range)
{
    char q[SHOW_MAX * 4 + 8];
    cfg_show(q, sizeof q, t->text, strlen(t->text));
    problem(p, "key '%s' at position %zu: %s '%s' at position %zu %s (%s)", e->key->name,
            e->key_pos, part, q, t->pos, what, range);
    return true;
}

static const char *num_problem(int r)
{
    return r == NUM_RANGE ? "is out of range" : "is not an integer";
}

static bool parse_bool(const char *s, bool *out)
{
    if (strcmp(s, "True") == 0)
        *out = true;
    else if (strcmp(s, "False") == 0)
        *out = false;
    else
        return false;
    return true;
}

/* Integer with an optional binary suffix: K, M, G, T (any case), optionally followed by B or iB. */
static int parse_size(const char *s, size_t *out)
{
    char digits[TS_CONFIG_TOKEN_MAX + 1];
    size_t n = 0;
    while (is_digit(s[n]))
        n++;
    if (n == 0 || n >= sizeof digits)
        return NUM_SYNTAX;
    memcpy(digits, s, n);
    digits[n] = '\0';
    unsigned shift = 0;
    const char *suf = s + n;
    if (*suf) {
        switch (*suf) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: return NUM_SYNTAX;
        }
        suf++;
        if (strcmp(suf, "") != 0 && strcmp(suf, "B") != 0 && strcmp(suf, "iB") != 0 &&
            strcmp(suf, "b") != 0 && strcmp(suf, "ib") != 0)
            return NUM_SYNTAX;
    }
    uint64_t v;
    int r = cfg_parse_u64(digits, &v);
    if (r != NUM_OK)
        return r;
    if (v > ((uint64_t)SIZE_MAX >> shift))
        return NUM_RANGE;
    *out = (size_t)(v << shift);
    return NUM_OK;
}

/* list iteration over an entry that pass 1 already checked */
static bool list_next(const char *s, size_t *i, token *k, token *v)
{
    token t;
    cfg_next_token(s, i, k);
    if (k->type != T_WORD)
        return false; /* ']' */
    cfg_next_token(s, i, &t); /* ':' */
    cfg_next_token(s, i, v);
    size_t save = *i;
    cfg_next_token(s, i, &t); /* ',' or ']' */
    if (t.type == T_RBRACKET)
        *i = save;
    return true;
}

static bool parse_divisions(parser *p, const entry *e)
{
    uint32_t *table = field_ptr(&p->cfg, e->key);
    uint64_t v;
    if (!is_list(e)) {
        int r = cfg_parse_u64(e->val->text, &v);
        if (r != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (!is_pow2(v))
            return bad_value(p, e, "is not a power of two");
        if (v > DIVISIONS_MAX)
            return bad_value(p, e, "is too large");
        for (unsigned i = 0; i < TS_ROUNDUP_INTERVALS; i++)
            table[i] = (uint32_t)v;
        return false;
    }

    static const char interval_range[] = "intervals are sizes in MiB that are powers of two, "
                                         "or '>' for all later intervals";
    static const char division_range[] = "must be 0 or a power of two <= 2147483648";
    uint32_t work[TS_ROUNDUP_INTERVALS];
    memcpy(work, table, sizeof work);
    bool seen = false; /* an explicit K:V came before */
    /* The last explicit interval; '>' fills the intervals after it. Before any, PyTorch counts
     * from interval 0, so a leading '>' leaves interval 0 (below 2 MiB) as it was. */
    unsigned last = 0;
    size_t i = e->val->pos + 1;
    token k, val;
    while (list_next(p->text, &i, &k, &val)) {
        int r = cfg_parse_u64(val.text, &v);
        if (r != NUM_OK)
            return bad_item(p, e, "division", &val, num_problem(r), division_range);
        if (v != 0 && !is_pow2(v))
            return bad_item(p, e, "division", &val, "is not 0 or a power of two", division_range);
        if (v > DIVISIONS_MAX)
            return bad_item(p, e, "division", &val, "is too large", division_range);
        if (strcmp(k.text, ">") == 0) {
            for (unsigned j = last + 1; j < TS_ROUNDUP_INTERVALS; j++)
                work[j] = (uint32_t)v;
            continue;
        }
        uint64_t mib;
        r = cfg_parse_u64(k.text, &mib);
        if (r != NUM_OK)
            return bad_item(p, e, "interval", &k, num_problem(r), interval_range);
        if (!is_pow2(mib))
            return bad_item(p, e, "interval", &k, "is not a power of two", interval_range);
        unsigned idx = log2_floor(mib);
        if (idx > TS_ROUNDUP_INTERVALS - 1)
            idx = TS_ROUNDUP_INTERVALS - 1;
        if (!seen)
            for (unsigned j = 0; j < idx; j++)
                work[j] = (uint32_t)v;
        work[idx] = (uint32_t)v;
        last = idx;
        seen = true;
    }
    memcpy(table, work, sizeof work);
    return false;
}

/* Apply one entry to p->cfg. Returns true if there was a problem, in which case nothing was
 * written: every handler checks the whole value before storing it. */
/* A path template: printable ASCII without spaces, and % only as %p, %n or %%. The file itself
 * is created later with O_EXCL|O_NOFOLLOW, so the template never needs to be trusted further. */
static bool path_template_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c >= 0x7f)
            return false;
        if (c == '%') {
            s++;
            if (*s != 'p' && *s != 'n' && *s != '%')
                return false;
        }
    }
    return true;
}

static bool parse_value(parser *p, const entry *e)
{
    const key_desc *k = e->key;
    ts_config *cfg = &p->cfg;
    const char *s = e->val->text;
    uint64_t v;
    int r;

    if (is_list(e) && k->kind != KIND_DIVISIONS && k->kind != KIND_NA_RAW)
        return bad_value(p, e, "is a list");

    switch ((enum value_kind)k->kind) {
    case KIND_MIB: {
        size_t *f = field_ptr(cfg, k);
        if ((k->flags & F_UNLIMITED) && strcmp(s, "unlimited") == 0) {
            *f = SIZE_MAX;
            break;
        }
        if ((r = cfg_parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        uint64_t min = (k->flags & F_MIN_LARGE_SEG) ? cfg->large_segment_size / MIB : k->min;
        if (v < min)
            return bad_value(p, e, "is too small");
        /* Every size is bounded: a page or segment larger than any device makes every request
         * it applies to fail (an out-of-memory line blaming a full device), and bytes past the
         * key's bound would wrap, in the product or in a later sum with a request (a page of
         * 2^44 MiB rounded to 0 bytes divided by zero). PyTorch caps the product instead. */
        if (v > (k->max ? k->max : MIB_KEY_MAX))
            return bad_value(p, e, "is too large");
        *f = (size_t)v * MIB;
        break;
    }
    case KIND_SIZE:
        if ((r = parse_size(s, field_ptr(cfg, k))) != NUM_OK)
            return bad_value(p, e, r == NUM_RANGE ? "is too large" : "is not a size");
        break;
    case KIND_BOOL:
        if (!parse_bool(s, field_ptr(cfg, k)))
            return bad_value(p, e, "is not a boolean");
        break;
    case KIND_U32:
        if ((r = cfg_parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (v < k->min)
            return bad_value(p, e, "is too small");
        if (v > k->max)
            return bad_value(p, e, "is too large");
        *(uint32_t *)field_ptr(cfg, k) = (uint32_t)v;
        break;
    case KIND_FRACTION: {
        double d;
        if ((k->flags & F_OPEN) && strcmp(s, "off") == 0) {
            d = 0.0;
        } else {
            if ((r = cfg_parse_double(s, &d)) != NUM_OK)
                return bad_value(p, e, r == NUM_RANGE ? "is out of range" : "is not a number");
            bool ok = (k->flags & F_OPEN) ? (d > 0.0 && d < 1.0) : (d >= 0.0 && d <= 1.0);
            if (!ok)
                return bad_value(p, e, "is out of range");
        }
        *(double *)field_ptr(cfg, k) = d;
        break;
    }
    case KIND_DIVISIONS:
        if (parse_divisions(p, e))
            return true;
        break;
    case KIND_CHOICE: {
        const choice *c;
        for (c = k->choices; c->name; c++)
            if (strcmp(c->name, s) == 0)
                break;
        if (!c->name)
            return bad_value(p, e, "is not a valid option");
        set_enum(cfg, k, c->value);
        break;
    }
    case KIND_PATH: {
        char *dst = field_ptr(cfg, k);
        if (value_text(p, e, dst, TS_CONFIG_PATH_MAX) >= TS_CONFIG_PATH_MAX) {
            dst[0] = '\0';
            return bad_value(p, e, "is too long");
        }
        if (!path_template_ok(dst)) {
            dst[0] = '\0';
            return bad_value(p, e, "is not a path template");
        }
        break;
    }
    case KIND_NA_BOOL: {
        bool b;
        if (!parse_bool(s, &b))
            return bad_value(p, e, "is not a boolean");
        uint32_t bit = UINT32_C(1) << na_bit(k);
        cfg->not_applicable.bools = b ? (cfg->not_applicable.bools | bit)
                                      : (cfg->not_applicable.bools & ~bit);
        break;
    }
    case KIND_NA_POW2:
        if ((r = cfg_parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (!is_pow2(v))
            return bad_value(p, e, "is not a power of two");
        if (v > k->max)
            return bad_value(p, e, "is too large");
        cfg->not_applicable.pinned_num_register_threads = (uint32_t)v;
        break;
    case KIND_NA_MIB:
        if ((r = cfg_parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (v < k->min)
            return bad_value(p, e, "is too small");
        if (v > SIZE_MAX)
            return bad_value(p, e, "is out of range");
        cfg->not_applicable.pinned_reserve_segment_size_mb = (size_t)v;
        break;
    case KIND_NA_RAW: {
        char *dst = key_index(k) == KEY_EXPANDABLE_SEGMENTS_RESERVE
                        ? cfg->not_applicable.expandable_segments_reserve
                        : cfg->not_applicable.expandable_segments_reserve_by_class;
        char tmp[TS_CONFIG_RAW_MAX];
        if (value_text(p, e, tmp, sizeof tmp) >= sizeof tmp) {
            char what[64];
            snprintf(what, sizeof what, "is too long (tessera keeps at most %d characters)",
                     TS_CONFIG_RAW_MAX - 1);
            return bad_value(p, e, what);
        }
        memcpy(dst, tmp, sizeof tmp);
        break;
    }
    }
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* Unknown keys                                                                                */
/* ------------------------------------------------------------------------------------------ */

static unsigned edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned row[64];
    if (lb >= sizeof row / sizeof row[0])
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest key within edit distance 2, or the key this one lacks the "_mb" unit of. */
static const char *suggest(const char *name)
{
    const char *best = NULL;
    unsigned best_d = 3;
    size_t ln = strlen(name);
    for (unsigned i = 0; i < KEY_COUNT; i++) {
        size_t lk = strlen(cfg_keys[i].name);
        if (lk == ln + 3 && strncmp(cfg_keys[i].name, name, ln) == 0 &&
            strcmp(cfg_keys[i].name + ln, "_mb") == 0)
            return cfg_keys[i].name;
        if ((ln > lk ? ln - lk : lk - ln) > 2)
            continue;
        unsigned d = edit_distance(name, cfg_keys[i].name);
        if (d < best_d) {
            best_d = d;
            best = cfg_keys[i].name;
        }
    }
    return best;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void unknown_key(parser *p, const token *key)
{
    if (p->mode == TS_CONFIG_LENIENT) {
        uint64_t h = hash_name(key->text);
        for (unsigned i = 0; i < p->unknown_count; i++)
            if (p->unknown_seen[i] == h)
                return; /* warned about already */
        if (p->unknown_count < UNKNOWN_SEEN_MAX)
            p->unknown_seen[p->unknown_count++] = h;
    }
    char q[SHOW_MAX * 4 + 8];
    cfg_show(q, sizeof q, key->text, key->len);
    const char *s = suggest(key->text);
    if (s)
        problem(p, "unknown key '%s' at position %zu (did you mean '%s'?)", q, key->pos, s);
    else
        problem(p, "unknown key '%s' at position %zu (see docs/configuration.md for the keys)", q,
                key->pos);
}

/* ------------------------------------------------------------------------------------------ */
/* The walk                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Skip to just after the next ',' outside brackets (or to the end). */
static void recover(const char *s, size_t *i, int depth)
{
    token t;
    for (;;) {
        cfg_next_token(s, i, &t);
        switch (t.type) {
        case T_END: return;
        case T_LBRACKET: depth = 1; break;
        case T_RBRACKET: depth = 0; break;
        case T_COMMA:
            if (depth == 0)
                return;
            break;
        default: break;
        }
    }
}

static void apply_entry(parser *p, const token *key, const entry *e0)
{
    const key_desc *k = key_lookup(key->text);
    if (!k) {
        if (p->pass == 2)
            unknown_key(p, key);
        return;
    }
    bool early = (k->flags & F_EARLY) != 0;
    if (early != (p->pass == 1))
        return;
    entry e = *e0;
    e.key = k;
    if (!parse_value(p, &e))
        p->given |= UINT64_C(1) << key_index(k);
}

/* Walk the whole string once. Returns -1 if a strict problem stopped it. */
static int walk(parser *p)
{
    const char *s = p->text;
    size_t i = 0;
    token key, t, val;
    char found[SHOW_MAX * 4 + 16], kq[SHOW_MAX * 4 + 8];

    for (;;) {
        cfg_next_token(s, &i, &key);
        if (key.type == T_END)
            return 0;
        if (key.type != T_WORD) {
            if (syntax_problem(p, "position %zu: found '%c' where a key was expected "
                                  "(syntax: key:value,key:value,...)", key.pos, key.text[0]))
                return -1;
            if (key.type != T_COMMA)
                recover(s, &i, key.type == T_LBRACKET);
            continue;
        }
        cfg_show(kq, sizeof kq, key.text, strlen(key.text));
        if (token_too_long(&key)) {
            if (syntax_problem(p, "position %zu: key '%s' is too long (at most %d characters)",
                               key.pos, kq, TS_CONFIG_TOKEN_MAX))
                return -1;
            recover(s, &i, 0);
            continue;
        }

        cfg_next_token(s, &i, &t);
        if (t.type != T_COLON) {
            cfg_show_token(found, sizeof found, &t);
            if (syntax_problem(p, "key '%s' at position %zu: expected ':' at position %zu but "
                                  "found %s (syntax: key:value)", kq, key.pos, t.pos, found))
                return -1;
            if (t.type == T_END)
                return 0;
            if (t.type != T_COMMA)
                recover(s, &i, t.type == T_LBRACKET);
            continue;
        }

        cfg_next_token(s, &i, &val);
        entry e = { .key = NULL, .key_pos = key.pos, .val = &val, .list_end = 0 };
        if (val.type == T_WORD) {
            if (token_too_long(&val)) {
                if (syntax_problem(p, "key '%s' at position %zu: value at position %zu is too "
                                      "long (at most %d characters)", kq, key.pos, val.pos,
                                   TS_CONFIG_TOKEN_MAX))
                    return -1;
                recover(s, &i, 0);
                continue;
            }
        } else if (val.type == T_LBRACKET) {
            /* list: WORD ':' WORD { ',' WORD ':' WORD } [','] ']' */
            bool bad = false;
            for (;;) {
                token ik, ic, iv, is;
                cfg_next_token(s, &i, &ik);
                if (ik.type == T_RBRACKET)
                    break;
                const token *culprit = NULL;
                const char *expected = NULL;
                if (ik.type != T_WORD || token_too_long(&ik)) {
                    culprit = &ik, expected = "K:V or ']'";
                } else {
                    cfg_next_token(s, &i, &ic);
                    if (ic.type != T_COLON) {
                        culprit = &ic, expected = "':'";
                    } else {
                        cfg_next_token(s, &i, &iv);
                        if (iv.type != T_WORD || token_too_long(&iv)) {
                            culprit = &iv, expected = "a value";
                        } else {
                            cfg_next_token(s, &i, &is);
                            if (is.type == T_RBRACKET)
                                break;
                            if (is.type != T_COMMA)
                                culprit = &is, expected = "',' or ']'";
                        }
                    }
                }
                if (!culprit)
                    continue;
                if (culprit->type == T_END) {
                    if (syntax_problem(p, "key '%s' at position %zu: the list opened at position "
                                          "%zu is not closed (expected %s but reached the end)",
                                       kq, key.pos, val.pos, expected))
                        return -1;
                    return 0;
                }
                cfg_show_token(found, sizeof found, culprit);
                if (syntax_problem(p, "key '%s' at position %zu: expected %s at position %zu in "
                                      "the list but found %s%s (syntax: [K:V,K:V,...])", kq,
                                   key.pos, expected, culprit->pos, found,
                                   token_too_long(culprit) ? " (too long)" : ""))
                    return -1;
                recover(s, &i, culprit->type == T_RBRACKET ? 0 : 1);
                bad = true;
                break;
            }
            if (bad)
                continue;
            e.list_end = i;
        } else {
            cfg_show_token(found, sizeof found, &val);
            if (syntax_problem(p, "key '%s' at position %zu: missing value at position %zu "
                                  "(found %s)", kq, key.pos, val.pos, found))
                return -1;
            if (val.type == T_END)
                return 0;
            if (val.type != T_COMMA)
                recover(s, &i, 0);
            continue;
        }

        cfg_next_token(s, &i, &t);
        if (t.type != T_END && t.type != T_COMMA) {
            cfg_show_token(found, sizeof found, &t);
            if (syntax_problem(p, "key '%s' at position %zu: expected ',' or the end at position "
                                  "%zu but found %s (syntax: key:value,key:value)", kq, key.pos,
                               t.pos, found))
                return -1;
            recover(s, &i, t.type == T_LBRACKET);
            continue;
        }
        apply_entry(p, &key, &e);
        if (p->failed)
            return -1;
        if (t.type == T_END)
            return 0;
    }
}

/* tessera's default policy, for a string (or no string) that says nothing about expandable
 * segments, stitching or defragment: defragment (2 MiB pages in coarse handles) with
 * stitching only under pressure, chosen by the rule in docs/BENCHMARKS.md ("The default at the
 * floor"). Any of those three keys, in any variable, gives the policy it names instead:
 * expandable_segments:False is PyTorch's policy, expandable_segments:True PyTorch's expandable
 * segments. */
static void default_policy(parser *p)
{
    const uint64_t names_policy = (UINT64_C(1) << KEY_EXPANDABLE_SEGMENTS) |
                                  (UINT64_C(1) << KEY_STITCHING) | (UINT64_C(1) << KEY_DEFRAGMENT);
    if (p->given & names_policy)
        return;
    p->cfg.defragment = p->cfg.expandable_segments = p->cfg.stitching = true;
    if (!(p->given & (UINT64_C(1) << KEY_STITCH_WHEN)))
        p->cfg.stitch_when = TS_STITCH_PRESSURE;
}

int ts_config_parse(ts_config *out, const char *text, const char *varname, ts_config_mode mode,
                    ts_config_diag *diag, ts_config_warn_fn warn, void *user)
{
    parser p;
    memset(&p, 0, sizeof p);
    const char *named = ts_config_named_policy(text);
    p.text = named ? named : text ? text : "";
    p.var = varname ? varname : "config";
    p.mode = mode == TS_CONFIG_STRICT ? TS_CONFIG_STRICT : TS_CONFIG_LENIENT;
    p.diag = diag;
    p.warn = warn;
    p.user = user;
    if (diag)
        diag->message[0] = '\0';
    ts_config_defaults(&p.cfg);

    p.pass = 1;
    if (walk(&p) != 0)
        return -1;
    if (!(p.given & (UINT64_C(1) << KEY_MAX_NON_SPLIT_ROUNDING_MB)))
        p.cfg.max_non_split_rounding = p.cfg.large_segment_size;
    p.pass = 2;
    if (walk(&p) != 0)
        return -1;

    default_policy(&p);
    if (p.cfg.defragment && (p.given & (UINT64_C(1) << KEY_DEFRAGMENT))) {
        if (!(p.given & (UINT64_C(1) << KEY_EXPANDABLE_SEGMENTS)))
            p.cfg.expandable_segments = true;
        if (!(p.given & (UINT64_C(1) << KEY_STITCHING)))
            p.cfg.stitching = true;
    }
    /* defragment grows in coarse handles (few driver calls) and stitches by pages, which lend
     * from any handle: the floor of a handle per page at a tenth of its driver time */
    if (p.cfg.defragment && !(p.given & (UINT64_C(1) << KEY_HANDLE_POLICY)))
        p.cfg.handle_policy = TS_HANDLES_COARSE;
    /* and, stitching under pressure (the default), grows sequentially by whole coarse handles:
     * one costs a growth what a page does. Not when stitching first: it aims at the floor with
     * room to spare too, and pages held ahead in partly used handles cannot go back (on
     * cs336-ctx128-forward its smallest device would go from +0.06% to +1.16%). */
    if (p.cfg.defragment && p.cfg.handle_policy == TS_HANDLES_COARSE &&
        p.cfg.stitch_when == TS_STITCH_PRESSURE &&
        !(p.given & (UINT64_C(1) << KEY_GROWTH_BATCH_MB)))
        p.cfg.growth_batch = p.cfg.large_segment_size;
    /* Stitching maps pages of expandable segments: it cannot run without them. A string that
     * asks for both is refused (strict) or has expandable segments win over the "False". */
    if (p.cfg.stitching && !p.cfg.expandable_segments &&
        (p.given & (UINT64_C(1) << KEY_EXPANDABLE_SEGMENTS))) {
        bool by_defragment = !(p.given & (UINT64_C(1) << KEY_STITCHING));
        if (problem(&p, "stitching:True%s needs expandable segments, and expandable_segments:False "
                        "is given: drop one of them",
                    by_defragment ? " (from defragment:True)" : ""))
            return -1;
    }
    ts_config_resolve(&p.cfg, NULL);
    for (unsigned i = KEY_FIRST_NA; i < KEY_COUNT; i++)
        if (p.given & (UINT64_C(1) << i))
            p.cfg.not_applicable_mask |= UINT32_C(1) << (i - KEY_FIRST_NA);

    /* notes, one line each */
    if (p.cfg.backend == TS_BACKEND_CUDA_MALLOC_ASYNC) {
        char list[512];
        sbuf b;
        sb_init(&b, list, sizeof list);
        for (unsigned i = 0; i < KEY_COUNT; i++) {
            if ((cfg_keys[i].flags & F_NATIVE_ONLY) && (p.given & (UINT64_C(1) << i))) {
                sb_str(&b, b.len ? ", " : "");
                sb_str(&b, cfg_keys[i].name);
            }
        }
        if (b.len)
            note(&p, "backend:cudaMallocAsync ignores %s (tessera passes allocations through "
                     "uncached)", list);
    }
    for (unsigned i = KEY_FIRST_NA; i < KEY_COUNT; i++)
        if (p.given & (UINT64_C(1) << i))
            note(&p, "key '%s' is not applicable to tessera (accepted and ignored)",
                 cfg_keys[i].name);

    *out = p.cfg;
    return 0;
}

int ts_config_from_env(ts_config *out, const char **source, ts_config_diag *diag,
                       ts_config_warn_fn warn, void *user)
{
    static const struct {
        const char *name;
        ts_config_mode mode;
    } vars[] = {
        { "TESSERA_ALLOC_CONF", TS_CONFIG_STRICT },
        { "PYTORCH_CUDA_ALLOC_CONF", TS_CONFIG_LENIENT },
        { "PYTORCH_ALLOC_CONF", TS_CONFIG_LENIENT },
    };
    if (source)
        *source = NULL;
    if (diag)
        diag->message[0] = '\0';
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].name);
        if (!v)
            continue;
        if (source)
            *source = vars[i].name;
        return ts_config_parse(out, v, vars[i].name, vars[i].mode, diag, warn, user);
    }
    return ts_config_parse(out, "", NULL, TS_CONFIG_STRICT, diag, warn, user);
}
