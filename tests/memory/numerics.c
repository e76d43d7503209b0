/* numerics.c -- Check tests of libvbmem (test-models, tests/test_models.c): the numerics under the
 * memories: the normal generator, the vector exp and the small dense kernels of numerics/linalg. */
#include "common.h"

/* ---- the normal generator (ziggurat) draws a standard normal ---- */

START_TEST(normal_draws_are_standard)
{
    const long n = 2000000;
    rng_t r;
    rng_seed(&r, 2024);
    double s1 = 0.0, s2 = 0.0, s4 = 0.0;
    long over1 = 0, over2 = 0, tail = 0, low = 0, high = 0;
    /* empirical CDF at -4, -3.9, ..., 4 against Phi (Kolmogorov-Smirnov distance on a grid) */
    enum { NG = 81 };
    long below[NG] = {0};
    for (long i = 0; i < n; i++) {
        double x = rng_normal(&r);
        ck_assert(isfinite(x));
        s1 += x;
        s2 += x * x;
        s4 += x * x * x * x;
        over1 += fabs(x) > 1.0;
        over2 += fabs(x) > 2.0;
        tail += fabs(x) > 3.5; /* beyond the ziggurat's base R = 3.44: the tail algorithm */
        low += x < -3.5;
        high += x > 3.5;
        for (int g = 0; g < NG; g++)
            below[g] += x < -4.0 + 0.1 * g;
    }
    double mean = s1 / n, var = s2 / n - mean * mean;
    ck_assert_double_le(fabs(mean), 0.003);
    ck_assert_double_le(fabs(var - 1.0), 0.004);
    ck_assert_double_le(fabs(s4 / n - 3.0), 0.03);
    ck_assert_double_le(fabs((double)over1 / n - 0.3173105), 0.0015);
    ck_assert_double_le(fabs((double)over2 / n - 0.0455003), 0.0006);
    ck_assert_double_le(fabs((double)tail / n - 4.6527e-4), 6e-5);
    ck_assert_double_le(fabs((double)low / n - 2.3263e-4), 5e-5); /* both tails, each side */
    ck_assert_double_le(fabs((double)high / n - 2.3263e-4), 5e-5);
    double ks = 0.0;
    for (int g = 0; g < NG; g++) {
        double x = -4.0 + 0.1 * g, phi = 0.5 * erfc(-x / sqrt(2.0));
        ks = fmax(ks, fabs((double)below[g] / n - phi));
    }
    ck_assert_double_le(ks, 0.0015);
    /* the fill gives the same stream as single draws (20,000 draws: ~1 % take the wedge or tail
     * path),
     * and leaves the generator in the same state */
    enum { NF = 20000 };
    double *a = malloc(sizeof(double) * NF), *b = malloc(sizeof(double) * NF);
    ck_assert(a && b);
    rng_seed(&r, 9);
    rng_normal_fill(&r, a, NF);
    uint64_t next_a = rng_next(&r);
    rng_seed(&r, 9);
    for (int i = 0; i < NF; i++)
        b[i] = rng_normal(&r);
    ck_assert(memcmp(a, b, sizeof(double) * NF) == 0);
    ck_assert(rng_next(&r) == next_a);
    free(a);
    free(b);
}
END_TEST

/* vexp_array against glibc's exp: within 1 ulp over the whole normal range
 * (and densely near 0, where the softmax's values lie), the documented ends
 * and NaN, and the same bits for a value wherever it sits in the array (the
 * padded tail included). */
START_TEST(vector_exp_matches_libm)
{
    rng_t rng;
    rng_seed(&rng, 31);
    long n = 20003;
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n),
           *z = malloc(sizeof(double) * n);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_nonnull(z);
    for (long i = 0; i < n; i++)
        x[i] = i % 2 ? -40.0 * rng_uniform(&rng) : -708.0 + (709.78 + 708.0) * rng_uniform(&rng);
    vexp_array(n, x, y);
    for (long i = 0; i < n; i++) {
        double e = exp(x[i]), ulp = nextafter(e, INFINITY) - e;
        ck_assert_msg(fabs(y[i] - e) <= ulp, "exp(%.17g): %.17g, glibc %.17g", x[i], y[i], e);
    }
    for (long s = 1; s < 8; s++) { /* shifted and short arrays: the same bits */
        vexp_array(n - s, x + s, z);
        ck_assert_int_eq(memcmp(z, y + s, sizeof(double) * (size_t)(n - s)), 0);
        vexp_array(s, x + 100, z);
        ck_assert_int_eq(memcmp(z, y + 100, sizeof(double) * (size_t)s), 0);
    }
    double in[8] = {0.0, -0.0, NAN, INFINITY, -INFINITY, -709.0, 710.0, 1.0}, out[8];
    vexp_array(8, in, out);
    ck_assert(out[0] == 1.0 && out[1] == 1.0);
    ck_assert(isnan(out[2]));
    ck_assert(isinf(out[3]) && out[3] > 0.0);
    ck_assert(out[4] == 0.0 && out[5] == 0.0);
    ck_assert(isinf(out[6]) && out[6] > 0.0);
    ck_assert(fabs(out[7] - exp(1.0)) <= nextafter(exp(1.0), INFINITY) - exp(1.0));
    vexp_array(n, x, x); /* in place */
    ck_assert_int_eq(memcmp(x, y, sizeof(double) * (size_t)n), 0);
    free(x);
    free(y);
    free(z);
}
END_TEST

/* ---- the small dense kernels: exact against the plain sums they stand for ---- */

/* The sum dot_rows forms for A_i . B_j: four lanes over the blocks of four
 * terms, the last k mod 4 terms added to lane 0, then (l0 + l1) + (l2 + l3). */
static double lane_dot(int k, const double *a, const double *b)
{
    double l[4] = {0.0, 0.0, 0.0, 0.0};
    int p = 0;
    for (; p + 4 <= k; p += 4)
        for (int q = 0; q < 4; q++)
            l[q] += a[p + q] * b[p + q];
    for (; p < k; p++)
        l[0] += a[p] * b[p];
    return (l[0] + l[1]) + (l[2] + l[3]);
}

START_TEST(small_abt_is_exact)
{
    /* la_gemm's small A B^T path and la_gemm_sym (dot_rows, with its AVX-512
     * variant when this CPU has one and VBMEM_LA_NO_AVX512 is unset) against
     * the lane sums above, bit for bit */
    const int ks[] = {1, 3, 4, 7, 64, 65};
    double *A = randn(9 * 70, 111, 1.0), *B = randn(9 * 70, 112, 1.0),
           *C0 = randn(9 * 12, 113, 1.0);
    double C[9 * 12], R[9 * 12];
    for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
        for (int m = 1; m <= 9; m++)
            for (int n = 1; n <= 9; n++)
                for (int bt = 0; bt < 2; bt++) {
                    int k = ks[ik], lda = 70, ldc = 12;
                    double alpha = 0.75, beta = bt ? -0.5 : 0.0;
                    memcpy(C, C0, sizeof C);
                    memcpy(R, C0, sizeof R);
                    la_gemm(0, 1, m, n, k, alpha, A, lda, B, lda, beta, C, ldc);
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) {
                            double d = lane_dot(k, A + i * lda, B + j * lda);
                            R[i * ldc + j] =
                                beta == 0.0 ? alpha * d : beta * R[i * ldc + j] + alpha * d;
                        }
                    if ((long)m * n * k
                        <= 8192) /* the dot_rows path (larger ones go to OpenBLAS) */
                        ck_assert_msg(memcmp(C, R, sizeof C) == 0, "A B^T m=%d n=%d k=%d beta=%g",
                                      m, n, k, beta);
                }
    for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
        for (int n = 1; n <= 9; n++) {
            int k = ks[ik], lda = 70, ldc = 12;
            la_gemm_sym(n, k, 0.5, A, lda, B, lda, C, ldc);
            for (int i = 0; i < n; i++)
                for (int j = 0; j <= i; j++) {
                    double d = 0.5 * lane_dot(k, A + i * lda, B + j * lda);
                    ck_assert_msg(memcmp(&C[i * ldc + j], &d, sizeof d) == 0
                                      && memcmp(&C[j * ldc + i], &d, sizeof d) == 0,
                                  "sym n=%d k=%d (%d, %d)", n, k, i, j);
                }
        }
    free(A);
    free(B);
    free(C0);
}
END_TEST

START_TEST(all_finite_finds_each_position)
{
    /* la_all_finite over every length up to 21 with one bad value at every
     * position (the vector blocks and the tail), and huge finite values */
    const double bad[3] = {NAN, INFINITY, -INFINITY};
    double x[21];
    for (int n = 0; n <= 21; n++) {
        for (int i = 0; i < n; i++)
            x[i] = i % 2 ? -1e308 : 1e308;
        ck_assert_int_eq(la_all_finite(n, x), 1);
        for (int b = 0; b < 3; b++)
            for (int i = 0; i < n; i++) {
                double keep = x[i];
                x[i] = bad[b];
                ck_assert_msg(la_all_finite(n, x) == 0, "n=%d, %g at %d", n, bad[b], i);
                x[i] = keep;
            }
    }
}
END_TEST

START_TEST(short_gemm_is_exact)
{
    /* la_gemm's short-A path (and its AVX-512 variant, when this CPU has one and
     * VBMEM_LA_NO_AVX512 is unset) sums each element over p in order with one
     * multiply and one add per term: the same operations as the loop below, so
     * the same bits. */
    const int ns[] = {1, 3, 8, 13, 16, 31, 64, 200}, ks[] = {1, 5, 64};
    double *A = randn(21 * 70, 101, 1.0), *B = randn(70 * 210, 102, 1.0),
           *C0 = randn(8 * 210, 103, 1.0);
    double *C = malloc(sizeof(double) * 8 * 210), *R = malloc(sizeof(double) * 8 * 210);
    for (int m = 1; m <= 8; m++)
        for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
            for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
                for (int bt = 0; bt < 2; bt++) {
                    int n = ns[in], k = ks[ik], lda = 70, ldb = 210, ldc = 209;
                    double alpha = 0.75, beta = bt ? -0.5 : 0.0;
                    for (int i = 0; i < 8 * 209; i++)
                        C[i] = R[i] = C0[i];
                    la_gemm(0, 0, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) {
                            double s = 0.0;
                            for (int p = 0; p < k; p++)
                                s += A[i * lda + p] * B[p * ldb + j];
                            R[i * ldc + j] =
                                beta == 0.0 ? alpha * s : alpha * s + beta * R[i * ldc + j];
                        }
                    ck_assert_msg(memcmp(C, R, sizeof(double) * 8 * 209) == 0,
                                  "m=%d n=%d k=%d beta=%g", m, n, k, beta);
                }
    /* la_gram: A A^T from A and A^T, the same plain sums, both triangles */
    for (int n = 1; n <= 21; n += 4) {
        int k = 37, lda = 40, ldt = 23, ldc = 22;
        double *At = malloc(sizeof(double) * k * ldt);
        ck_assert_ptr_nonnull(At);
        for (int i = 0; i < n; i++)
            for (int p = 0; p < k; p++)
                At[p * ldt + i] = A[i * lda + p];
        for (int i = 0; i < 8 * 209; i++)
            C[i] = NAN;
        la_gram(n, k, A, lda, At, ldt, C, ldc);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int p = 0; p < k; p++)
                    s += A[i * lda + p] * A[j * lda + p];
                ck_assert_msg(memcmp(&C[i * ldc + j], &s, sizeof s) == 0, "gram n=%d (%d, %d)", n,
                              i, j);
            }
        free(At);
    }
    /* k = 0 with beta = 0: C is set to zero, never read (BLAS semantics) */
    for (int i = 0; i < 8 * 209; i++)
        C[i] = NAN;
    la_gemm(0, 0, 3, 5, 0, 1.0, A, 70, B, 210, 0.0, C, 209);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            ck_assert(C[i * 209 + j] == 0.0);
    free(A);
    free(B);
    free(C0);
    free(C);
    free(R);
}
END_TEST

START_TEST(small_cholesky_solves)
{
    /* the column-block and sweep paths of la_chol_solve against a plain
     * substitution, for right-hand sides below, at and past the block path */
    const int nrhs[] = {1, 2, 6, 15, 16, 17, 64, 203};
    for (int n = 1; n <= 16; n += 5) {
        double *M = randn(n * n, 111 + n, 1.0), *Q = malloc(sizeof(double) * n * n);
        for (int i = 0; i < n; i++) /* Q = M M^T + n I */
            for (int j = 0; j < n; j++) {
                double s = i == j ? n : 0.0;
                for (int p = 0; p < n; p++)
                    s += M[i * n + p] * M[j * n + p];
                Q[i * n + j] = s;
            }
        ck_assert_int_eq(la_chol(n, Q), 0);
        for (size_t r = 0; r < sizeof nrhs / sizeof nrhs[0]; r++) {
            int m = nrhs[r], ld = m + 3;
            double *B = randn((long)n * ld, 120 + m, 1.0), *X = malloc(sizeof(double) * n * ld);
            memcpy(X, B, sizeof(double) * n * ld);
            ck_assert_int_eq(la_chol_solve(n, m, Q, X, ld), 0);
            for (int j = 0; j < m; j++) { /* L y = b, L^T x = y, column by column */
                double y[16];
                for (int i = 0; i < n; i++) {
                    double v = B[i * ld + j];
                    for (int p = 0; p < i; p++)
                        v -= Q[i * n + p] * y[p];
                    y[i] = v / Q[i * n + i];
                }
                for (int i = n - 1; i >= 0; i--) {
                    double v = y[i];
                    for (int p = i + 1; p < n; p++)
                        v -= Q[p * n + i] * y[p];
                    y[i] = v / Q[i * n + i];
                }
                for (int i = 0; i < n; i++)
                    ck_assert_double_le(fabs(X[i * ld + j] - y[i]), 1e-12 * (1.0 + fabs(y[i])));
            }
            for (int i = 0; i < n; i++) /* the padding after each row is untouched */
                for (int j = m; j < ld; j++)
                    ck_assert(X[i * ld + j] == B[i * ld + j]);
            free(B);
            free(X);
        }
        free(M);
        free(Q);
    }
    /* la_chol_logdet: products of the diagonal, entry by entry where they leave the normal range */
    {
        double D[10 * 10] = {0}, want = 0.0;
        const double d[10] = {1e200, 1e200, 3.0, 1e-200, 1e-200, 1e-200, 0.5, 2.0, 7.0, 1e300};
        for (int i = 0; i < 10; i++) {
            D[i * 10 + i] = d[i];
            want += 2.0 * log(d[i]);
        }
        ck_assert_double_le(fabs(la_chol_logdet(10, D) - want), 1e-12 * fabs(want));
        ck_assert_double_le(
            fabs(la_chol_logdet(3, (double[]){2.0, 0, 0, 0, 3.0, 0, 0, 0, 5.0}) - 2.0 * log(30.0)),
            1e-15);
        D[3 * 10 + 3] = 0.0;
        ck_assert(isinf(la_chol_logdet(10, D)));
        D[3 * 10 + 3] = -1.0;
        ck_assert(isnan(la_chol_logdet(10, D)));
    }
}
END_TEST

START_TEST(four_lane_cholesky_matches_single)
{
    /* la_chol4, la_chol_inverse4 and la_chol_solve4 give each matrix the bits
     * la_chol, la_chol_inverse and la_chol_solve give it alone; a matrix that is
     * not positive definite is reported in its lane only */
    for (int n = 1; n <= 16; n += 3) {
        double *A[4], *S[4], *B[4], *C[4];
        size_t nn = (size_t)n * n;
        for (int l = 0; l < 4; l++) {
            double *M = randn((long)nn, 200 + 10 * n + l, 1.0);
            A[l] = malloc(sizeof(double) * nn);
            S[l] = malloc(sizeof(double) * nn);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    double v = i == j ? (l == 2 && n > 1 && i == n - 1 ? -1.0 : n)
                                      : 0.0; /* lane 2: not PD */
                    for (int p = 0; p < n; p++)
                        v += M[i * n + p] * M[j * n + p];
                    A[l][i * n + j] = S[l][i * n + j] =
                        l == 2 && n > 1 && i == n - 1 && j == n - 1 ? -50.0 * n : v;
                }
            free(M);
            B[l] = randn((long)n * 9, 300 + n + l, 1.0);
            C[l] = malloc(sizeof(double) * (size_t)n * 9);
            memcpy(C[l], B[l], sizeof(double) * (size_t)n * 9);
        }
        int bad = la_chol4(n, A);
        for (int l = 0; l < 4; l++) {
            int fail = la_chol(n, S[l]) != 0;
            ck_assert_int_eq((bad >> l) & 1, fail);
            if (!fail)
                ck_assert(memcmp(A[l], S[l], sizeof(double) * nn) == 0);
        }
        if (n > 1)
            ck_assert_int_eq(bad, 1 << 2);
        for (int l = 0; l < 4; l++)
            if ((bad >> l) & 1) { /* give the failed lane a valid factor for the next checks */
                memset(A[l], 0, sizeof(double) * nn);
                for (int i = 0; i < n; i++)
                    A[l][i * n + i] = 2.0;
                memcpy(S[l], A[l], sizeof(double) * nn);
            }
        for (int nrhs = 1; nrhs <= 9;
             nrhs += 8) { /* one and nine right-hand sides (row stride 9) */
            la_chol_solve4(n, nrhs, A, B, 9);
            for (int l = 0; l < 4; l++) {
                la_chol_solve(n, nrhs, S[l], C[l], 9);
                ck_assert(memcmp(B[l], C[l], sizeof(double) * (size_t)n * 9) == 0);
            }
        }
        la_chol_inverse4(n, A);
        for (int l = 0; l < 4; l++) {
            la_chol_inverse(n, S[l]);
            ck_assert(memcmp(A[l], S[l], sizeof(double) * nn) == 0);
            free(A[l]);
            free(S[l]);
            free(B[l]);
            free(C[l]);
        }
    }
}
END_TEST

TCase *models_numerics_tcase(void)
{
    TCase *tc = tcase_create("numerics");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, normal_draws_are_standard);
    tcase_add_test(tc, short_gemm_is_exact);
    tcase_add_test(tc, small_abt_is_exact);
    tcase_add_test(tc, all_finite_finds_each_position);
    tcase_add_test(tc, vector_exp_matches_libm);
    tcase_add_test(tc, small_cholesky_solves);
    tcase_add_test(tc, four_lane_cholesky_matches_single);
    return tc;
}
