/* rng.h -- explicit, seedable pseudo-random generator (xoshiro256**, seeded by
 * splitmix64); every random draw in libvbmem goes through one of these. */
#ifndef VBMEM_RNG_H
#define VBMEM_RNG_H

#include <stdint.h>

/* Generator state. Plain value: copy it to fork a stream; no hidden globals. */
typedef struct {
    uint64_t s[4];
} rng_t;

/* Seed a generator; equal seeds give equal streams. Never fails. */
void rng_seed(rng_t *r, uint64_t seed);
/* Next raw 64-bit value. */
uint64_t rng_next(rng_t *r);
/* Uniform double in [0, 1) with 53 random bits. */
double rng_uniform(rng_t *r);
/* Standard normal draw (ziggurat, Marsaglia-Tsang / Doornik; no cached state). */
double rng_normal(rng_t *r);
/* Fill out[0..n) with independent standard normal draws: the same stream as n
 * calls of rng_normal. */
void rng_normal_fill(rng_t *r, double *out, long n);
/* Uniform integer in [0, n); n must be >= 1. Unbiased (rejection). */
uint64_t rng_below(rng_t *r, uint64_t n);
/* Index drawn with probability w[i] / sum(w), w[i] >= 0, n >= 1. When every
 * weight is zero (or the sum is not finite) the draw is uniform. */
long rng_categorical(rng_t *r, const double *w, long n);

#endif
