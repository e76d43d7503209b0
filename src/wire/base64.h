/* base64.h -- owns standard padded base64 (RFC 4648) encoding and decoding. */
#ifndef VBMEM_WIRE_BASE64_H
#define VBMEM_WIRE_BASE64_H

#include <stddef.h>

/* Decode standard base64 (with '=' padding, no whitespace) of n characters.
 * On success *out (malloc'd, owned by the caller) holds *outlen bytes. Returns
 * 0, or -1 (with *out NULL) for invalid input or when out of memory. */
int wire_b64_decode(const char *s, size_t n, unsigned char **out, size_t *outlen);

/* Encode n bytes as standard padded base64 into a new NUL-terminated string
 * (malloc'd, owned by the caller). Returns NULL when out of memory. */
char *wire_b64_encode(const unsigned char *data, size_t n);

#endif
