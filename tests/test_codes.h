/* test_codes.h -- owns the helpers that the Check tests of online writes and of forgetting share:
 * clustered synthetic codes and a small dense SPD inverse written without the library. */
#ifndef VBMEM_TESTS_TEST_CODES_H
#define VBMEM_TESTS_TEST_CODES_H

#include <stdint.h>

/* T x C codes from Hc clusters (malloc'd; the caller frees): z_t = b_h + L_h^T v_t + 0.3 e_t
 * with b_h ~ N(0, 9 I), L_h (2 x C) standard normal, v_t, e_t standard normal, drawn from a
 * generator seeded with seed; frame t in cluster t mod Hc when round_robin, else in a
 * cluster drawn uniformly. NULL when out of memory. */
double *tc_clustered_codes(long T, int C, int Hc, uint64_t seed, int round_robin);

/* Inverse of the n x n symmetric positive definite A into inv by Gauss-Jordan elimination
 * (no pivoting needed for SPD); A is destroyed. Never fails. */
void tc_spd_inverse(int n, double *A, double *inv);

#endif
