/* codec.c -- owns decoding of request codes and options and encoding of results as JSON. */
#define _GNU_SOURCE /* memmem */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/codec.h"
#include "tools/memory_json.h"

#define CODEC_PATH_LEN 128

static const char codec_b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Value of every byte as a base64 digit; 64 marks an invalid byte. */
static const unsigned char codec_b64_digit[256] = {
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 62, 64, 64, 64, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 64, 64, 64, 64, 64, 64,
    64,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 64, 64, 64, 64, 64,
    64, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64
};

/* ---- request bodies ------------------------------------------------------- */

/* 1 for the characters of standard base64 (with padding), 0 otherwise. */
static const unsigned char codec_b64_alphabet[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

typedef struct {
    size_t off, len; /* a long base64 string's characters in the original body */
} codec_span;

/* Put the long strings back: every string "\u0001#K" of the parsed tree becomes
 * span K of the body (ASCII, so no UTF-8 check is needed). */
static int codec_restore(json_t *v, const char *body, const codec_span *spans, size_t nspans)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (s[0] == '\x01' && s[1] == '#') {
            size_t k = (size_t)strtoul(s + 2, NULL, 10);
            if (k < nspans && json_string_setn_nocheck(v, body + spans[k].off, spans[k].len) != 0)
                return -1;
        }
        return 0;
    }
    if (json_is_object(v)) {
        const char *key;
        json_t *e;
        json_object_foreach(v, key, e) {
            if (codec_restore(e, body, spans, nspans) != 0)
                return -1;
        }
        return 0;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (!json_is_number(e) && codec_restore(e, body, spans, nspans) != 0)
                return -1;
        }
    }
    return 0;
}

int codec_parse_body(const char *body, size_t len, size_t flags, json_t **out, json_error_t *jerr)
{
    codec_span *spans = NULL;
    size_t nspans = 0, cap = 0, i = 0, o = 0;
    char *copy = NULL;
    json_t *v;

    /* The marker "\u0001#" cannot be confused with a client's string if the body has no \u0001. */
    if (len < 4 * CODEC_FAST_STRING || memmem(body, len, "\\u0001", 6) != NULL)
        goto slow;
    copy = malloc(len);
    if (copy == NULL)
        goto slow;
    while (i < len) {
        const char *q = memchr(body + i, '"', len - i);
        size_t start, j;
        int plain = 1;
        if (q == NULL) { /* no more strings: copy the rest */
            memcpy(copy + o, body + i, len - i);
            o += len - i;
            break;
        }
        memcpy(copy + o, body + i, (size_t)(q - body) - i); /* up to the opening quote */
        o += (size_t)(q - body) - i;
        i = (size_t)(q - body);
        start = i + 1;
        for (j = start; j < len; j++) {
            unsigned char c = (unsigned char)body[j];
            if (c == '"')
                break;
            if (c == '\\') { /* an escape: not a plain base64 string; skip the escaped char */
                plain = 0;
                j++;
                continue;
            }
            plain &= codec_b64_alphabet[c];
        }
        if (j >= len) { /* unterminated: let jansson say where */
            memcpy(copy + o, body + i, len - i);
            o += len - i;
            break;
        }
        if (plain && j - start >= CODEC_FAST_STRING) { /* a value, not an object key? */
            size_t k = j + 1;
            while (k < len && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r'))
                k++;
            if (k < len && body[k] == ':')
                plain = 0;
        }
        if (plain && j - start >= CODEC_FAST_STRING) {
            char mark[40];
            int m;
            if (nspans == cap) {
                codec_span *grown = realloc(spans, sizeof *spans * (cap ? 2 * cap : 8));
                if (grown == NULL)
                    goto slow;
                spans = grown;
                cap = cap ? 2 * cap : 8;
            }
            spans[nspans].off = start;
            spans[nspans].len = j - start;
            m = snprintf(mark, sizeof mark, "\"\\u0001#%zu\"", nspans);
            nspans++;
            memcpy(copy + o, mark, (size_t)m); /* shorter than the string it replaces */
            o += (size_t)m;
        } else {
            memcpy(copy + o, body + i, j + 1 - i);
            o += j + 1 - i;
        }
        i = j + 1;
    }
    if (nspans == 0)
        goto slow;
    v = json_loadb(copy, o, flags, jerr);
    free(copy);
    copy = NULL;
    if (v == NULL)
        goto slow; /* malformed: the plain parse reports the position in the client's text */
    if (codec_restore(v, body, spans, nspans) != 0) {
        json_decref(v);
        goto slow; /* out of memory while restoring: the plain parse reports it */
    }
    free(spans);
    *out = v;
    return 0;
slow:
    free(copy);
    free(spans);
    *out = json_loadb(body, len, flags, jerr);
    return *out != NULL ? 0 : -1;
}

int codec_b64_decode(const char *s, size_t n, unsigned char **out, size_t *outlen)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned char *buf, bad = 0;
    unsigned a, b, c, d;
    size_t pad = 0, len, full, i, o = 0;

    *out = NULL;
    *outlen = 0;
    if (n % 4 != 0)
        return -1;
    if (n > 0 && s[n - 1] == '=')
        pad++;
    if (n > 1 && s[n - 2] == '=')
        pad++;
    len = n / 4 * 3 - pad;
    buf = malloc(len > 0 ? len : 1);
    if (buf == NULL)
        return -1;
    /* Whole quads without padding: one table look-up per character. */
    full = pad > 0 ? n - 4 : n;
    for (i = 0; i < full; i += 4) {
        a = codec_b64_digit[p[i]];
        b = codec_b64_digit[p[i + 1]];
        c = codec_b64_digit[p[i + 2]];
        d = codec_b64_digit[p[i + 3]];
        bad |= (unsigned char)((a | b | c | d) & 64);
        buf[o] = (unsigned char)(a << 2 | b >> 4);
        buf[o + 1] = (unsigned char)((b & 15) << 4 | c >> 2);
        buf[o + 2] = (unsigned char)((c & 3) << 6 | d);
        o += 3;
    }
    if (pad > 0) { /* the last quad: "xx==" or "xxx=" */
        a = codec_b64_digit[p[i]];
        b = codec_b64_digit[p[i + 1]];
        c = pad == 1 ? codec_b64_digit[p[i + 2]] : 0;
        bad |= (unsigned char)((a | b | c) & 64);
        buf[o++] = (unsigned char)(a << 2 | b >> 4);
        if (pad == 1)
            buf[o++] = (unsigned char)((b & 15) << 4 | c >> 2);
    }
    if (bad) {
        free(buf);
        return -1;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

char *codec_b64_encode(const unsigned char *d, size_t n)
{
    size_t olen = (n + 2) / 3 * 4, i, o = 0;
    char *s = malloc(olen + 1);
    unsigned v;

    if (s == NULL)
        return NULL;
    for (i = 0; i + 2 < n; i += 3) {
        v = (unsigned)d[i] << 16 | (unsigned)d[i + 1] << 8 | d[i + 2];
        s[o++] = codec_b64[v >> 18];
        s[o++] = codec_b64[(v >> 12) & 63];
        s[o++] = codec_b64[(v >> 6) & 63];
        s[o++] = codec_b64[v & 63];
    }
    if (i < n) {
        v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0u);
        s[o++] = codec_b64[v >> 18];
        s[o++] = codec_b64[(v >> 12) & 63];
        s[o++] = i + 1 < n ? codec_b64[(v >> 6) & 63] : '=';
        s[o++] = '=';
    }
    s[o] = '\0';
    return s;
}

/* Record a memory_json message "path: reason" as a failure of field path. */
static vbm_status codec_fail_memjson(vbm_error *err, const char *msg)
{
    const char *colon = strstr(msg, ": ");
    char field[VBM_FIELD_LEN];
    size_t n = colon != NULL ? (size_t)(colon - msg) : 0;

    field[0] = '\0';
    if (n > 0 && n < sizeof field) {
        memcpy(field, msg, n);
        field[n] = '\0';
    }
    return vbm_fail(err, VBM_EINVAL, field, "%s", msg);
}

static void codec_path(char *buf, size_t len, const char *base, const char *key)
{
    snprintf(buf, len, "%s%s%s", base, base[0] != '\0' ? "." : "", key);
}

/* Read a float32 tensor {dtype, shape, data} at path into a new array of
 * doubles. *T and *C receive the shape (when the caller passed them as 0) or
 * must match it. */
static vbm_status codec_read_tensor(const json_t *v, const char *path, long max_frames,
                                    int max_code_size, long *T, long *C, int nonneg, double **out,
                                    vbm_error *err)
{
    static const char *const keys[] = {"dtype", "shape", "data", NULL};
    char where[CODEC_PATH_LEN];
    const json_t *dtype, *shape, *data, *d0, *d1;
    unsigned char *raw;
    size_t rawlen, i, n;
    json_int_t rows, cols;
    uint32_t bits;
    float f;
    double *a;
    vbm_status st;

    st = codec_check_keys(v, path, keys, err);
    if (st != VBM_OK)
        return st;
    dtype = json_object_get(v, "dtype");
    codec_path(where, sizeof where, path, "dtype");
    if (dtype == NULL || !json_is_string(dtype) || strcmp(json_string_value(dtype), "float32") != 0)
        return vbm_fail(err, VBM_EINVAL, where, "must be \"float32\"");
    shape = json_object_get(v, "shape");
    codec_path(where, sizeof where, path, "shape");
    d0 = json_array_get(shape, 0);
    d1 = json_array_get(shape, 1);
    if (!json_is_array(shape) || json_array_size(shape) != 2 || !json_is_integer(d0)
        || !json_is_integer(d1))
        return vbm_fail(err, VBM_EINVAL, where, "expected [T, C] (two integers)");
    rows = json_integer_value(d0);
    cols = json_integer_value(d1);
    if (rows < 1 || rows > max_frames)
        return vbm_fail(err, VBM_EINVAL, where, "T = %lld is outside [1, %ld]",
                        (long long)rows, max_frames);
    if (cols < 1 || cols > max_code_size)
        return vbm_fail(err, VBM_EINVAL, where, "C = %lld is outside [1, %d]",
                        (long long)cols, max_code_size);
    if ((*T != 0 && *T != rows) || (*C != 0 && *C != cols))
        return vbm_fail(err, VBM_EINVAL, where, "[%lld, %lld] does not match mu's [%ld, %ld]", (long long)rows, (long long)cols, *T, *C);
    data = json_object_get(v, "data");
    codec_path(where, sizeof where, path, "data");
    if (!json_is_string(data))
        return vbm_fail(err, VBM_EINVAL, where, "expected a base64 string");
    if (codec_b64_decode(json_string_value(data), json_string_length(data), &raw, &rawlen) != 0)
        return vbm_fail(err, VBM_EINVAL, where, "not valid padded base64");
    n = (size_t)rows * (size_t)cols;
    if (rawlen != n * 4) {
        free(raw);
        return vbm_fail(err, VBM_EINVAL, where, "holds %zu bytes, the shape [%lld, %lld] needs %zu", rawlen,
                        (long long)rows, (long long)cols, n * 4);
    }
    a = malloc(n * sizeof *a);
    if (a == NULL) {
        free(raw);
        return vbm_fail(err, VBM_ENOMEM, where, "out of memory");
    }
    for (i = 0; i < n; i++) {
        bits = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8
               | (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&f, &bits, sizeof f);
        a[i] = (double)f;
        if (!isfinite(a[i]) || (nonneg && a[i] < 0.0)) {
            free(raw);
            free(a);
            return vbm_fail(err, VBM_EINVAL, where, "element [%zu][%zu] is %s",
                            i / (size_t)cols, i % (size_t)cols,
                            isfinite(f) ? "negative" : "not finite");
        }
    }
    free(raw);
    *T = rows;
    *C = cols;
    *out = a;
    return VBM_OK;
}

/* Read a nested T x C array at path (shape from *T, *C when non-zero). */
static vbm_status codec_read_nested(const json_t *v, const char *path, long max_frames,
                                    int max_code_size, long *T, long *C, int nonneg, double **out,
                                    vbm_error *err)
{
    char msg[VBM_MSG_LEN];
    long rows, cols, dims[2];
    double *a;

    if (memjson_matrix_shape(v, path, &rows, &cols, msg, sizeof msg) != VBM_OK)
        return codec_fail_memjson(err, msg);
    if (rows > max_frames)
        return vbm_fail(err, VBM_EINVAL, path, "T = %ld frames, the limit is %ld", rows,
                        max_frames);
    if (cols > max_code_size)
        return vbm_fail(err, VBM_EINVAL, path, "C = %ld, the code size limit is %d",
                        cols, max_code_size);
    if ((*T != 0 && *T != rows) || (*C != 0 && *C != cols))
        return vbm_fail(err, VBM_EINVAL, path, "shape [%ld, %ld] does not match mu's [%ld, %ld]", rows, cols, *T, *C);
    a = malloc((size_t)rows * (size_t)cols * sizeof *a);
    if (a == NULL)
        return vbm_fail(err, VBM_ENOMEM, path, "out of memory");
    dims[0] = rows;
    dims[1] = cols;
    if (memjson_read_array(v, path, 2, dims, nonneg, a, msg, sizeof msg) != VBM_OK) {
        free(a);
        return codec_fail_memjson(err, msg);
    }
    *T = rows;
    *C = cols;
    *out = a;
    return VBM_OK;
}

/* Read M (mu or sigma2) in either form. */
static vbm_status codec_read_matrix(const json_t *v, const char *path, long max_frames,
                                    int max_code_size, long *T, long *C, int nonneg, double **out,
                                    vbm_error *err)
{
    if (json_is_object(v))
        return codec_read_tensor(v, path, max_frames, max_code_size, T, C, nonneg, out, err);
    if (json_is_array(v))
        return codec_read_nested(v, path, max_frames, max_code_size, T, C, nonneg, out, err);
    return vbm_fail(err, VBM_EINVAL, path, "expected an array of arrays of numbers or a float32 tensor object, got %s", memjson_type_name(v));
}

vbm_status codec_read_codes(const json_t *v, const char *path, long max_frames, int max_code_size,
                            codec_codes *out, vbm_error *err)
{
    static const char *const keys[] = {"mu", "sigma2", NULL};
    char where[CODEC_PATH_LEN];
    const json_t *mu, *s2;
    long T = 0, C = 0;
    size_t i, n;
    double x;
    vbm_status st;

    memset(out, 0, sizeof *out);
    if (!json_is_object(v))
        return vbm_fail(err, VBM_EINVAL, path, "expected an object {mu, sigma2}, got %s",
                        memjson_type_name(v));
    st = codec_check_keys(v, path, keys, err);
    if (st != VBM_OK)
        return st;
    mu = json_object_get(v, "mu");
    codec_path(where, sizeof where, path, "mu");
    if (mu == NULL)
        return vbm_fail(err, VBM_EINVAL, where, "missing");
    st = codec_read_matrix(mu, where, max_frames, max_code_size, &T, &C, 0, &out->mu, err);
    if (st != VBM_OK)
        return st;
    out->T = T;
    out->C = (int)C;
    s2 = json_object_get(v, "sigma2");
    codec_path(where, sizeof where, path, "sigma2");
    if (s2 == NULL || json_is_null(s2))
        return VBM_OK;
    if (json_is_number(s2)) {
        x = json_number_value(s2);
        if (!isfinite(x) || x < 0.0) {
            codec_codes_free(out);
            return vbm_fail(err, VBM_EINVAL, where, "variance must be finite and >= 0");
        }
        if (x == 0.0)
            return VBM_OK;
        n = (size_t)T * (size_t)C;
        out->s2 = malloc(n * sizeof *out->s2);
        if (out->s2 == NULL) {
            codec_codes_free(out);
            return vbm_fail(err, VBM_ENOMEM, where, "out of memory");
        }
        for (i = 0; i < n; i++)
            out->s2[i] = x;
        return VBM_OK;
    }
    st = codec_read_matrix(s2, where, max_frames, max_code_size, &T, &C, 1, &out->s2, err);
    if (st != VBM_OK)
        codec_codes_free(out);
    return st;
}

void codec_codes_free(codec_codes *c)
{
    free(c->mu);
    free(c->s2);
    memset(c, 0, sizeof *c);
}

json_t *codec_number(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* Element constructors for codec_nested: entry i of a row-major array. */
static json_t *codec_elem_double(const void *a, size_t i)
{
    return codec_number(((const double *)a)[i]);
}

static json_t *codec_elem_int(const void *a, size_t i)
{
    return json_integer(((const int *)a)[i]);
}

/* rows x cols nested JSON arrays of elem(a, r * cols + c). NULL when out of memory. */
static json_t *codec_nested(long rows, long cols, json_t *(*elem)(const void *, size_t), const void *a)
{
    json_t *out = json_array(), *row;
    long r, c;

    for (r = 0; out != NULL && r < rows; r++) {
        row = json_array();
        if (row == NULL || json_array_append_new(out, row) != 0) {
            json_decref(out);
            return NULL;
        }
        for (c = 0; c < cols; c++) {
            if (json_array_append_new(row, elem(a, (size_t)r * (size_t)cols + (size_t)c)) != 0) {
                json_decref(out);
                return NULL;
            }
        }
    }
    return out;
}

json_t *codec_matrix(const double *a, long rows, long cols, int base64)
{
    json_t *out;
    unsigned char *raw;
    char *text;
    size_t n = (size_t)rows * (size_t)cols, i;
    uint32_t bits;
    float f;

    if (base64) {
        raw = malloc(n * 4 + 1);
        if (raw == NULL)
            return NULL;
        for (i = 0; i < n; i++) {
            f = (float)a[i];
            memcpy(&bits, &f, sizeof bits);
            raw[4 * i] = (unsigned char)bits;
            raw[4 * i + 1] = (unsigned char)(bits >> 8);
            raw[4 * i + 2] = (unsigned char)(bits >> 16);
            raw[4 * i + 3] = (unsigned char)(bits >> 24);
        }
        text = codec_b64_encode(raw, n * 4);
        free(raw);
        if (text == NULL)
            return NULL;
        out = json_pack("{s:s, s:[I, I], s:s}", "dtype", "float32", "shape", (json_int_t)rows,
                        (json_int_t)cols, "data", text);
        free(text);
        return out;
    }
    return codec_nested(rows, cols, codec_elem_double, a);
}

json_t *codec_int_matrix(const int *a, long rows, long cols)
{
    return codec_nested(rows, cols, codec_elem_int, a);
}

json_t *codec_elbo(const vbm_elbo *e)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I}", "per_frame",
                     codec_number(e->per_frame), "total", codec_number(e->total), "loglik_codes",
                     codec_number(e->loglik_codes), "kl_w", codec_number(e->kl_w), "kl_s",
                     codec_number(e->kl_s), "kl_M", codec_number(e->kl_M), "kl_b",
                     codec_number(e->kl_b), "T", (json_int_t)e->T);
}

json_t *codec_addresses(const vbm_addresses *a)
{
    char msg[VBM_MSG_LEN];
    json_t *o, *s = NULL, *w = NULL, *cov = NULL;
    long dims[4];

    if (a->s == NULL || a->w_mu == NULL)
        return json_null();
    dims[0] = a->T;
    dims[1] = a->G;
    dims[2] = a->H;
    dims[3] = a->K;
    if (memjson_new_array(a->s, 3, dims, "s", &s, msg, sizeof msg) != VBM_OK
        || memjson_new_array(a->w_mu, 4, dims, "w_mu", &w, msg, sizeof msg) != VBM_OK) {
        json_decref(s);
        return NULL;
    }
    if (a->w_cov != NULL) {
        dims[0] = a->G;
        dims[1] = a->H;
        dims[2] = a->K;
        dims[3] = a->K;
        if (memjson_new_array(a->w_cov, 4, dims, "w_cov", &cov, msg, sizeof msg) != VBM_OK) {
            json_decref(s);
            json_decref(w);
            return NULL;
        }
    } else {
        cov = json_null();
    }
    o = json_pack("{s:o, s:o, s:o}", "s", s, "w_mu", w, "w_cov", cov);
    return o;
}

json_t *codec_usage(const double *u, int G, int H)
{
    if (u == NULL)
        return json_null();
    return codec_matrix(u, G, H, 0);
}

json_t *codec_config(const vbm_config *c)
{
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:o, s:b, s:o, s:o, s:o, s:o, s:I}", "kind",
                     vbm_kind_name(c->kind), "code_size", c->code_size, "rows", c->rows,
                     "clusters", c->clusters, "groups", c->groups, "sigma_z2",
                     codec_number(c->sigma_z2), "shift", c->shift, "u0", codec_number(c->u0),
                     "sigma2_b0", codec_number(c->sigma2_b0), "s_floor", codec_number(c->s_floor),
                     "dkm_addr_var", codec_number(c->dkm_addr_var), "retain_max",
                     (json_int_t)c->retain_max);
}

const char *codec_init_name(vbm_init init)
{
    switch (init) {
    case VBM_INIT_AUTO: return "auto";
    case VBM_INIT_PRIOR: return "prior";
    case VBM_INIT_KMEANSPP: return "kmeans++";
    case VBM_INIT_CURRENT: return "current";
    case VBM_INIT_RANDOM: return "random";
    }
    return "auto";
}

json_t *codec_time(double wall)
{
    struct tm tm;
    time_t secs = (time_t)wall;
    char buf[64];

    gmtime_r(&secs, &tm);
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)((wall - (double)secs) * 1000.0));
    return json_string(buf);
}

json_t *codec_info(const eng_info *i)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:i, s:o, s:{s:i, s:o, s:s}, s:I, s:I, s:I, s:o, s:o, s:o, "
        "s:o, s:I, s:I}",
        "id", i->id, "kind", vbm_kind_name(i->cfg.kind), "code_size", i->cfg.code_size, "rows",
        i->cfg.rows, "clusters", i->cfg.clusters, "groups", i->cfg.groups, "config",
        codec_config(&i->cfg), "solver", "iterations", i->solver.iterations, "tolerance",
        codec_number(i->solver.tolerance), "init", codec_init_name(i->solver.init), "ttl_seconds",
        (json_int_t)i->ttl_s, "frames", (json_int_t)i->frames, "retained_codes",
        (json_int_t)i->retained, "cluster_usage",
        codec_usage(i->usage, i->cfg.groups, i->cfg.clusters), "last_elbo",
        codec_number(i->last_elbo), "created", codec_time(i->created), "updated",
        codec_time(i->updated), "version", (json_int_t)i->version, "memory_bytes",
        (json_int_t)i->bytes);

    if (o != NULL
        && json_object_set_new(o, "model", i->model_name[0] != '\0' ? json_string(i->model_name)
                                                                    : json_null()) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

vbm_status codec_check_keys(const json_t *obj, const char *path, const char *const *allowed,
                            vbm_error *err)
{
    char where[CODEC_PATH_LEN];
    const char *key;
    json_t *val;
    int i, ok;

    json_object_foreach((json_t *)obj, key, val) {
        ok = 0;
        for (i = 0; allowed[i] != NULL; i++) {
            if (strcmp(allowed[i], key) == 0) {
                ok = 1;
                break;
            }
        }
        if (!ok) {
            codec_path(where, sizeof where, path, key);
            return vbm_fail(err, VBM_EINVAL, where, "unknown member");
        }
    }
    return VBM_OK;
}

vbm_status codec_opt_long(const json_t *obj, const char *key, long lo, long hi, long *out,
                          vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    json_int_t x;

    if (v == NULL)
        return VBM_OK;
    if (!json_is_integer(v))
        return vbm_fail(err, VBM_EINVAL, key, "expected an integer, got %s",
                        memjson_type_name(v));
    x = json_integer_value(v);
    if (x < lo || x > hi)
        return vbm_fail(err, VBM_EINVAL, key, "%lld is outside [%ld, %ld]", (long long)x,
                        lo, hi);
    *out = (long)x;
    return VBM_OK;
}

vbm_status codec_opt_double(const json_t *obj, const char *key, double lo, double hi, double *out,
                            vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    double x;

    if (v == NULL)
        return VBM_OK;
    if (!json_is_number(v))
        return vbm_fail(err, VBM_EINVAL, key, "expected a number, got %s",
                        memjson_type_name(v));
    x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return vbm_fail(err, VBM_EINVAL, key, "%g is outside [%g, %g]", x, lo, hi);
    *out = x;
    return VBM_OK;
}

vbm_status codec_opt_bool(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    if (v == NULL)
        return VBM_OK;
    if (!json_is_boolean(v))
        return vbm_fail(err, VBM_EINVAL, key, "expected true or false, got %s",
                        memjson_type_name(v));
    *out = json_is_true(v) ? 1 : 0;
    return VBM_OK;
}

vbm_status codec_opt_seed(const json_t *obj, const char *key, uint64_t *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    unsigned long long x;
    const char *s;
    char *end;
    size_t i;

    if (v == NULL)
        return VBM_OK;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return vbm_fail(err, VBM_EINVAL, key, "must be >= 0");
        *out = (uint64_t)json_integer_value(v);
        return VBM_OK;
    }
    if (!json_is_string(v))
        return vbm_fail(err, VBM_EINVAL, key, "expected an integer or a string of decimal digits, got %s",
                        memjson_type_name(v));
    s = json_string_value(v);
    for (i = 0; s[i] != '\0'; i++) {
        if (s[i] < '0' || s[i] > '9')
            break;
    }
    if (i == 0 || s[i] != '\0' || i > 20)
        return vbm_fail(err, VBM_EINVAL, key, "not a string of decimal digits");
    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return vbm_fail(err, VBM_EINVAL, key, "does not fit in 64 bits");
    *out = (uint64_t)x;
    return VBM_OK;
}

vbm_status codec_opt_init(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    static const vbm_init all[] = {VBM_INIT_AUTO, VBM_INIT_PRIOR, VBM_INIT_KMEANSPP,
                                   VBM_INIT_CURRENT, VBM_INIT_RANDOM};
    const json_t *v = json_object_get(obj, key);
    size_t i;

    if (v == NULL)
        return VBM_OK;
    if (json_is_string(v)) {
        for (i = 0; i < sizeof all / sizeof all[0]; i++) {
            if (strcmp(json_string_value(v), codec_init_name(all[i])) == 0) {
                *out = (int)all[i];
                return VBM_OK;
            }
        }
    }
    return vbm_fail(err, VBM_EINVAL, key, "expected \"auto\", \"prior\", \"kmeans++\", \"current\" or \"random\"");
}

vbm_status codec_opt_encoding(const json_t *obj, const char *key, int *out, vbm_error *err)
{
    const json_t *v = json_object_get(obj, key);

    if (v == NULL)
        return VBM_OK;
    if (json_is_string(v) && strcmp(json_string_value(v), "json") == 0) {
        *out = 0;
        return VBM_OK;
    }
    if (json_is_string(v) && strcmp(json_string_value(v), "base64") == 0) {
        *out = 1;
        return VBM_OK;
    }
    return vbm_fail(err, VBM_EINVAL, key, "expected \"json\" or \"base64\"");
}
