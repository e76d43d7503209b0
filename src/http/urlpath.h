/* urlpath.h -- owns what vbmemd does with the bytes of a request target: percent-decoding, the
 * UTF-8 check of a decoded path, and the escaped form shown in problems and logs. */
#ifndef VBMEM_HTTP_URLPATH_H
#define VBMEM_HTTP_URLPATH_H

#include <stddef.h>

/* Decode the %XX escapes of the NUL-terminated s in place (a '%' not followed by two hex digits
 * stays as it is; '+' is left alone) and NUL-terminate the result. Returns its length in bytes,
 * which is less than strlen(s) afterwards when an escape decoded to a NUL byte. Never fails. */
size_t urlpath_decode(char *s);

/* 1 when the n bytes at s are well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code
 * points past U+10FFFF) and hold no NUL byte; 0 otherwise. Never fails. */
int urlpath_utf8_ok(const char *s, size_t n);

/* A new string (the caller frees it): s with every byte outside printable ASCII (below 0x21 or
 * above 0x7e), '"' and '\\' written as %XX (upper-case hex); other bytes, '%' included, as they
 * are. What a problem's instance and the access log show of a raw request target: valid JSON, one
 * line, and the escapes the client sent kept. NULL when out of memory. */
char *urlpath_escape(const char *s);

#endif
