/* parse.c -- owns the request-body JSON reader: a strict RFC 8259 parser that builds json_loadb's
 * tree faster (exact fast path for numbers), with jansson itself parsing and reporting whatever it
 * does not accept. */
#define _POSIX_C_SOURCE 200809L

#include "wire/parse.h"

_Static_assert(sizeof(json_int_t) == 8, "json_int_t must be 64 bits");

#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nesting deeper than this is left to jansson (whose own limit is
 * JSON_PARSER_MAX_DEPTH, 2048). */
#define PARSE_MAX_DEPTH 1000

/* The json_loadb flags this reader implements; any other flag goes to jansson. */
#define PARSE_FLAGS ((size_t)(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY))

/* Numbers of more characters than this go to strtod through a heap copy. */
#define PARSE_NUMBER_LEN 64

/* The reader's state over one body. Every parse_* function returns 0, or -1 to
 * give up: on malformed or unusual input (left to jansson, which then accepts
 * it the same way or reports the error) or when out of memory. */
typedef struct {
    const unsigned char *p, *end;
    int depth;
    char *buf; /* scratch: decoded strings with escapes, long numbers */
    size_t cap;
    int wide; /* long double carries 64 significant bits here (parse_wide_ok), checked
                 * once per body */
} parse_state;

/* Exact powers of ten for the fast number path: 10^k is a double exactly for k <= 22. */
static const double parse_pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* 1 for the bytes that stand for themselves in a string fast scan: 0x20..0x7F
 * except '"' and '\\'. */
static const unsigned char parse_plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static int parse_value(parse_state *ps, json_t **out);

static void parse_ws(parse_state *ps)
{
    const unsigned char *p = ps->p, *end = ps->end;

    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    ps->p = p;
}

/* After an element or member: skip whitespace, then a ',' (returns 1: another follows, and
 * the whitespace after it is skipped), the closing byte `close` (returns 0, consumed) or
 * anything else, the end of the text included (returns -1). */
static int parse_separator(parse_state *ps, unsigned char close)
{
    parse_ws(ps);
    if (ps->p >= ps->end)
        return -1;
    if (*ps->p == ',') {
        ps->p++;
        parse_ws(ps);
        return 1;
    }
    if (*ps->p != close)
        return -1;
    ps->p++;
    return 0;
}

/* Make the scratch buffer hold at least n bytes. */
static int parse_reserve(parse_state *ps, size_t n)
{
    char *grown;
    size_t cap;

    if (n <= ps->cap)
        return 0;
    cap = ps->cap > 0 ? ps->cap : 256;
    while (cap < n) {
        if (cap > ((size_t)-1) / 2)
            return -1;
        cap *= 2;
    }
    grown = realloc(ps->buf, cap);
    if (grown == NULL)
        return -1;
    ps->buf = grown;
    ps->cap = cap;
    return 0;
}

static int parse_is_digit(const unsigned char *p, const unsigned char *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

#if defined(__x86_64__) && LDBL_MANT_DIG == 64
/* Exact powers of ten in x87 extended precision: 10^k = 2^k 5^k with 5^k < 2^64 for k <= 27. */
static const long double parse_pow10l[28] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,
                                             1e7L,  1e8L,  1e9L,  1e10L, 1e11L, 1e12L, 1e13L,
                                             1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L,
                                             1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};

/* Whether long double arithmetic really carries 64 significant bits here (not
 * under an emulator that computes it in double precision). */
static int parse_wide_ok(void)
{
    static const volatile long double three = 3.0L;
    long double third = 1.0L / three;
    uint64_t m;

    memcpy(&m, &third, sizeof m);
    return (m & 0x7FF) != 0;
}

/* mant * 10^e10 (mant < 2^64 exact, |e10| <= 27, so the result is a normal
 * double) correctly rounded into *x, from one extended-precision operation on
 * exact operands (error <= 1/2 of its 64-bit ulp) rounded to double. Correct
 * unless that result lies within 2 of its 64-bit ulps of a midpoint between
 * doubles (its 11 low bits near 0x400): then 0, and strtod decides. */
static int parse_wide(int wide, uint64_t mant, long e10, double *x)
{
    long double r = (long double)mant;
    uint64_t m;
    unsigned low;

    if (!wide)
        return 0;
    r = e10 < 0 ? r / parse_pow10l[-e10] : r * parse_pow10l[e10];
    memcpy(&m, &r, sizeof m); /* x87 extended: the 64-bit significand first */
    low = (unsigned)(m & 0x7FF);
    if (low >= 0x3FE && low <= 0x402)
        return 0;
    *x = (double)r;
    return 1;
}
#else
static int parse_wide_ok(void)
{
    return 0;
}

static int parse_wide(int wide, uint64_t mant, long e10, double *x)
{
    (void)wide;
    (void)mant;
    (void)e10;
    (void)x;
    return 0;
}
#endif

/* The number at ps->p: a JSON integer when it has neither fraction nor exponent
 * (as jansson: it must fit json_int_t, else jansson reports it), otherwise a
 * real equal to strtod's, bit for bit: up to 2^53 significant and 10^|e| with
 * |e| <= 22, one exact multiplication or division gives the correctly rounded
 * value (Clinger); up to 19 digits and |e| <= 27, one x87 extended operation
 * does unless it lands near a midpoint (parse_wide); anything else goes to
 * strtod. */
static int parse_number(parse_state *ps, json_t **out)
{
    const unsigned char *p = ps->p, *end = ps->end, *start = p, *digits;
    uint64_t mant = 0;
    long e10 = 0, ex = 0;
    int neg = 0, is_real = 0, nd = 0, dropped = 0, exp_neg = 0, d;
    size_t len;
    double x;
    char *endp, local[PARSE_NUMBER_LEN + 1], *text;

    if (*p == '-') {
        neg = 1;
        p++;
    }
    digits = p;
    if (p < end && *p == '0') {
        p++;
        if (parse_is_digit(p, end))
            return -1; /* leading zero */
    } else if (parse_is_digit(p, end)) {
        while (parse_is_digit(p, end)) {
            d = *p++ - '0';
            if (nd < 19) {
                mant = mant * 10 + (uint64_t)d;
                nd++;
            } else {
                e10++;
                dropped |= d;
            }
        }
    } else {
        return -1;
    }
    if (!parse_is_digit(p, end) && p < end && *p == '.') {
        is_real = 1;
        p++;
        if (!parse_is_digit(p, end))
            return -1;
        while (parse_is_digit(p, end)) {
            d = *p++ - '0';
            if (nd < 19) {
                if (mant != 0 || d != 0) {
                    mant = mant * 10 + (uint64_t)d;
                    nd++;
                }
                e10--;
            } else {
                dropped |= d;
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_real = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            exp_neg = *p == '-';
            p++;
        }
        if (!parse_is_digit(p, end))
            return -1;
        while (parse_is_digit(p, end)) {
            if (ex < 1000000)
                ex = ex * 10 + (*p - '0');
            p++;
        }
        e10 += exp_neg ? -ex : ex;
    }
    ps->p = p;
    if (!is_real) { /* json_int_t is 64 bits (jansson 2.14 on LP64) */
        if (p - digits > 19 || mant > (uint64_t)INT64_MAX + (uint64_t)neg)
            return -1; /* beyond json_int_t: jansson reports it */
        if (neg)
            *out = json_integer(mant == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(json_int_t)mant);
        else
            *out = json_integer((json_int_t)mant);
        return *out != NULL ? 0 : -1;
    }
    if (!dropped && mant <= (UINT64_C(1) << 53) && e10 >= -22 && e10 <= 22) {
        x = (double)mant;
        x = e10 < 0 ? x / parse_pow10[-e10] : x * parse_pow10[e10];
        *out = json_real(neg ? -x : x);
        return *out != NULL ? 0 : -1;
    }
    if (!dropped && mant != 0 && e10 >= -27 && e10 <= 27 && parse_wide(ps->wide, mant, e10, &x)) {
        *out = json_real(neg ? -x : x);
        return *out != NULL ? 0 : -1;
    }
    /* strtod, as jansson does: the same digits give the same double */
    if (localeconv()->decimal_point[0] != '.' || localeconv()->decimal_point[1] != '\0')
        return -1;
    len = (size_t)(p - start);
    text = local;
    if (len > PARSE_NUMBER_LEN) {
        if (parse_reserve(ps, len + 1) != 0)
            return -1;
        text = ps->buf;
    }
    memcpy(text, start, len);
    text[len] = '\0';
    errno = 0;
    x = strtod(text, &endp);
    if (endp != text + len || ((x == HUGE_VAL || x == -HUGE_VAL) && errno == ERANGE))
        return -1; /* overflow: jansson reports it */
    *out = json_real(x);
    return *out != NULL ? 0 : -1;
}

/* Value of the four hex digits at p (p + 4 <= end), or -1. */
static long parse_hex4(const unsigned char *p)
{
    long v = 0;
    int i, c;

    for (i = 0; i < 4; i++) {
        c = p[i];
        if (c >= '0' && c <= '9')
            c -= '0';
        else if (c >= 'a' && c <= 'f')
            c -= 'a' - 10;
        else if (c >= 'A' && c <= 'F')
            c -= 'A' - 10;
        else
            return -1;
        v = v * 16 + c;
    }
    return v;
}

/* Decode the escapes of the string body [s, e) (no '"', no raw byte < 0x20)
 * into ps->buf; *n is the decoded length. */
static int parse_unescape(parse_state *ps, const unsigned char *s, const unsigned char *e,
                          size_t *n)
{
    size_t o = 0;
    long u, lo;
    char *b;

    if (parse_reserve(ps, (size_t)(e - s) + 1) != 0) /* decoding never lengthens */
        return -1;
    b = ps->buf;
    while (s < e) {
        if (*s != '\\') {
            b[o++] = (char)*s++;
            continue;
        }
        s++;
        if (s >= e)
            return -1;
        switch (*s++) {
        case '"': b[o++] = '"'; break;
        case '\\': b[o++] = '\\'; break;
        case '/': b[o++] = '/'; break;
        case 'b': b[o++] = '\b'; break;
        case 'f': b[o++] = '\f'; break;
        case 'n': b[o++] = '\n'; break;
        case 'r': b[o++] = '\r'; break;
        case 't': b[o++] = '\t'; break;
        case 'u':
            if (e - s < 4 || (u = parse_hex4(s)) < 0)
                return -1;
            s += 4;
            if (u == 0 || (u >= 0xDC00 && u <= 0xDFFF))
                return -1; /* NUL or a lone low surrogate: jansson reports it */
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (e - s < 6 || s[0] != '\\' || s[1] != 'u' || (lo = parse_hex4(s + 2)) < 0
                    || lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                s += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u < 0x80) {
                b[o++] = (char)u;
            } else if (u < 0x800) {
                b[o++] = (char)(0xC0 | (u >> 6));
                b[o++] = (char)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                b[o++] = (char)(0xE0 | (u >> 12));
                b[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                b[o++] = (char)(0x80 | (u & 0x3F));
            } else {
                b[o++] = (char)(0xF0 | (u >> 18));
                b[o++] = (char)(0x80 | ((u >> 12) & 0x3F));
                b[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                b[o++] = (char)(0x80 | (u & 0x3F));
            }
            break;
        default: return -1;
        }
    }
    *n = o;
    return 0;
}

/* The string at ps->p ('"'): *s and *n receive its decoded bytes (in the body
 * when it has no escapes, else in ps->buf, valid until the next string), *ascii
 * whether they are all below 0x80 (otherwise the caller has jansson check the
 * UTF-8). */
static int parse_string_raw(parse_state *ps, const char **s, size_t *n, int *ascii)
{
    const unsigned char *p = ps->p + 1, *end = ps->end, *start = p;
    int escaped = 0, high = 0;

    for (;;) {
        while (p < end && parse_plain[*p])
            p++;
        if (p >= end)
            return -1;
        if (*p == '"')
            break;
        if (*p == '\\') {
            escaped = 1;
            p += 2; /* the escaped byte is never the closing quote */
            continue;
        }
        if (*p < 0x20)
            return -1; /* a control character: jansson reports it */
        high = 1;
        p++;
    }
    if (p > end)
        return -1;
    ps->p = p + 1;
    *ascii = !high;
    if (!escaped) {
        *s = (const char *)start;
        *n = (size_t)(p - start);
        return 0;
    }
    if (parse_unescape(ps, start, p, n) != 0)
        return -1;
    *s = ps->buf;
    for (size_t i = 0; !high && i < *n; i++)
        high = (unsigned char)ps->buf[i] >= 0x80;
    *ascii = !high;
    return 0;
}

static int parse_string(parse_state *ps, json_t **out)
{
    const char *s;
    size_t n;
    int ascii;

    if (parse_string_raw(ps, &s, &n, &ascii) != 0)
        return -1;
    *out = ascii ? json_stringn_nocheck(s, n) : json_stringn(s, n); /* json_stringn checks UTF-8 */
    return *out != NULL ? 0 : -1;
}

static int parse_array(parse_state *ps, json_t **out)
{
    json_t *arr = json_array(), *v;
    int sep;

    ps->p++;
    if (arr == NULL)
        return -1;
    parse_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        *out = arr;
        return 0;
    }
    for (;;) {
        if (parse_value(ps, &v) != 0 || json_array_append_new(arr, v) != 0)
            break; /* json_array_append_new releases v when it fails */
        sep = parse_separator(ps, ']');
        if (sep < 0)
            break;
        if (sep > 0)
            continue;
        *out = arr;
        return 0;
    }
    json_decref(arr);
    return -1;
}

static int parse_object(parse_state *ps, json_t **out)
{
    json_t *obj = json_object(), *v, *check;
    const char *key;
    char *copy;
    size_t n;
    int ascii, rc, sep;

    ps->p++;
    if (obj == NULL)
        return -1;
    parse_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        *out = obj;
        return 0;
    }
    for (;;) {
        if (ps->p >= ps->end || *ps->p != '"' || parse_string_raw(ps, &key, &n, &ascii) != 0)
            break;
        if (!ascii) { /* let jansson check the UTF-8 of the key */
            check = json_stringn(key, n);
            if (check == NULL)
                break;
            json_decref(check);
        }
        if (json_object_getn(obj, key, n) != NULL)
            break; /* a duplicate key: jansson keeps the last or reports it, per the flags */
        /* the key may live in ps->buf, which the value's strings reuse */
        copy = malloc(n + 1);
        if (copy == NULL)
            break;
        memcpy(copy, key, n);
        copy[n] = '\0';
        parse_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            free(copy);
            break;
        }
        ps->p++;
        parse_ws(ps);
        if (parse_value(ps, &v) != 0) {
            free(copy);
            break;
        }
        rc = json_object_setn_new_nocheck(obj, copy, n, v); /* releases v when it fails */
        free(copy);
        if (rc != 0)
            break;
        sep = parse_separator(ps, '}');
        if (sep < 0)
            break;
        if (sep > 0)
            continue;
        *out = obj;
        return 0;
    }
    json_decref(obj);
    return -1;
}

/* The literal word (true, false, null) at ps->p as v. */
static int parse_literal(parse_state *ps, const char *word, size_t n, json_t *v, json_t **out)
{
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return -1;
    ps->p += n;
    *out = v;
    return 0;
}

static int parse_value(parse_state *ps, json_t **out)
{
    int rc;

    if (ps->p >= ps->end)
        return -1;
    switch (*ps->p) {
    case '{':
    case '[':
        if (++ps->depth > PARSE_MAX_DEPTH)
            return -1;
        rc = *ps->p == '{' ? parse_object(ps, out) : parse_array(ps, out);
        ps->depth--;
        return rc;
    case '"': return parse_string(ps, out);
    case 't': return parse_literal(ps, "true", 4, json_true(), out);
    case 'f': return parse_literal(ps, "false", 5, json_false(), out);
    case 'n': return parse_literal(ps, "null", 4, json_null(), out);
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps, out);
        return -1;
    }
}

int wire_parse_reader(const char *body, size_t len, size_t flags, json_t **out)
{
    parse_state ps;
    json_t *v = NULL;
    int rc = -1;

    *out = NULL;
    if ((flags & ~PARSE_FLAGS) != 0 || body == NULL)
        return -1;
    memset(&ps, 0, sizeof ps);
    ps.p = (const unsigned char *)body;
    ps.end = ps.p + len;
    ps.wide = parse_wide_ok();
    parse_ws(&ps);
    if (ps.p < ps.end && (*ps.p == '{' || *ps.p == '[' || (flags & JSON_DECODE_ANY))
        && parse_value(&ps, &v) == 0) {
        parse_ws(&ps);
        if (ps.p == ps.end) {
            *out = v;
            rc = 0;
        } else {
            json_decref(v);
        }
    }
    free(ps.buf);
    return rc;
}

int wire_parse(const char *body, size_t len, size_t flags, json_t **out, json_error_t *jerr)
{
    if (wire_parse_reader(body, len, flags, out) == 0) {
        if (jerr != NULL) {
            memset(jerr, 0, sizeof *jerr);
            jerr->line = jerr->column = -1;
            snprintf(jerr->source, sizeof jerr->source, "<buffer>");
        }
        return 0;
    }
    /* jansson parses what the reader gave up on: the same tree, or its error and position */
    *out = json_loadb(body, len, flags, jerr);
    return *out != NULL ? 0 : -1;
}
