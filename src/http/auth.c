/* auth.c -- owns the key file parser (keys, scopes, owners, quotas), the key table (sorted by
 * digest) behind a rwlock, bearer-token checks and the per-key request-rate token buckets. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/auth.h"

#define AUTH_MAX_LINE 4096
#define AUTH_MAX_RPS  1e6
/* The prefix of the texts whose SHA-256 is a named owner's identity. A bare key's identity is
 * its own SHA-256, so no key may begin with it: the two sets of hashed texts stay disjoint (a key
 * "vbmem-owner:team-a" would otherwise own team-a's sessions). */
#define AUTH_OWNER_PREFIX "vbmem-owner:"

/* One loaded key: its digest, policy and rate bucket (tokens, last refill). */
typedef struct {
    unsigned char digest[KEYHASH_LEN];
    unsigned char owner[KEYHASH_LEN]; /* the digest, or SHA-256("vbmem-owner:" NAME) */
    http_key_policy policy;
    double tokens;
    double last; /* < 0: never used (the bucket is full) */
    int line;    /* of the key file */
} auth_key;

struct http_auth {
    char *path;             /* NULL: disabled */
    pthread_rwlock_t lock;  /* the table: read for checks, write for reload */
    pthread_mutex_t bucket; /* the buckets' tokens and times */
    auth_key *keys;         /* sorted by digest */
    int n;
};

/* Parse an integer >= 1 (no sign, no suffix) into *out. Returns 0 or -1. */
static int auth_parse_count(const char *s, size_t n, unsigned long long *out)
{
    unsigned long long v = 0;
    size_t i;

    if (n == 0 || n > 18)
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long long)(s[i] - '0');
    }
    if (v < 1)
        return -1;
    *out = v;
    return 0;
}

/* Parse a decimal number in (0, AUTH_MAX_RPS] (digits with at most one '.', no sign, exponent
 * or hexadecimal) into *out. Returns 0 or -1. */
static int auth_parse_rate(const char *s, size_t n, double *out)
{
    char buf[32], *end;
    double v;
    size_t i, dots = 0, digits = 0;

    if (n == 0 || n >= sizeof buf)
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] == '.')
            dots++;
        else if (s[i] >= '0' && s[i] <= '9')
            digits++;
        else
            return -1;
    }
    if (dots > 1 || digits == 0)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    v = strtod(buf, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || !(v > 0.0) || v > AUTH_MAX_RPS)
        return -1;
    *out = v;
    return 0;
}

vbm_status http_auth_parse_line(const char *line, size_t *key_off, size_t *key_len,
                                http_key_policy *pol, vbm_error *err)
{
    static const char *const names[] = {"scope", "sessions", "bytes", "rps", "owner"};
    const char *p = line, *tok, *eq;
    size_t n, nlen, vlen;
    int seen[5] = {0, 0, 0, 0, 0}, pos = 1, k;
    size_t i;
    unsigned long long count;

    memset(pol, 0, sizeof *pol);
    pol->scope = HTTP_SCOPE_WRITE;
    *key_off = 0;
    *key_len = 0;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0' || *p == '#')
        return VBM_OK;
    tok = p;
    while (*p != '\0' && !isspace((unsigned char)*p))
        p++;
    *key_off = (size_t)(tok - line);
    *key_len = (size_t)(p - tok);
    if (*key_len >= strlen(AUTH_OWNER_PREFIX)
        && strncmp(tok, AUTH_OWNER_PREFIX, strlen(AUTH_OWNER_PREFIX)) == 0) {
        *key_len = 0;
        return vbm_fail(err, VBM_EINVAL, "api_key_file",
                        "the key begins with \"" AUTH_OWNER_PREFIX
                        "\", which is reserved: owner identities are hashed under it");
    }
    for (k = 0; k < 5; k++) {
        nlen = strlen(names[k]);
        if (*key_len > nlen && strncmp(tok, names[k], nlen) == 0 && tok[nlen] == '=') {
            *key_len = 0;
            return vbm_fail(err, VBM_EINVAL, "api_key_file",
                            "the line starts with the option %s= (the key comes first)", names[k]);
        }
    }
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            break;
        tok = p;
        while (*p != '\0' && !isspace((unsigned char)*p))
            p++;
        n = (size_t)(p - tok);
        pos++;
        eq = memchr(tok, '=', n);
        k = -1;
        if (eq != NULL) {
            nlen = (size_t)(eq - tok);
            for (k = 4; k >= 0; k--) {
                if (strlen(names[k]) == nlen && strncmp(tok, names[k], nlen) == 0)
                    break;
            }
        }
        if (k < 0)
            return vbm_fail(err, VBM_EINVAL, "api_key_file",
                            "word %d after the key is not an option (expected scope=read|write, "
                            "owner=NAME, sessions=N, bytes=N or rps=R; a key cannot contain "
                            "blanks)",
                            pos - 1);
        if (seen[k])
            return vbm_fail(err, VBM_EINVAL, "api_key_file", "option %s= given twice", names[k]);
        seen[k] = 1;
        eq++;
        vlen = n - (size_t)(eq - tok);
        switch (k) {
        case 0:
            if (vlen == 4 && strncmp(eq, "read", 4) == 0)
                pol->scope = HTTP_SCOPE_READ;
            else if (vlen == 5 && strncmp(eq, "write", 5) == 0)
                pol->scope = HTTP_SCOPE_WRITE;
            else
                return vbm_fail(err, VBM_EINVAL, "api_key_file", "scope= expects read or write");
            break;
        case 1:
            if (auth_parse_count(eq, vlen, &count) != 0 || count > (unsigned long long)LONG_MAX)
                return vbm_fail(err, VBM_EINVAL, "api_key_file",
                                "sessions= expects an integer >= 1");
            pol->max_sessions = (long)count;
            break;
        case 2:
            if (auth_parse_count(eq, vlen, &count) != 0 || count > (unsigned long long)SIZE_MAX)
                return vbm_fail(err, VBM_EINVAL, "api_key_file", "bytes= expects an integer >= 1");
            pol->max_bytes = (size_t)count;
            break;
        case 4:
            for (i = 0; i < vlen; i++) {
                if (!isalnum((unsigned char)eq[i]) && strchr("._:-", eq[i]) == NULL)
                    break;
            }
            if (vlen == 0 || vlen >= HTTP_OWNER_NAME_LEN || i < vlen)
                return vbm_fail(err, VBM_EINVAL, "api_key_file",
                                "owner= expects 1 to %d characters of [A-Za-z0-9._:-]",
                                HTTP_OWNER_NAME_LEN - 1);
            memcpy(pol->owner, eq, vlen);
            pol->owner[vlen] = '\0';
            break;
        default:
            if (auth_parse_rate(eq, vlen, &pol->rps) != 0)
                return vbm_fail(err, VBM_EINVAL, "api_key_file",
                                "rps= expects a decimal number in (0, %g]", AUTH_MAX_RPS);
            break;
        }
    }
    return VBM_OK;
}

/* Order of two keys by digest (qsort). */
static int auth_key_cmp(const void *x, const void *y)
{
    return memcmp(((const auth_key *)x)->digest, ((const auth_key *)y)->digest, KEYHASH_LEN);
}

/* Read the file into a new key table, sorted by digest. A file without any key (empty, or only
 * blank lines and comments: every request would be refused), a UTF-8 byte-order mark (it would
 * become part of the first key) and a NUL byte are refused, each by name. */
static vbm_status auth_read(const char *path, auth_key **out, int *n, vbm_error *err)
{
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    auth_key *keys = NULL, *grown;
    http_key_policy pol;
    size_t off, len;
    int count = 0, cap = 0, lineno = 0, i;
    vbm_status st = VBM_OK;
    FILE *fp = fopen(path, "r");

    *out = NULL;
    *n = 0;
    if (fp == NULL)
        return vbm_fail(err, VBM_EINVAL, "api_key_file", "cannot open %s: %s", path,
                        strerror(errno));
    while (st == VBM_OK && (got = getline(&line, &line_cap, fp)) >= 0) {
        lineno++;
        if (memchr(line, '\0', (size_t)got) != NULL) {
            st = vbm_fail(err, VBM_EINVAL, "api_key_file", "%s line %d holds a NUL byte", path,
                          lineno);
            break;
        }
        if (got - (line[got - 1] == '\n') > AUTH_MAX_LINE - 2) {
            st = vbm_fail(err, VBM_EINVAL, "api_key_file", "%s line %d is longer than %d bytes",
                          path, lineno, AUTH_MAX_LINE - 2);
            break;
        }
        if (lineno == 1 && got >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
            st = vbm_fail(err, VBM_EINVAL, "api_key_file",
                          "%s begins with a UTF-8 byte-order mark, which would become part of "
                          "the first key; save the file without it",
                          path);
            break;
        }
        st = http_auth_parse_line(line, &off, &len, &pol, err);
        if (st != VBM_OK) {
            char msg[VBM_MSG_LEN];

            snprintf(msg, sizeof msg, "%s", err->msg);
            st = vbm_fail(err, VBM_EINVAL, "api_key_file", "%s line %d: %s", path, lineno, msg);
            break;
        }
        if (len == 0)
            continue;
        if (count == cap) {
            cap = cap > 0 ? 2 * cap : 8;
            grown = realloc(keys, (size_t)cap * sizeof *keys);
            if (grown == NULL) {
                st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory reading %s", path);
                break;
            }
            keys = grown;
        }
        memset(&keys[count], 0, sizeof keys[count]);
        keyhash_digest(line + off, len, keys[count].digest);
        keys[count].policy = pol;
        keys[count].line = lineno;
        keys[count].last = -1.0;
        memcpy(keys[count].policy.key, keys[count].digest, KEYHASH_LEN);
        if (pol.owner[0] != '\0') {
            char name[HTTP_OWNER_NAME_LEN + 16];
            int m = snprintf(name, sizeof name, AUTH_OWNER_PREFIX "%s", pol.owner);

            keyhash_digest(name, (size_t)m, keys[count].owner);
        } else {
            memcpy(keys[count].owner, keys[count].digest, KEYHASH_LEN);
        }
        count++;
    }
    if (st == VBM_OK && (ferror(fp) || !feof(fp))) /* (getline also stops when out of memory) */
        st = vbm_fail(err, VBM_EINVAL, "api_key_file", "error reading %s", path);
    if (st == VBM_OK && count == 0)
        st = vbm_fail(err, VBM_EINVAL, "api_key_file",
                      "%s holds no key (only blank lines and comments): every request would be "
                      "refused",
                      path);
    fclose(fp);
    if (line != NULL) /* (the key's text does not stay in freed memory) */
        memset(line, 0, line_cap);
    free(line);
    if (st == VBM_OK && count > 1) {
        qsort(keys, (size_t)count, sizeof *keys, auth_key_cmp);
        for (i = 1; i < count && st == VBM_OK; i++) {
            if (memcmp(keys[i - 1].digest, keys[i].digest, KEYHASH_LEN) == 0)
                st = vbm_fail(err, VBM_EINVAL, "api_key_file",
                              "%s line %d: repeats the key of line %d", path,
                              keys[i - 1].line > keys[i].line ? keys[i - 1].line : keys[i].line,
                              keys[i - 1].line < keys[i].line ? keys[i - 1].line : keys[i].line);
        }
    }
    if (st != VBM_OK) {
        free(keys);
        return st;
    }
    *out = keys;
    *n = count;
    return VBM_OK;
}

/* The key whose digest is d in the sorted table, or NULL. A binary search
 * over SHA-256 digests: its timing tells at most how a digest of the
 * presented key orders among the digests of the keys, which gives nothing
 * towards a key (that would need a preimage); the match itself is confirmed
 * in constant time. Caller holds the table lock. */
static auth_key *auth_find(const http_auth *a, const unsigned char d[KEYHASH_LEN])
{
    int lo = 0, hi = a->n - 1, mid, c;

    while (lo <= hi) {
        mid = lo + (hi - lo) / 2;
        c = memcmp(d, a->keys[mid].digest, KEYHASH_LEN);
        if (c == 0)
            return keyhash_equal_ct(d, a->keys[mid].digest, KEYHASH_LEN) ? &a->keys[mid] : NULL;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

vbm_status http_auth_create(const char *path, http_auth **out, vbm_error *err)
{
    http_auth *a = calloc(1, sizeof *a);
    vbm_status st;

    *out = NULL;
    if (a == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_rwlock_init(&a->lock, NULL);
    pthread_mutex_init(&a->bucket, NULL);
    if (path != NULL && path[0] != '\0') {
        a->path = strdup(path);
        if (a->path == NULL) {
            http_auth_free(a);
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
        }
        st = auth_read(path, &a->keys, &a->n, err);
        if (st != VBM_OK) {
            http_auth_free(a);
            return st;
        }
    }
    *out = a;
    return VBM_OK;
}

/* Capacity of a bucket of rate rps. */
static double auth_capacity(double rps)
{
    return rps > 1.0 ? rps : 1.0;
}

vbm_status http_auth_reload(http_auth *a, vbm_error *err)
{
    auth_key *keys, *old, *prev;
    int n, i;
    vbm_status st;

    if (a->path == NULL)
        return VBM_OK;
    st = auth_read(a->path, &keys, &n, err);
    if (st != VBM_OK)
        return st;
    pthread_rwlock_wrlock(&a->lock);
    for (i = 0; i < n; i++) {
        prev = auth_find(a, keys[i].digest);
        if (prev != NULL) {
            double cap = auth_capacity(keys[i].policy.rps);

            keys[i].last = prev->last;
            keys[i].tokens = prev->tokens < cap ? prev->tokens : cap;
        }
    }
    old = a->keys;
    a->keys = keys;
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

int http_auth_check_policy(http_auth *a, const char *header, unsigned char owner[KEYHASH_LEN],
                           http_key_policy *pol)
{
    unsigned char digest[KEYHASH_LEN];
    const char *key;
    auth_key *k;

    if (header == NULL || strncasecmp(header, "Bearer ", 7) != 0)
        return 0;
    key = header + 7;
    while (*key == ' ')
        key++;
    if (*key == '\0')
        return 0;
    keyhash_digest(key, strlen(key), digest);
    pthread_rwlock_rdlock(&a->lock);
    k = auth_find(a, digest);
    if (k != NULL) {
        if (pol != NULL)
            *pol = k->policy;
        memcpy(owner, k->owner, KEYHASH_LEN);
    }
    pthread_rwlock_unlock(&a->lock);
    return k != NULL;
}

int http_auth_check(http_auth *a, const char *header, unsigned char owner[KEYHASH_LEN])
{
    return http_auth_check_policy(a, header, owner, NULL);
}

int http_auth_take(http_auth *a, const unsigned char key[KEYHASH_LEN], double now,
                   int *retry_after_s)
{
    auth_key *k;
    double cap, wait;
    int ok = 1;

    pthread_rwlock_rdlock(&a->lock);
    k = auth_find(a, key);
    if (k != NULL && k->policy.rps > 0.0) {
        cap = auth_capacity(k->policy.rps);
        pthread_mutex_lock(&a->bucket);
        if (k->last < 0.0) {
            k->tokens = cap;
        } else if (now > k->last) {
            k->tokens += (now - k->last) * k->policy.rps;
            if (k->tokens > cap)
                k->tokens = cap;
        }
        k->last = now > k->last ? now : k->last;
        if (k->tokens >= 1.0) {
            k->tokens -= 1.0;
        } else {
            ok = 0;
            wait = ceil((1.0 - k->tokens) / k->policy.rps);
            *retry_after_s = wait >= 1.0 ? (wait < 86400.0 ? (int)wait : 86400) : 1;
        }
        pthread_mutex_unlock(&a->bucket);
    }
    pthread_rwlock_unlock(&a->lock);
    return ok;
}

void http_auth_free(http_auth *a)
{
    if (a == NULL)
        return;
    pthread_rwlock_destroy(&a->lock);
    pthread_mutex_destroy(&a->bucket);
    free(a->keys);
    free(a->path);
    free(a);
}
