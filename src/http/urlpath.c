/* urlpath.c -- owns percent-decoding, the UTF-8 check and the escaped form of request targets
 * (urlpath.h). */
#include "http/urlpath.h"

#include <stdlib.h>
#include <string.h>

/* The value of hex digit c, or -1. */
static int urlpath_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t urlpath_decode(char *s)
{
    size_t i = 0, o = 0;
    int hi, lo;

    while (s[i] != '\0') {
        if (s[i] == '%' && (hi = urlpath_hex(s[i + 1])) >= 0 && (lo = urlpath_hex(s[i + 2])) >= 0) {
            s[o++] = (char)(hi * 16 + lo);
            i += 3;
            continue;
        }
        s[o++] = s[i++];
    }
    s[o] = '\0';
    return o;
}

int urlpath_utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, k, len;
    unsigned long cp, min;

    while (i < n) {
        unsigned char c = p[i];

        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1fu;
            min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0fu;
            min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07u;
            min = 0x10000;
        } else {
            return 0; /* a continuation byte, 0xc0/0xc1 (overlong) or 0xf5.. */
        }
        if (n - i < len)
            return 0;
        for (k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

char *urlpath_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i, o = 0, n = strlen(s);
    char *out = malloc(3 * n + 1);

    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x21 || c > 0x7e || c == '"' || c == '\\') {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    return out;
}
