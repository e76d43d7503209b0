/* auth.h -- owns API keys: loading the key file (keys with a scope, an owner and quotas), reloading
 * it, checking bearer tokens by their SHA-256, and each key's request-rate token bucket. */
#ifndef VBMEM_HTTP_AUTH_H
#define VBMEM_HTTP_AUTH_H

#include <stddef.h>

#include "engine/clock.h"
#include "http/keyhash.h"

typedef struct http_auth http_auth;

/* What a key may do. */
typedef enum {
    HTTP_SCOPE_WRITE = 0, /* everything (a bare key) */
    HTTP_SCOPE_READ = 1   /* reads only: writes answer 403 */
} http_scope;

#define HTTP_OWNER_NAME_LEN 64

/* A key's scope, owner and quotas (0: no quota). */
typedef struct {
    http_scope scope;
    char owner[HTTP_OWNER_NAME_LEN]; /* owner=NAME: keys naming one owner share its sessions;
                                        "": the key owns its sessions alone */
    long max_sessions;               /* sessions of the owner */
    size_t max_bytes;                /* accounted bytes of the owner's sessions */
    double rps;                      /* requests per second (bucket of max(1, rps) tokens) */
    unsigned char key[KEYHASH_LEN];  /* the key's own SHA-256 (its rate bucket); set by checks */
} http_key_policy;

/* Parse one line of the key file: "KEY [scope=read|write] [owner=NAME]
 * [sessions=N] [bytes=N] [rps=R]" separated by blanks (NAME 1..63 characters
 * of [A-Za-z0-9._:-], N an integer >= 1, R a number > 0; each option at most
 * once). Blank lines and lines whose first non-blank
 * character is '#' give *key_len 0. On success the key is
 * line[*key_off .. *key_off + *key_len) and *pol holds its policy (a bare key:
 * scope write, no quotas). A line whose first word looks like an option
 * ("scope=...", "owner=...", ...: the key was left out) is refused, and so is
 * a key that begins with "vbmem-owner:" (named owners' identities are the
 * SHA-256 of "vbmem-owner:NAME", bare keys' the SHA-256 of the key: the
 * prefix keeps the two apart). Fails
 * with VBM_EINVAL (field "api_key_file") and a
 * message naming the offending option by position and name only (never the
 * key or an option's text, which could be part of a secret). */
vbm_status http_auth_parse_line(const char *line, size_t *key_off, size_t *key_len,
                                http_key_policy *pol, vbm_error *err);

/* Load the key file at path (one key per line, see http_auth_parse_line).
 * path NULL or "" disables authentication. Keys are kept only as SHA-256
 * digests. On success *out is owned by the caller (http_auth_free). Fails
 * with VBM_EINVAL when the file cannot be read, holds no key (empty, or only
 * blank lines and comments), begins with a UTF-8 byte-order mark, a line is
 * malformed, holds a NUL byte or is longer than 4094 bytes (the message gives
 * its number) or a key repeats; VBM_ENOMEM. */
vbm_status http_auth_create(const char *path, http_auth **out, vbm_error *err);

/* Re-read the key file. On failure the previous keys stay in force and the
 * error is returned (VBM_EINVAL, VBM_ENOMEM). Keys still present keep their
 * request-rate bucket (capped to the new rate's capacity); their new scope
 * and quotas apply to the next request. Returns VBM_OK without keys. */
vbm_status http_auth_reload(http_auth *a, vbm_error *err);

/* 1 when a key file is configured. */
int http_auth_enabled(const http_auth *a);

/* Number of keys loaded. */
int http_auth_count(http_auth *a);

/* Check an Authorization header value ("Bearer KEY"; NULL when absent). On a
 * match returns 1 and writes the owner identity into owner: the key's SHA-256,
 * or for a key with owner=NAME the SHA-256 of "vbmem-owner:NAME". The key's
 * SHA-256 is looked up among the loaded keys' digests (a binary search: its
 * timing depends on digests only, never on the key's characters) and the
 * match confirmed in constant time. Returns 0 for a missing, malformed or
 * unknown key. Thread-safe with reload. */
int http_auth_check(http_auth *a, const char *header, unsigned char owner[KEYHASH_LEN]);

/* Like http_auth_check; on a match also copies the key's policy (with its
 * own digest in pol->key) into *pol (pol may be NULL). */
int http_auth_check_policy(http_auth *a, const char *header, unsigned char owner[KEYHASH_LEN],
                           http_key_policy *pol);

/* Take one request token of the key whose own digest is key at time now
 * (seconds, monotonic). Returns 1 when the request may go on (also for a key
 * without a rate quota or no longer loaded), 0 when the bucket is empty: then
 * *retry_after_s receives the whole seconds (>= 1) until a token is back.
 * Thread-safe with reload and with other callers. */
int http_auth_take(http_auth *a, const unsigned char key[KEYHASH_LEN], double now,
                   int *retry_after_s);

/* Free. NULL is a no-op. */
void http_auth_free(http_auth *a);

#endif
