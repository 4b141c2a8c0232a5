/* Bounded string building, number reading and writing (locale-independent), and the tokenizer. */
#include "config/internal.h"

#include <langinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Small helpers: bounded string building, numbers                                             */
/* ------------------------------------------------------------------------------------------ */

void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->len < b->cap) {
        size_t room = b->cap - 1 - b->len;
        size_t k = n < room ? n : room;
        memcpy(b->buf + b->len, s, k);
        b->buf[b->len + k] = '\0';
    }
    b->len += n;
}

void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    /* Longer than tmp: write straight into the caller's buffer. */
    if (b->len < b->cap) {
        va_start(ap, fmt);
        vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void sb_init(sbuf *b, char *buf, size_t cap)
{
    b->buf = cap ? buf : NULL;
    b->cap = buf ? cap : 0;
    b->len = 0;
    if (b->cap)
        b->buf[0] = '\0';
}

/* Decimal digits only: no sign, no spaces, no trailing text (stricter than std::stoull). */
int cfg_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!is_digit(*s))
        return NUM_SYNTAX;
    for (; *s; s++) {
        if (!is_digit(*s))
            return NUM_SYNTAX;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return NUM_RANGE; /* keep scanning would only confirm it is too large */
        v = v * 10 + d;
    }
    *out = v;
    return NUM_OK;
}

/* A decimal number: [-]digits[.digits][e[+-]digits] (at least one mantissa digit). Checked by
 * hand, then converted by strtod with '.' swapped for the locale's radix character, so that a
 * host process running under a decimal-comma locale reads "0.5" as one half. */
int cfg_parse_double(const char *s, double *out)
{
    const char *p = s;
    unsigned digits = 0;
    if (*p == '-')
        p++;
    while (is_digit(*p))
        p++, digits++;
    const char *dot = NULL;
    if (*p == '.') {
        dot = p++;
        while (is_digit(*p))
            p++, digits++;
    }
    if (digits == 0)
        return NUM_SYNTAX;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return NUM_SYNTAX;
        while (is_digit(*p))
            p++;
    }
    if (*p)
        return NUM_SYNTAX;

    char tmp[TS_CONFIG_TOKEN_MAX + 16];
    const char *radix = nl_langinfo(RADIXCHAR);
    size_t rlen = radix ? strlen(radix) : 0;
    const char *conv = s;
    if (dot && rlen && strcmp(radix, ".") != 0) {
        size_t head = (size_t)(dot - s), tail = strlen(dot + 1);
        if (head + rlen + tail + 1 > sizeof tmp)
            return NUM_SYNTAX;
        memcpy(tmp, s, head);
        memcpy(tmp + head, radix, rlen);
        memcpy(tmp + head + rlen, dot + 1, tail + 1);
        conv = tmp;
    }
    char *end;
    double v = strtod(conv, &end);
    if (*end)
        return NUM_SYNTAX;
    if (v != v || v > 1e308 || v < -1e308)
        return NUM_RANGE;
    *out = v == 0 ? 0.0 : v; /* no negative zero */
    return NUM_OK;
}

/* Shortest %g spelling that reads back to the same double, always with '.' as the radix. */
void cfg_format_double(double d, char *buf, size_t n)
{
    for (int prec = 1; prec <= 17; prec++) {
        char raw[64];
        snprintf(raw, sizeof raw, "%.*g", prec, d);
        size_t o = 0;
        bool in_radix = false;
        for (const char *r = raw; *r && o + 1 < n; r++) {
            bool plain = is_digit(*r) || *r == '-' || *r == '+' || *r == 'e';
            if (plain) {
                buf[o++] = *r;
                in_radix = false;
            } else if (!in_radix) {
                buf[o++] = '.'; /* a (possibly multibyte) locale radix */
                in_radix = true;
            }
        }
        buf[o] = '\0';
        double back;
        if (cfg_parse_double(buf, &back) == NUM_OK && back == d)
            return;
    }
}

/* Quote untrusted text for a message: at most SHOW_MAX characters, control bytes escaped. */
void cfg_show(char *dst, size_t cap, const char *s, size_t n)
{
    sbuf b;
    sb_init(&b, dst, cap);
    size_t i;
    for (i = 0; i < n && i < SHOW_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            sb_printf(&b, "\\x%02x", c);
        else
            sb_put(&b, (const char *)&s[i], 1);
    }
    if (i < n)
        sb_str(&b, "...");
}

/* ------------------------------------------------------------------------------------------ */
/* Tokenizer                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static enum tok_type sep_type(char c)
{
    switch (c) {
    case ':': return T_COLON;
    case ',': return T_COMMA;
    case '[': return T_LBRACKET;
    case ']': return T_RBRACKET;
    default: return T_WORD;
    }
}

void cfg_next_token(const char *s, size_t *i, token *t)
{
    while (is_space(s[*i]))
        (*i)++;
    t->pos = *i;
    t->len = 0;
    t->text[0] = '\0';
    if (s[*i] == '\0') {
        t->type = T_END;
        return;
    }
    t->type = sep_type(s[*i]);
    if (t->type != T_WORD) {
        t->text[0] = s[*i];
        t->text[1] = '\0';
        t->len = 1;
        (*i)++;
        return;
    }
    for (; s[*i] && sep_type(s[*i]) == T_WORD; (*i)++) {
        if (is_space(s[*i]))
            continue;
        if (t->len < TS_CONFIG_TOKEN_MAX)
            t->text[t->len] = s[*i];
        t->len++;
    }
    t->text[t->len < TS_CONFIG_TOKEN_MAX ? t->len : TS_CONFIG_TOKEN_MAX] = '\0';
}

bool token_too_long(const token *t)
{
    return t->len > TS_CONFIG_TOKEN_MAX;
}

/* "',' at position 7", "'abc' at position 7", "the end" */
void cfg_show_token(char *dst, size_t cap, const token *t)
{
    if (t->type == T_END) {
        snprintf(dst, cap, "the end");
        return;
    }
    char q[SHOW_MAX * 4 + 8];
    cfg_show(q, sizeof q, t->text, strlen(t->text));
    snprintf(dst, cap, "'%s'%s", q, token_too_long(t) ? "..." : "");
}
