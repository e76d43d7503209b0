/* keyhash.h -- owns the hashing of API keys (SHA-256 from Debian's libnettle) and
 * their constant-time comparison. */
#ifndef VBMEM_HTTP_KEYHASH_H
#define VBMEM_HTTP_KEYHASH_H

#include <stddef.h>

#define KEYHASH_LEN 32

/* Write the SHA-256 digest of data[0..len) into out. Never fails. */
void keyhash_digest(const void *data, size_t len, unsigned char out[KEYHASH_LEN]);

/* 1 when a and b (n bytes each) are equal, 0 otherwise, in time that depends
 * only on n. Never fails. */
int keyhash_equal_ct(const unsigned char *a, const unsigned char *b, size_t n);

#endif
