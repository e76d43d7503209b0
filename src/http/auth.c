/* auth.c -- owns the key file parser, the digest table behind a rwlock, and bearer-token checks. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/auth.h"

#define AUTH_MAX_LINE 4096

struct http_auth {
    char *path; /* NULL: disabled */
    pthread_rwlock_t lock;
    unsigned char *digests; /* n x KEYHASH_LEN */
    int n;
};

/* Read the file into a new digest table. */
static vbm_status auth_read(const char *path, unsigned char **out, int *n, vbm_error *err)
{
    char line[AUTH_MAX_LINE];
    unsigned char *d = NULL, *grown;
    int count = 0, cap = 0;
    size_t len;
    char *p;
    FILE *fp = fopen(path, "r");

    *out = NULL;
    *n = 0;
    if (fp == NULL)
        return vbm_fail(err, VBM_EINVAL, "api_key_file", "cannot open %s: %s", path,
                        strerror(errno));
    while (fgets(line, sizeof line, fp) != NULL) {
        p = line;
        while (isspace((unsigned char)*p))
            p++;
        len = strlen(p);
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            p[--len] = '\0';
        if (len == 0 || p[0] == '#')
            continue;
        if (count == cap) {
            cap = cap > 0 ? 2 * cap : 8;
            grown = realloc(d, (size_t)cap * KEYHASH_LEN);
            if (grown == NULL) {
                free(d);
                fclose(fp);
                return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading %s", path);
            }
            d = grown;
        }
        keyhash_digest(p, len, d + (size_t)count * KEYHASH_LEN);
        count++;
    }
    if (ferror(fp)) {
        free(d);
        fclose(fp);
        return vbm_fail(err, VBM_EINVAL, "api_key_file", "error reading %s", path);
    }
    fclose(fp);
    memset(line, 0, sizeof line);
    *out = d;
    *n = count;
    return VBM_OK;
}

vbm_status http_auth_create(const char *path, http_auth **out, vbm_error *err)
{
    http_auth *a = calloc(1, sizeof *a);
    vbm_status st;

    *out = NULL;
    if (a == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_rwlock_init(&a->lock, NULL);
    if (path != NULL && path[0] != '\0') {
        a->path = strdup(path);
        if (a->path == NULL) {
            http_auth_free(a);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        }
        st = auth_read(path, &a->digests, &a->n, err);
        if (st != VBM_OK) {
            http_auth_free(a);
            return st;
        }
    }
    *out = a;
    return VBM_OK;
}

vbm_status http_auth_reload(http_auth *a, vbm_error *err)
{
    unsigned char *d, *old;
    int n;
    vbm_status st;

    if (a->path == NULL)
        return VBM_OK;
    st = auth_read(a->path, &d, &n, err);
    if (st != VBM_OK)
        return st;
    pthread_rwlock_wrlock(&a->lock);
    old = a->digests;
    a->digests = d;
    a->n = n;
    pthread_rwlock_unlock(&a->lock);
    free(old);
    return VBM_OK;
}

int http_auth_enabled(const http_auth *a)
{
    return a != NULL && a->path != NULL;
}

int http_auth_count(http_auth *a)
{
    int n;

    pthread_rwlock_rdlock(&a->lock);
    n = a->n;
    pthread_rwlock_unlock(&a->lock);
    return n;
}

int http_auth_check(http_auth *a, const char *header, unsigned char owner[KEYHASH_LEN])
{
    unsigned char digest[KEYHASH_LEN];
    const char *key;
    int i, found = 0;

    if (header == NULL || strncasecmp(header, "Bearer ", 7) != 0)
        return 0;
    key = header + 7;
    while (*key == ' ')
        key++;
    if (*key == '\0')
        return 0;
    keyhash_digest(key, strlen(key), digest);
    pthread_rwlock_rdlock(&a->lock);
    for (i = 0; i < a->n; i++)
        found |= keyhash_equal_ct(digest, a->digests + (size_t)i * KEYHASH_LEN, KEYHASH_LEN);
    pthread_rwlock_unlock(&a->lock);
    if (found)
        memcpy(owner, digest, KEYHASH_LEN);
    return found;
}

void http_auth_free(http_auth *a)
{
    if (a == NULL)
        return;
    pthread_rwlock_destroy(&a->lock);
    free(a->digests);
    free(a->path);
    free(a);
}
