/* keyhash.c -- SHA-256 of API keys through libnettle, and constant-time digest comparison. */
#include "keyhash.h"

#include <nettle/memops.h>
#include <nettle/sha2.h>

void keyhash_digest(const void *data, size_t len, unsigned char out[KEYHASH_LEN])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, data);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, out);
}

int keyhash_equal_ct(const unsigned char *a, const unsigned char *b, size_t n)
{
    return memeql_sec(a, b, n) ? 1 : 0;
}
