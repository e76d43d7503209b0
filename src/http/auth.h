/* auth.h -- owns API keys: loading the key file, reloading it, and checking bearer tokens in constant time. */
#ifndef VBMEM_HTTP_AUTH_H
#define VBMEM_HTTP_AUTH_H

#include "engine/engine.h"
#include "http/keyhash.h"

typedef struct http_auth http_auth;

/* Load the key file at path (one key per line; blank lines and lines starting
 * with '#' are ignored; surrounding whitespace is trimmed). path NULL or ""
 * disables authentication. Keys are kept only as SHA-256 digests. On success
 * *out is owned by the caller (http_auth_free). Fails with VBM_EINVAL when the
 * file cannot be read, VBM_ENOMEM. */
vbm_status http_auth_create(const char *path, http_auth **out, vbm_error *err);

/* Re-read the key file. On failure the previous keys stay in force and the
 * error is returned (VBM_EINVAL, VBM_ENOMEM). Returns VBM_OK without keys. */
vbm_status http_auth_reload(http_auth *a, vbm_error *err);

/* 1 when a key file is configured (even an empty one: then nothing passes). */
int http_auth_enabled(const http_auth *a);

/* Number of keys loaded. */
int http_auth_count(http_auth *a);

/* Check an Authorization header value ("Bearer KEY"; NULL when absent). On a
 * match returns 1 and writes the key's SHA-256 (the owner identity) into
 * owner. Every loaded key is compared, in constant time each. Returns 0 for a
 * missing, malformed or unknown key. Thread-safe with reload. */
int http_auth_check(http_auth *a, const char *header, unsigned char owner[KEYHASH_LEN]);

/* Free. NULL is a no-op. */
void http_auth_free(http_auth *a);

#endif
