/* cors.c -- owns the --cors-origin list and the match of a request's Origin (cors.h). */
#include "http/cors.h"

#include <stdio.h>
#include <string.h>

/* 1 when s[0..n) is a serialized origin as http_cors_parse takes it. */
static int cors_origin_ok(const char *s, size_t n)
{
    size_t i, skip;
    int digits = 0;

    if (n > 7 && strncmp(s, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncmp(s, "https://", 8) == 0)
        skip = 8;
    else
        return 0;
    i = skip;
    if (s[i] == '[') { /* an IPv6 literal */
        for (i++; i < n && s[i] != ']'; i++) {
            if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || s[i] == ':'
                  || s[i] == '.'))
                return 0;
        }
        if (i >= n || i == skip + 1)
            return 0;
        i++;
    } else {
        for (; i < n && s[i] != ':'; i++) {
            if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.'
                  || s[i] == '-'))
                return 0;
        }
        if (i == skip)
            return 0;
    }
    if (i == n)
        return 1;
    if (s[i] != ':')
        return 0;
    for (i++; i < n; i++, digits++) {
        if (s[i] < '0' || s[i] > '9' || digits >= 5)
            return 0;
    }
    return digits > 0;
}

vbm_status http_cors_parse(const char *list, http_cors *out, vbm_error *err)
{
    const char *p = list != NULL ? list : "", *start;
    size_t n;

    memset(out, 0, sizeof *out);
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\n')
            p++;
        if (*p == '\0')
            return VBM_OK;
        start = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != ',' && *p != '\n')
            p++;
        n = (size_t)(p - start);
        if (n >= HTTP_CORS_ORIGIN_LEN || !cors_origin_ok(start, n))
            return vbm_fail(err, VBM_EINVAL, "cors_origin",
                            "--cors-origin: \"%.*s\" is not an origin: expected http://HOST[:PORT] "
                            "or https://HOST[:PORT] (lowercase, no path, never *)",
                            (int)(n < 200 ? n : 200), start);
        if (out->n == HTTP_CORS_MAX)
            return vbm_fail(err, VBM_EINVAL, "cors_origin", "--cors-origin: more than %d origins",
                            HTTP_CORS_MAX);
        memcpy(out->origin[out->n], start, n);
        out->origin[out->n][n] = '\0';
        out->n++;
    }
}

int http_cors_allowed(const http_cors *c, const char *origin)
{
    int i;

    if (origin == NULL)
        return 0;
    for (i = 0; i < c->n; i++) {
        if (strcmp(c->origin[i], origin) == 0)
            return 1;
    }
    return 0;
}
