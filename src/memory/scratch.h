/* scratch.h -- owns vbm_scratch: a caller-owned pool of large buffers that the
 * fits given it (vbm_write_opts.scratch) take their big per-fit arrays from and
 * give back to, one fit at a time. */
#ifndef VBMEM_SCRATCH_H
#define VBMEM_SCRATCH_H

#include <stddef.h>

#include "vbmem/vbmem.h"

/* Blocks the pool keeps between fits; a block given back to a full pool is freed. */
#define SCRATCH_SLOTS 8

/* Claim s for one fit. Returns 1 when the caller now holds it, 0 when s is NULL
 * or another fit holds it (that fit then allocates as without a scratch). */
int scratch_acquire(vbm_scratch *s);

/* Let another fit claim s. s must be held by the caller. */
void scratch_release(vbm_scratch *s);

/* A buffer of at least n doubles: the smallest kept block that is large enough,
 * else a new allocation. Its contents are unspecified (not zeroed). s may be
 * NULL (a plain allocation). Returns NULL when out of memory. */
double *scratch_take(vbm_scratch *s, size_t n);

/* Give back a buffer of n doubles from scratch_take (NULL is a no-op): kept by s
 * when s is non-NULL and has a free slot, else freed. */
void scratch_give(vbm_scratch *s, double *p, size_t n);

#endif
