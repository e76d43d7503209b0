/* base64.c -- owns standard padded base64 (RFC 4648) encoding and decoding. */
#include "wire/base64.h"

#include <stdlib.h>

static const char wire_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Value of every byte as a base64 digit; 64 marks an invalid byte. */
static const unsigned char wire_b64_digit[256] = {
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 62, 64, 64, 64, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 64, 64, 64, 64, 64, 64, 64, 0,  1,  2,  3,  4,  5,  6,
    7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 64, 64, 64, 64, 64,
    64, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48,
    49, 50, 51, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64};

int wire_b64_decode(const char *s, size_t n, unsigned char **out, size_t *outlen)
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
        a = wire_b64_digit[p[i]];
        b = wire_b64_digit[p[i + 1]];
        c = wire_b64_digit[p[i + 2]];
        d = wire_b64_digit[p[i + 3]];
        bad |= (unsigned char)((a | b | c | d) & 64);
        buf[o] = (unsigned char)(a << 2 | b >> 4);
        buf[o + 1] = (unsigned char)((b & 15) << 4 | c >> 2);
        buf[o + 2] = (unsigned char)((c & 3) << 6 | d);
        o += 3;
    }
    if (pad > 0) { /* the last quad: "xx==" or "xxx=" */
        a = wire_b64_digit[p[i]];
        b = wire_b64_digit[p[i + 1]];
        c = pad == 1 ? wire_b64_digit[p[i + 2]] : 0;
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

char *wire_b64_encode(const unsigned char *d, size_t n)
{
    size_t olen = (n + 2) / 3 * 4, i, o = 0;
    char *s = malloc(olen + 1);
    unsigned v;

    if (s == NULL)
        return NULL;
    for (i = 0; i + 2 < n; i += 3) {
        v = (unsigned)d[i] << 16 | (unsigned)d[i + 1] << 8 | d[i + 2];
        s[o++] = wire_b64[v >> 18];
        s[o++] = wire_b64[(v >> 12) & 63];
        s[o++] = wire_b64[(v >> 6) & 63];
        s[o++] = wire_b64[v & 63];
    }
    if (i < n) {
        v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0u);
        s[o++] = wire_b64[v >> 18];
        s[o++] = wire_b64[(v >> 12) & 63];
        s[o++] = i + 1 < n ? wire_b64[(v >> 6) & 63] : '=';
        s[o++] = '=';
    }
    s[o] = '\0';
    return s;
}
