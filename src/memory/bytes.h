/* bytes.h -- the growing byte buffer and the little-endian u64/f64 reader that the binary
 * memory formats (export.c, temporal_export.c) write and read. */
#ifndef VBMEM_BYTES_H
#define VBMEM_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* A buffer being written: p (owned by the writer; realloc'd) holds len of cap bytes; oom is set
 * once an allocation failed, after which every put does nothing. Start from {0}. */
typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
} bytes_wbuf;

/* Append n bytes of src. Never fails: on out-of-memory sets b->oom and keeps what it had. */
void bytes_put(bytes_wbuf *b, const void *src, size_t n);
/* Append v as 8 little-endian bytes (as bytes_put). */
void bytes_put_u64(bytes_wbuf *b, uint64_t v);
/* Append d as its IEEE-754 bits, little-endian (as bytes_put). */
void bytes_put_f64(bytes_wbuf *b, double d);
/* Append n doubles (as bytes_put_f64 each); d may be NULL when n is 0. */
void bytes_put_f64s(bytes_wbuf *b, const double *d, size_t n);

/* A buffer being read: len bytes at p (not owned), off the next one to read. */
typedef struct {
    const unsigned char *p;
    size_t len, off;
} bytes_rbuf;

/* Read a little-endian u64 into *v: 0, or -1 (nothing consumed) when fewer than 8 bytes remain. */
int bytes_get_u64(bytes_rbuf *r, uint64_t *v);
/* Read a double (its IEEE-754 bits): 0, or -1 when truncated. */
int bytes_get_f64(bytes_rbuf *r, double *d);
/* Read n finite doubles: 0, -1 when fewer than n remain, -2 when one is not finite. */
int bytes_get_f64s(bytes_rbuf *r, double *d, size_t n);

#endif
