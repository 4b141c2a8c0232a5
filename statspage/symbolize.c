/* Naming a snapshot's raw frames after the fact (statspage/symbolize.h).
 *
 * One pass over the opcodes with a stack of items, as an unpickler has, but the items are only
 * where each value lies in the input: nothing is built. A dict shaped like a frame is judged
 * when its list takes it (APPENDS), and the pass records an edit: a new name string in place of
 * the old one, or the whole dict left out. The output is the input with the edits applied.
 */
#include "statspage/symbolize.h"

#include "statspage/snapshot.h"
#include "statspage/symbols.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IT_MARK, IT_STR, IT_SCALAR, IT_DICT, IT_LIST, IT_TUPLE };
enum { HAVE_NAME = 1, HAVE_FILE = 2, HAVE_LINE = 4 };

/* Where one value lies in the input. Offsets fit 32 bits: the input is at most 64 MiB. */
typedef struct item {
    uint8_t kind;
    uint8_t have;           /* IT_DICT: which frame keys it has (HAVE_*) */
    uint32_t start;         /* its first opcode */
    uint32_t str_off, str_len; /* IT_STR: the string's bytes */
    uint32_t nm_start, nm_end; /* IT_DICT: the 'name' value's opcodes */
    uint32_t nm_off, nm_len;   /* ... and its bytes */
    uint32_t f_off, f_len;     /* IT_DICT: the 'filename' value's bytes */
} item;

/* Replace in[start, end) with rep (rep_len bytes; none: leave it out). */
typedef struct edit {
    uint32_t start, end;
    char *rep;
    uint32_t rep_len;
} edit;

typedef struct parser {
    const unsigned char *in;
    size_t n, pos;
    item *st;
    size_t nst, capst;
    uint32_t marks[TS_SYMBOLIZE_MAX_DEPTH]; /* stack indices of the open marks */
    size_t nmarks;
    edit *ed;
    size_t ned, caped;
    int64_t grow;           /* bytes the edits add to the output, less what they remove */
    size_t added;           /* bytes of all the new names */
    struct ts_symbols *sym;
    ts_symbolize_counts c;
    char *err;
    size_t errlen;
} parser;

static int fail(parser *p, size_t at, const char *what)
{
    snprintf(p->err, p->errlen, "not a snapshot tessera wrote: %s at byte %zu", what, at);
    return EINVAL;
}

static int push(parser *p, item it)
{
    if (p->nst == p->capst) {
        if (p->capst >= TS_SYMBOLIZE_MAX_ITEMS) {
            snprintf(p->err, p->errlen, "more than %u values open at once: refused",
                     TS_SYMBOLIZE_MAX_ITEMS);
            return EINVAL;
        }
        size_t ncap = p->capst ? p->capst * 2 : 1024;
        item *ns = realloc(p->st, ncap * sizeof *ns);
        if (!ns)
            return ENOMEM;
        p->st = ns;
        p->capst = ncap;
    }
    p->st[p->nst++] = it;
    return 0;
}

static int add_edit(parser *p, uint32_t start, uint32_t end, char *rep, uint32_t rep_len)
{
    if (p->ned == p->caped) {
        size_t ncap = p->caped ? p->caped * 2 : 256;
        edit *ne = realloc(p->ed, ncap * sizeof *ne);
        if (!ne) {
            free(rep);
            return ENOMEM;
        }
        p->ed = ne;
        p->caped = ncap;
    }
    p->ed[p->ned++] = (edit){start, end, rep, rep_len};
    return 0;
}

static bool str_is(const parser *p, const item *it, const char *s)
{
    size_t n = strlen(s);
    return it->kind == IT_STR && it->str_len == n && memcmp(p->in + it->str_off, s, n) == 0;
}

/* A raw frame's name: "0x" and 1 to 16 hex digits, nothing else. */
static bool raw_offset(const unsigned char *s, size_t n, uint64_t *off)
{
    if (n < 3 || n > 18 || s[0] != '0' || s[1] != 'x')
        return false;
    uint64_t v = 0;
    for (size_t i = 2; i < n; i++) {
        unsigned d;
        if (s[i] >= '0' && s[i] <= '9')
            d = s[i] - '0';
        else if (s[i] >= 'a' && s[i] <= 'f')
            d = s[i] - 'a' + 10;
        else
            return false;
        v = v << 4 | d;
    }
    *off = v;
    return true;
}

/* Is the file tessera's own (libtessera*)? */
static bool file_is_tessera(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libtessera", 10) == 0;
}

/* A frame dict d, whose opcodes are in[start, end): leave it out, name it, or leave it. */
static int judge_frame(parser *p, const item *d, uint32_t end)
{
    p->c.frames++;
    char path[PATH_MAX];
    if (d->f_len == 0 || d->f_len >= sizeof path ||
        memchr(p->in + d->f_off, '\0', d->f_len) != NULL)
        return 0;
    memcpy(path, p->in + d->f_off, d->f_len);
    path[d->f_len] = '\0';
    if (file_is_tessera(path)) {
        p->c.dropped++;
        p->grow -= (int64_t)(end - d->start);
        return add_edit(p, d->start, end, NULL, 0);
    }
    uint64_t off;
    if (!raw_offset(p->in + d->nm_off, d->nm_len, &off))
        return 0; /* named already */
    char name[256];
    /* a return address: the call is the instruction before it */
    if (off == 0 || !p->sym || !ts_symbols_lookup(p->sym, path, off - 1, name, sizeof name)) {
        p->c.unresolved++;
        return 0;
    }
    /* the pickle's strings are UTF-8: anything but printable ASCII becomes '?' */
    size_t len = strlen(name);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
            name[i] = '?';
    size_t old = d->nm_end - d->nm_start, rep_len = 5 + len;
    if ((int64_t)p->n + p->grow + (int64_t)rep_len - (int64_t)old > (int64_t)TS_SNAP_MAX_BYTES) {
        p->c.bounded++;
        return 0;
    }
    char *rep = malloc(rep_len);
    if (!rep)
        return ENOMEM;
    rep[0] = 'X'; /* BINUNICODE, little-endian length */
    for (int i = 0; i < 4; i++)
        rep[1 + i] = (char)(unsigned char)(len >> (8 * i));
    memcpy(rep + 5, name, len);
    p->c.named++;
    p->grow += (int64_t)rep_len - (int64_t)old;
    p->added += rep_len;
    return add_edit(p, d->nm_start, d->nm_end, rep, (uint32_t)rep_len);
}

/* Key/value pairs st[first, nst) into dict d, which notes the frame keys; at: the opcode that
 * ends them. */
static void dict_take(parser *p, item *d, size_t first, size_t at)
{
    for (size_t i = first; i + 1 < p->nst; i += 2) {
        const item *key = &p->st[i], *val = &p->st[i + 1];
        uint32_t vend = i + 2 < p->nst ? p->st[i + 2].start : (uint32_t)at;
        if (str_is(p, key, "name") && val->kind == IT_STR) {
            d->have |= HAVE_NAME;
            d->nm_start = val->start;
            d->nm_end = vend;
            d->nm_off = val->str_off;
            d->nm_len = val->str_len;
        } else if (str_is(p, key, "filename") && val->kind == IT_STR) {
            d->have |= HAVE_FILE;
            d->f_off = val->str_off;
            d->f_len = val->str_len;
        } else if (str_is(p, key, "line")) {
            d->have |= HAVE_LINE;
        }
    }
}

/* Values st[first, nst) into a list: a frame dict is judged here. */
static int list_take(parser *p, size_t first, size_t at)
{
    for (size_t i = first; i < p->nst; i++) {
        const item *v = &p->st[i];
        uint32_t vend = i + 1 < p->nst ? p->st[i + 1].start : (uint32_t)at;
        int e;
        if (v->kind == IT_DICT && v->have == (HAVE_NAME | HAVE_FILE | HAVE_LINE) &&
            (e = judge_frame(p, v, vend)) != 0)
            return e;
    }
    return 0;
}

/* The index above the innermost mark (the values of a SETITEMS or APPENDS start there). */
static size_t floor_of(const parser *p)
{
    return p->nmarks ? p->marks[p->nmarks - 1] + 1 : 0;
}

/* SETITEMS (mark: the pairs above the innermost mark) or SETITEM (one pair). */
static int setitems(parser *p, size_t at, bool mark)
{
    size_t first;
    if (mark) {
        if (p->nmarks == 0)
            return fail(p, at, "SETITEMS without a mark");
        first = p->marks[--p->nmarks] + 1;
    } else {
        if (p->nst < floor_of(p) + 3)
            return fail(p, at, "SETITEM without a dict and a pair");
        first = p->nst - 2;
    }
    size_t below = mark ? first - 2 : first - 1; /* first >= 1 with a mark: the mark's index */
    if ((p->nst - first) % 2 || (mark && first < 2) || p->st[below].kind != IT_DICT)
        return fail(p, at, "SETITEMS without a dict and pairs");
    dict_take(p, &p->st[below], first, at);
    p->nst = below + 1; /* the values and the mark go */
    return 0;
}

/* APPENDS (mark) or APPEND (one value). */
static int appends(parser *p, size_t at, bool mark)
{
    size_t first;
    if (mark) {
        if (p->nmarks == 0)
            return fail(p, at, "APPENDS without a mark");
        first = p->marks[--p->nmarks] + 1;
    } else {
        if (p->nst < floor_of(p) + 2)
            return fail(p, at, "APPEND without a list and a value");
        first = p->nst - 1;
    }
    size_t below = mark ? first - 2 : first - 1;
    if ((mark && first < 2) || p->st[below].kind != IT_LIST)
        return fail(p, at, "APPENDS without a list");
    int e = list_take(p, first, at);
    p->nst = below + 1;
    return e;
}

/* n bytes at the cursor, or NULL when fewer are left. */
static const unsigned char *take(parser *p, size_t n)
{
    if (p->n - p->pos < n)
        return NULL;
    const unsigned char *b = p->in + p->pos;
    p->pos += n;
    return b;
}

static uint32_t le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* One opcode. 1 at STOP, 0 to go on, else an error. */
static int step(parser *p)
{
    size_t at = p->pos;
    const unsigned char *b = take(p, 1);
    if (!b)
        return fail(p, at, "the end before STOP");
    item it = {.kind = IT_SCALAR, .start = (uint32_t)at};
    const unsigned char *a;
    switch (*b) {
    case 0x80: /* PROTO */
        if (at != 0 || !(a = take(p, 1)) || *a > 4)
            return fail(p, at, "a misplaced PROTO");
        return 0;
    case 'X': /* BINUNICODE */
    case 0x8c: { /* SHORT_BINUNICODE */
        size_t w = *b == 'X' ? 4 : 1;
        if (!(a = take(p, w)))
            return fail(p, at, "a cut string");
        size_t len = w == 4 ? le32(a) : *a;
        if (!take(p, len))
            return fail(p, at, "a string longer than the file");
        it.kind = IT_STR;
        it.str_off = (uint32_t)(at + 1 + w);
        it.str_len = (uint32_t)len;
        return push(p, it);
    }
    case 'J': case 'K': case 'M': case 'G': { /* BININT, BININT1, BININT2, BINFLOAT */
        size_t w = *b == 'J' ? 4 : *b == 'K' ? 1 : *b == 'M' ? 2 : 8;
        if (!take(p, w))
            return fail(p, at, "a cut number");
        return push(p, it);
    }
    case 0x8a: /* LONG1 */
        if (!(a = take(p, 1)) || *a > 9 || !take(p, *a))
            return fail(p, at, "a bad LONG1");
        return push(p, it);
    case 0x88: case 0x89: case 'N': /* NEWTRUE, NEWFALSE, NONE */
        return push(p, it);
    case '}': it.kind = IT_DICT; return push(p, it);
    case ']': it.kind = IT_LIST; return push(p, it);
    case ')': it.kind = IT_TUPLE; return push(p, it);
    case '(': /* MARK */
        if (p->nmarks == TS_SYMBOLIZE_MAX_DEPTH)
            return fail(p, at, "nesting too deep");
        p->marks[p->nmarks++] = (uint32_t)p->nst;
        it.kind = IT_MARK;
        return push(p, it);
    case 'u': return setitems(p, at, true);
    case 's': return setitems(p, at, false);
    case 'e': return appends(p, at, true);
    case 'a': return appends(p, at, false);
    case 0x85: case 0x86: case 0x87: { /* TUPLE1, TUPLE2, TUPLE3 */
        size_t k = (size_t)(*b - 0x84);
        if (p->nst < floor_of(p) + k)
            return fail(p, at, "a tuple of missing values");
        it.kind = IT_TUPLE;
        it.start = p->st[p->nst - k].start;
        p->nst -= k;
        return push(p, it);
    }
    case '.': /* STOP */
        if (p->nst != 1 || p->nmarks || p->st[0].kind != IT_DICT)
            return fail(p, at, "STOP without one dict");
        if (p->pos != p->n)
            return fail(p, p->pos, "bytes after STOP");
        return 1;
    default: {
        char what[48];
        snprintf(what, sizeof what, "opcode 0x%02x", *b);
        return fail(p, at, what);
    }
    }
}

static int cmp_edit(const void *a, const void *b)
{
    const edit *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* The input with the edits applied (an edit inside a dict left out goes with it). */
static int apply_edits(parser *p, unsigned char **out, size_t *outlen)
{
    if (p->ned) /* qsort must not be given a null array, even an empty one */
        qsort(p->ed, p->ned, sizeof *p->ed, cmp_edit);
    size_t cap = p->n + p->added + 1; /* every new name, none of the bytes left out */
    unsigned char *o = malloc(cap);
    if (!o)
        return ENOMEM;
    size_t len = 0, from = 0;
    for (size_t i = 0; i < p->ned; i++) {
        const edit *e = &p->ed[i];
        if (e->start < from)
            continue; /* inside one already applied */
        memcpy(o + len, p->in + from, e->start - from);
        len += e->start - from;
        if (e->rep_len) /* a frame left out replaces with nothing (and no array) */
            memcpy(o + len, e->rep, e->rep_len);
        len += e->rep_len;
        from = e->end;
    }
    memcpy(o + len, p->in + from, p->n - from);
    len += p->n - from;
    *out = o;
    *outlen = len;
    return 0;
}

int ts_snap_symbolize(const unsigned char *in, size_t n, struct ts_symbols *sym,
                      unsigned char **out, size_t *outlen, ts_symbolize_counts *c, char *err,
                      size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (n > TS_SNAP_MAX_BYTES) {
        snprintf(err, errlen, "%zu bytes, over the %u MiB a snapshot may have: refused", n,
                 TS_SNAP_MAX_BYTES >> 20);
        return EFBIG;
    }
    parser p = {.in = in, .n = n, .sym = sym, .err = err, .errlen = errlen};
    int e;
    while ((e = step(&p)) == 0)
        ;
    if (e == 1)
        e = apply_edits(&p, out, outlen);
    if (e == 0 && *outlen > TS_SNAP_MAX_BYTES) {
        /* only when frames nested in frames left out were counted twice: a forged file */
        snprintf(err, errlen, "the output would pass %u MiB: refused", TS_SNAP_MAX_BYTES >> 20);
        free(*out);
        *out = NULL;
        *outlen = 0;
        e = EFBIG;
    }
    if (e == ENOMEM)
        snprintf(err, errlen, "out of memory");
    if (e == 0 && c)
        *c = p.c;
    for (size_t i = 0; i < p.ned; i++)
        free(p.ed[i].rep);
    free(p.ed);
    free(p.st);
    return e;
}
