/* vexp.c -- the exponential over arrays of doubles in vector lanes (see vexp.h). */
#include "vexp.h"

#include <string.h>

#include "linalg.h" /* LA_HOT */

typedef double vx_v4 __attribute__((vector_size(32)));
typedef double vx_v4u __attribute__((vector_size(32), aligned(8)));
typedef long long vx_i4 __attribute__((vector_size(32)));

/* out[0..4) = exp(in[0..4)): x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 split in
 * a high part with trailing zeros, so n ln2_hi is exact), exp(r) from its
 * Taylor polynomial of degree 13 (truncation below 1e-17 relative) evaluated
 * in pairs of terms (Estrin's scheme: short dependency chains) with the leading
 * 1 added last, times 2^n built in the
 * exponent bits (as 2^(n-1) times 2, so that n = 1024 still works). */
static inline __attribute__((always_inline)) void vexp4(const double *in, double *out)
{
    vx_v4 x = *(const vx_v4u *)in;
    const vx_v4 shifter = {0x1.8p52, 0x1.8p52, 0x1.8p52, 0x1.8p52};
    const double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    vx_v4 t = x * 1.4426950408889634 + shifter; /* round(x / ln 2) in the low bits */
    vx_v4 n = t - shifter;
    vx_v4 r = x - n * ln2_hi;
    r = r - n * ln2_lo;
    vx_v4 r2 = r * r, r4 = r2 * r2;
    vx_v4 a23 = 0.5 + r * (1.0 / 6.0), a45 = 1.0 / 24.0 + r * (1.0 / 120.0);
    vx_v4 a67 = 1.0 / 720.0 + r * (1.0 / 5040.0), a89 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
    vx_v4 a1011 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0),
          a1213 = 1.0 / 479001600.0 + r * (1.0 / 6227020800.0);
    vx_v4 b1 = a45 + r2 * a67, b2 = a89 + r2 * a1011 + r4 * a1213;
    vx_v4 p =
        1.0 + (r + r2 * (a23 + r2 * b1 + r4 * r2 * b2)); /* the 1 added last: one rounding near 1 */
    vx_i4 k = (vx_i4)t - (vx_i4)shifter;                 /* n as an integer */
    vx_i4 scale = (k + 1022) << 52;                      /* 2^(n-1) */
    vx_v4 y = p * (vx_v4)scale * 2.0;
    vx_i4 keep = ~(x < -708.0); /* all ones, NaN included, unless below the range */
    vx_i4 big = x > 709.79;
    const vx_i4 inf = {0x7ff0000000000000LL, 0x7ff0000000000000LL, 0x7ff0000000000000LL,
                       0x7ff0000000000000LL};
    *(vx_v4u *)out = (vx_v4)((((vx_i4)y & keep) & ~big) | (inf & big));
}

LA_HOT void vexp_array(long n, const double *x, double *y)
{
    long i = 0;
    for (; i + 8 <= n; i += 8) { /* two independent chains in flight */
        vexp4(x + i, y + i);
        vexp4(x + i + 4, y + i + 4);
    }
    for (; i + 4 <= n; i += 4)
        vexp4(x + i, y + i);
    if (i < n) { /* the last one to three values, padded to a vector */
        double pad[4] = {0.0, 0.0, 0.0, 0.0};
        memcpy(pad, x + i, sizeof(double) * (size_t)(n - i));
        vexp4(pad, pad);
        memcpy(y + i, pad, sizeof(double) * (size_t)(n - i));
    }
}
