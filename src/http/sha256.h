/* sha256.h -- owns a self-contained SHA-256 (FIPS 180-4) used to hash API keys. */
#ifndef VBMEM_HTTP_SHA256_H
#define VBMEM_HTTP_SHA256_H

#include <stddef.h>

#define SHA256_LEN 32

/* Write the SHA-256 digest of data[0..len) into out. Never fails. */
void sha256_digest(const void *data, size_t len, unsigned char out[SHA256_LEN]);

/* 1 when a and b (n bytes each) are equal, 0 otherwise, in time that depends
 * only on n. Never fails. */
int sha256_equal_ct(const unsigned char *a, const unsigned char *b, size_t n);

#endif
