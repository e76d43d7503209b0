/* test_codes.c -- owns the helpers that the Check tests of online writes and of forgetting share:
 * clustered synthetic codes and a small dense SPD inverse written without the library. */
#include "test_codes.h"

#include <stdlib.h>

#include "numerics/rng.h"

double *tc_clustered_codes(long T, int C, int Hc, uint64_t seed, int round_robin)
{
    rng_t r;
    double *b = malloc(sizeof(double) * Hc * C), *L = malloc(sizeof(double) * Hc * 2 * C);
    double *z = malloc(sizeof(double) * T * C);

    if (b == NULL || L == NULL || z == NULL) {
        free(b);
        free(L);
        free(z);
        return NULL;
    }
    rng_seed(&r, seed);
    for (int i = 0; i < Hc * C; i++)
        b[i] = 3.0 * rng_normal(&r);
    for (int i = 0; i < Hc * 2 * C; i++)
        L[i] = rng_normal(&r);
    for (long t = 0; t < T; t++) {
        int h = round_robin ? (int)(t % Hc) : (int)rng_below(&r, (uint64_t)Hc);
        double v0 = rng_normal(&r), v1 = rng_normal(&r);

        for (int c = 0; c < C; c++)
            z[t * C + c] = b[h * C + c] + L[(h * 2) * C + c] * v0 + L[(h * 2 + 1) * C + c] * v1
                           + 0.3 * rng_normal(&r);
    }
    free(b);
    free(L);
    return z;
}

void tc_spd_inverse(int n, double *A, double *inv)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            inv[i * n + j] = i == j;
    for (int p = 0; p < n; p++) {
        double d = A[p * n + p];

        for (int j = 0; j < n; j++) {
            A[p * n + j] /= d;
            inv[p * n + j] /= d;
        }
        for (int i = 0; i < n; i++) {
            if (i == p)
                continue;
            double f = A[i * n + p];

            for (int j = 0; j < n; j++) {
                A[i * n + j] -= f * A[p * n + j];
                inv[i * n + j] -= f * inv[p * n + j];
            }
        }
    }
}
