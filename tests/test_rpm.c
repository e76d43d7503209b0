/* test_rpm.c -- Check tests of the served RPM (src/nets/gp.c, src/nets/rpm.c): the GP posterior
 * against brute-force dense Gaussian algebra written here, and (when present) the model file and
 * infer against the PyTorch golden file of train/golden_rpm.py. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nets/gp.h"
#include "numerics/rng.h"

/* ---- brute force: dense Gauss-Jordan with partial pivoting ---- */

/* Solve A X = B for n x n A and n x m B (both row-major, copied); X into out. Returns 0, or -1
 * when A is singular to working precision. */
static int gj_solve(int n, int m, const double *A, const double *B, double *out)
{
    double *a = malloc(sizeof(double) * (size_t)n * n), *x = malloc(sizeof(double) * (size_t)n * m);
    memcpy(a, A, sizeof(double) * (size_t)n * n);
    memcpy(x, B, sizeof(double) * (size_t)n * m);
    int rc = 0;
    for (int c = 0; c < n && rc == 0; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (fabs(a[p * n + c]) < 1e-300) {
            rc = -1;
            break;
        }
        for (int k = 0; k < n; k++) {
            double t = a[c * n + k];
            a[c * n + k] = a[p * n + k];
            a[p * n + k] = t;
        }
        for (int k = 0; k < m; k++) {
            double t = x[c * m + k];
            x[c * m + k] = x[p * m + k];
            x[p * m + k] = t;
        }
        double piv = a[c * n + c];
        for (int r = 0; r < n; r++) {
            if (r == c)
                continue;
            double f = a[r * n + c] / piv;
            for (int k = 0; k < n; k++)
                a[r * n + k] -= f * a[c * n + k];
            for (int k = 0; k < m; k++)
                x[r * m + k] -= f * x[c * m + k];
        }
    }
    for (int r = 0; r < n && rc == 0; r++)
        for (int k = 0; k < m; k++)
            out[r * m + k] = x[r * m + k] / a[r * n + r];
    free(a);
    free(x);
    return rc;
}

/* An RBF kernel on steps 0..T-1 plus jitter on the diagonal. */
static void rbf(int T, double var, double len, double jitter, double *K)
{
    for (int i = 0; i < T; i++)
        for (int k = 0; k < T; k++)
            K[i * T + k] = var * exp(-0.5 * (i - k) * (i - k) / (len * len)) + (i == k ? jitter : 0);
}

static void assert_close(const char *what, int t, double got, double want, double rtol)
{
    ck_assert_msg(fabs(got - want) <= rtol * (fabs(want) + 1e-3), "%s[%d]: %.12g, expected %.12g",
                  what, t, got, want);
}

/* Positive d: the posterior is the prior conditioned on pseudo-observations y = b / d with noise
 * variances 1 / d. Brute force: the joint Gaussian of (z, y), cov(z, y) = K, cov(y) = K + D^-1;
 * mean = K (K + D^-1)^-1 y, cov = K - K (K + D^-1)^-1 K. */
START_TEST(test_gp_conditioning)
{
    for (int T = 1; T <= 9; T += 2) {
        rng_t r;
        rng_seed(&r, 100 + (uint64_t)T);
        double *K = malloc(sizeof(double) * T * T), *C = malloc(sizeof(double) * T * T);
        double *KK = malloc(sizeof(double) * T * T), *Y = malloc(sizeof(double) * T * (T + 1));
        double d[9], b[9], y[9], mean[9], var[9];
        rbf(T, 1.0 + rng_uniform(&r), 1.0 + 3.0 * rng_uniform(&r), 1e-4, K);
        for (int t = 0; t < T; t++) {
            d[t] = 0.1 + 5.0 * rng_uniform(&r);
            b[t] = rng_normal(&r) * d[t];
            y[t] = b[t] / d[t];
        }
        ck_assert_int_eq(gp_posterior(T, K, d, b, mean, var, NULL, NULL), VBM_OK);
        /* C = K + D^-1; solve C [X | x] = [K | y] */
        double *RHS = malloc(sizeof(double) * T * (T + 1));
        for (int i = 0; i < T; i++) {
            for (int k = 0; k < T; k++) {
                C[i * T + k] = K[i * T + k] + (i == k ? 1.0 / d[i] : 0.0);
                RHS[i * (T + 1) + k] = K[i * T + k];
            }
            RHS[i * (T + 1) + T] = y[i];
        }
        ck_assert_int_eq(gj_solve(T, T + 1, C, RHS, Y), 0);
        for (int t = 0; t < T; t++) {
            double m = 0, v = K[t * T + t];
            for (int k = 0; k < T; k++) {
                m += K[t * T + k] * Y[k * (T + 1) + T];
                v -= K[t * T + k] * Y[k * (T + 1) + t];
            }
            assert_close("mean", t, mean[t], m, 1e-7);
            assert_close("var", t, var[t], v, 1e-7);
            ck_assert(var[t] > 0);
        }
        free(K);
        free(C);
        free(KK);
        free(Y);
        free(RHS);
    }
}
END_TEST

/* Negative d (the RPM's -J / K_tt term): the dense precision P = K^-1 + diag(d) formed with an
 * explicit inverse here (test code only), then P^-1 and P^-1 b by Gauss-Jordan. */
START_TEST(test_gp_negative_d)
{
    const int T = 7;
    rng_t r;
    rng_seed(&r, 7);
    double K[49], I[49], Ki[49], P[49], S[49], d[7], b[7], mean[7], var[7];
    rbf(T, 2.0, 2.5, 1e-3, K);
    for (int i = 0; i < T * T; i++)
        I[i] = (i % (T + 1)) == 0;
    ck_assert_int_eq(gj_solve(T, T, K, I, Ki), 0);
    for (int t = 0; t < T; t++) {
        /* J = 3 factors of precision lam each, minus J / K_tt */
        double lam = 0.2 + rng_uniform(&r);
        d[t] = 3 * lam - 3.0 / K[t * T + t];
        b[t] = rng_normal(&r);
    }
    ck_assert(d[0] < 0 || d[1] < 0 || d[2] < 0 || d[3] < 0); /* the case this test is about */
    for (int i = 0; i < T * T; i++)
        P[i] = Ki[i] + ((i % (T + 1)) == 0 ? d[i / T] : 0.0);
    ck_assert_int_eq(gj_solve(T, T, P, I, S), 0);
    ck_assert_int_eq(gp_posterior(T, K, d, b, mean, var, NULL, NULL), VBM_OK);
    for (int t = 0; t < T; t++) {
        double m = 0;
        for (int k = 0; k < T; k++)
            m += S[t * T + k] * b[k];
        assert_close("mean", t, mean[t], m, 1e-6);
        assert_close("var", t, var[t], S[t * T + t], 1e-6);
    }
    /* with a caller's workspace: the same bits */
    double *ws = malloc(sizeof(double) * gp_workspace(T)), m2[7], v2[7];
    ck_assert_int_eq(gp_posterior(T, K, d, b, m2, v2, ws, NULL), VBM_OK);
    ck_assert(memcmp(m2, mean, sizeof mean) == 0 && memcmp(v2, var, sizeof var) == 0);
    free(ws);
}
END_TEST

START_TEST(test_gp_failures)
{
    double K[9], d[3] = {1, 1, 1}, b[3] = {0, 1, 0}, mean[3], var[3];
    vbm_error err;
    rbf(3, 1.0, 1.0, 1e-6, K);
    ck_assert_int_eq(gp_posterior(0, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "T = 0") != NULL, "%s", err.msg);
    ck_assert_int_eq(gp_posterior(GP_MAX_T + 1, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
    ck_assert_int_eq(gp_posterior(3, K, NULL, b, mean, var, NULL, &err), VBM_EINVAL);
    b[1] = NAN;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "not finite") != NULL, "%s", err.msg);
    b[1] = 1;
    /* a posterior precision that is not positive definite */
    d[1] = -50;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_ENUMERIC);
    ck_assert_msg(strstr(err.msg, "posterior precision is not positive definite") != NULL, "%s",
                  err.msg);
    d[1] = 1;
    /* a prior covariance that is not */
    K[4] = -1;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_ENUMERIC);
    ck_assert_msg(strstr(err.msg, "prior covariance is not positive definite") != NULL, "%s",
                  err.msg);
    K[4] = INFINITY;
    ck_assert_int_eq(gp_posterior(3, K, d, b, mean, var, NULL, &err), VBM_EINVAL);
}
END_TEST

static Suite *rpm_suite(void)
{
    Suite *s = suite_create("rpm");
    TCase *tc = tcase_create("gp");
    tcase_add_test(tc, test_gp_conditioning);
    tcase_add_test(tc, test_gp_negative_d);
    tcase_add_test(tc, test_gp_failures);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rpm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
