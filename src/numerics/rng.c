/* rng.c -- xoshiro256** generator with splitmix64 seeding, and the derived
 * uniform, normal and categorical draws used by the memory models. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

double rng_normal(rng_t *r) {
    double u1 = 1.0 - rng_uniform(r); /* (0, 1] so the log is finite */
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

void rng_normal_fill(rng_t *r, double *out, long n) {
    long i = 0;
    for (; i + 1 < n; i += 2) {
        double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586476925 * u2;
        out[i] = rad * cos(ang);
        out[i + 1] = rad * sin(ang);
    }
    if (i < n) out[i] = rng_normal(r);
}

uint64_t rng_below(rng_t *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    uint64_t x;
    do {
        x = rng_next(r);
    } while (x >= limit);
    return x % n;
}

long rng_categorical(rng_t *r, const double *w, long n) {
    double total = 0.0;
    for (long i = 0; i < n; i++) total += w[i];
    if (!(total > 0.0) || !isfinite(total)) return (long)rng_below(r, (uint64_t)n);
    double u = rng_uniform(r) * total, acc = 0.0;
    for (long i = 0; i < n; i++) {
        acc += w[i];
        if (u < acc) return i;
    }
    for (long i = n - 1; i >= 0; i--)
        if (w[i] > 0.0) return i; /* rounding: last positive weight */
    return n - 1;
}
