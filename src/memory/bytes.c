/* bytes.c -- the byte buffer writer and reader of the binary memory formats (bytes.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"

void bytes_put(bytes_wbuf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

void bytes_put_u64(bytes_wbuf *b, uint64_t v)
{
    unsigned char x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    bytes_put(b, x, 8);
}

void bytes_put_f64(bytes_wbuf *b, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    bytes_put_u64(b, v);
}

void bytes_put_f64s(bytes_wbuf *b, const double *d, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__                           \
    && defined(__FLOAT_WORD_ORDER__) && __FLOAT_WORD_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The format's little-endian IEEE doubles are the host's own bytes: one copy. */
    if (n == 0) /* d may then be NULL, which memcpy may not be given */
        return;
    if (n <= SIZE_MAX / 8) {
        bytes_put(b, d, n * 8);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        bytes_put_f64(b, d[i]);
}

int bytes_get_u64(bytes_rbuf *r, uint64_t *v)
{
    if (r->len - r->off < 8)
        return -1;
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x |= (uint64_t)r->p[r->off + i] << (8 * i);
    r->off += 8;
    *v = x;
    return 0;
}

int bytes_get_f64(bytes_rbuf *r, double *d)
{
    uint64_t v;
    if (bytes_get_u64(r, &v))
        return -1;
    memcpy(d, &v, 8);
    return 0;
}

int bytes_get_f64s(bytes_rbuf *r, double *d, size_t n)
{
    if ((r->len - r->off) / 8 < n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        bytes_get_f64(r, &d[i]);
        if (!isfinite(d[i]))
            return -2;
    }
    return 0;
}
