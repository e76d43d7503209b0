/* cors.h -- owns the origins a browser page may call vbmemd from (--cors-origin): parsing the
 * list and matching a request's Origin header against it. */
#ifndef VBMEM_HTTP_CORS_H
#define VBMEM_HTTP_CORS_H

#include "vbmem/vbmem.h"

#define HTTP_CORS_MAX        16  /* origins at most */
#define HTTP_CORS_ORIGIN_LEN 256 /* bytes of one origin, its NUL included */

/* The allowed origins, each as "scheme://host[:port]" (RFC 6454 serialization). */
typedef struct {
    int n;
    char origin[HTTP_CORS_MAX][HTTP_CORS_ORIGIN_LEN];
} http_cors;

/* Parse list (origins separated by blanks or commas; NULL or "" is none) into *out. Each origin
 * is "http://" or "https://" followed by a host (lowercase letters, digits, '.', '-', or an IPv6
 * address in brackets) and an optional ":PORT": no path, query, user or trailing '/', never "*"
 * or "null" (no wildcard is ever sent). Fails with VBM_EINVAL (field "cors_origin") naming the
 * first bad origin, or when there are more than HTTP_CORS_MAX. */
vbm_status http_cors_parse(const char *list, http_cors *out, vbm_error *err);

/* 1 when origin (a request's Origin header; NULL when absent) is exactly one of c's; 0 otherwise.
 * Never fails. */
int http_cors_allowed(const http_cors *c, const char *origin);

#endif
