/* test_fuse.c -- shows that eng_fuse_codes is the analytic RPM posterior: its mean and variance
 * against a brute-force product of densities prod_j N(z; mu_j, s2_j) / N(z; m0, v0)^(J-1) on 1-D
 * and 2-D grids, J = 1 bit for bit the input code, masked dimensions flat, and every bad input
 * refused with its field. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fuse.h"
#include "numerics/rng.h"

/* log N(z; m, v) */
static double lnorm(double z, double m, double v)
{
    return -0.5 * (z - m) * (z - m) / v - 0.5 * log(2.0 * 3.14159265358979323846 * v);
}

/* Mean and variance of the normalised density exp(lw) on the grid g (n points). */
static void grid_moments(const double *g, const double *lw, int n, double *mean, double *var)
{
    double mx = -INFINITY, w, sw = 0.0, s1 = 0.0, s2 = 0.0;
    int i;

    for (i = 0; i < n; i++)
        mx = lw[i] > mx ? lw[i] : mx;
    for (i = 0; i < n; i++) {
        w = exp(lw[i] - mx);
        sw += w;
        s1 += w * g[i];
        s2 += w * g[i] * g[i];
    }
    *mean = s1 / sw;
    *var = s2 / sw - *mean * *mean;
}

/* 1-D: random views (variances below the prior's), J = 1, 2, 3, 5, 8; the brute-force
 * product on a grid of 20001 points over +-12 sd of the fused answer. */
START_TEST(one_dimension_matches_product_of_densities)
{
    static const int Js[] = {1, 2, 3, 5, 8};
    enum { N = 20001 };
    double *g = malloc(N * sizeof *g), *lw = malloc(N * sizeof *lw);
    double mu[8], s2[8], fm, fv, gm, gv, m0, v0, lo, hi;
    vbm_error err;
    rng_t r;
    int a, j, i, trial;

    ck_assert(g != NULL && lw != NULL);
    rng_seed(&r, 4);
    for (trial = 0; trial < 4; trial++)
        for (a = 0; a < 5; a++) {
            int J = Js[a];

            m0 = rng_normal(&r);
            v0 = 2.0 + 4.0 * rng_uniform(&r);
            for (j = 0; j < J; j++) {
                mu[j] = 1.5 * rng_normal(&r);
                s2[j] = 0.2 + 1.5 * rng_uniform(&r);
            }
            ck_assert_int_eq(
                eng_fuse_codes(1, J, 1, mu, s2, NULL, m0, v0, "codes", 0, &fm, &fv, &err), VBM_OK);
            lo = fm - 12.0 * sqrt(fv);
            hi = fm + 12.0 * sqrt(fv);
            for (i = 0; i < N; i++) {
                g[i] = lo + (hi - lo) * i / (N - 1);
                lw[i] = -(J - 1) * lnorm(g[i], m0, v0);
                for (j = 0; j < J; j++)
                    lw[i] += lnorm(g[i], mu[j], s2[j]);
            }
            grid_moments(g, lw, N, &gm, &gv);
            ck_assert_msg(fabs(fm - gm) < 1e-7 * (1.0 + fabs(gm)),
                          "J %d: fused mean %.10g, product of densities %.10g", J, fm, gm);
            ck_assert_msg(fabs(fv - gv) < 1e-6 * gv, "J %d: fused variance %.10g, product %.10g", J,
                          fv, gv);
        }
    free(g);
    free(lw);
}
END_TEST

/* 2-D, J = 3, with and without a mask (view 1 does not know dimension 1): the product of
 * densities on a 401 x 401 grid; its means, variances and (zero) covariance. A masked
 * dimension's factor is flat: the view is left out of that dimension's product. */
START_TEST(two_dimensions_match_product_of_densities)
{
    enum { N = 401, J = 3, C = 2 };
    const double mu[J * C] = {0.3, -1.0, 1.1, 0.4, -0.5, 2.0};
    const double s2[J * C] = {0.5, 0.9, 1.2, 0.3, 0.7, 1.4};
    const unsigned char mask[J * C] = {1, 1, 1, 0, 1, 1};
    const double m0 = 0.2, v0 = 3.0;
    double fm[C], fv[C], m[C], v[C], cov, lo[C], hi[C], sw, w, mx, z[C];
    double *lw = malloc((size_t)N * N * sizeof *lw);
    vbm_error err;
    int masked, i, k, c, j;

    ck_assert(lw != NULL);
    for (masked = 0; masked < 2; masked++) {
        ck_assert_int_eq(
            eng_fuse_codes(1, J, C, mu, s2, masked ? mask : NULL, m0, v0, "codes", 0, fm, fv, &err),
            VBM_OK);
        for (c = 0; c < C; c++) {
            lo[c] = fm[c] - 10.0 * sqrt(fv[c]);
            hi[c] = fm[c] + 10.0 * sqrt(fv[c]);
        }
        mx = -INFINITY;
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++) {
                double l = 0.0;

                z[0] = lo[0] + (hi[0] - lo[0]) * i / (N - 1);
                z[1] = lo[1] + (hi[1] - lo[1]) * k / (N - 1);
                for (c = 0; c < C; c++) {
                    int n = 0;

                    for (j = 0; j < J; j++)
                        if (!masked || mask[j * C + c]) {
                            l += lnorm(z[c], mu[j * C + c], s2[j * C + c]);
                            n++;
                        }
                    l -= (n - 1) * lnorm(z[c], m0, v0);
                }
                lw[(size_t)i * N + k] = l;
                mx = l > mx ? l : mx;
            }
        sw = m[0] = m[1] = v[0] = v[1] = cov = 0.0;
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++) {
                z[0] = lo[0] + (hi[0] - lo[0]) * i / (N - 1);
                z[1] = lo[1] + (hi[1] - lo[1]) * k / (N - 1);
                w = exp(lw[(size_t)i * N + k] - mx);
                sw += w;
                m[0] += w * z[0];
                m[1] += w * z[1];
                v[0] += w * z[0] * z[0];
                v[1] += w * z[1] * z[1];
                cov += w * z[0] * z[1];
            }
        for (c = 0; c < C; c++) {
            m[c] /= sw;
            v[c] = v[c] / sw - m[c] * m[c];
            ck_assert_msg(fabs(fm[c] - m[c]) < 1e-6, "mask %d dim %d: mean %.9g vs %.9g", masked, c,
                          fm[c], m[c]);
            ck_assert_msg(fabs(fv[c] - v[c]) < 1e-5 * v[c], "mask %d dim %d: var %.9g vs %.9g",
                          masked, c, fv[c], v[c]);
        }
        cov = cov / sw - m[0] * m[1];
        ck_assert_msg(fabs(cov) < 1e-8, "covariance %g", cov);
    }
    free(lw);
}
END_TEST

/* J = 1 returns the encoder's code bit for bit (no round trip through natural
 * parameters); zero or absent variances are kept as zeros. */
START_TEST(one_view_is_the_code_itself)
{
    const double mu[6] = {0.1, 1.0 / 3.0, -7.25, 1e-300, 3.3e5, -0.0};
    const double s2[6] = {0.3, 1.0 / 7.0, 0.0, 2.5, 1e-9, 11.0};
    double om[6], ov[6];
    vbm_error err;

    ck_assert_int_eq(eng_fuse_codes(2, 1, 3, mu, s2, NULL, 0.0, 5.0, "codes", 0, om, ov, &err),
                     VBM_OK);
    ck_assert(memcmp(om, mu, sizeof mu) == 0);
    ck_assert(memcmp(ov, s2, sizeof s2) == 0);
    ck_assert_int_eq(eng_fuse_codes(2, 1, 3, mu, NULL, NULL, 0.0, 5.0, "codes", 0, om, ov, &err),
                     VBM_OK);
    ck_assert(memcmp(om, mu, sizeof mu) == 0);
    for (int i = 0; i < 6; i++)
        ck_assert(ov[i] == 0.0);
}
END_TEST

/* J identical views of variance s2 under a flat-ish prior: precision J/s2 - (J-1)/v0, the
 * same mean; a dimension no view knows gets the prior. */
START_TEST(identical_views_and_unknown_dimensions)
{
    const double mu[4] = {1.0, 2.0, 1.0, 2.0}, s2[4] = {0.5, 0.5, 0.5, 0.5};
    const unsigned char mask[4] = {1, 0, 1, 0};
    double om[2], ov[2];
    vbm_error err;

    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, s2, NULL, 0.0, 4.0, "codes", 0, om, ov, &err),
                     VBM_OK);
    ck_assert(fabs(ov[0] - 1.0 / (2.0 / 0.5 - 1.0 / 4.0)) < 1e-15);
    ck_assert(fabs(om[0] - (2.0 / 0.5) * ov[0]) < 1e-15);
    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, s2, mask, 0.5, 4.0, "codes", 0, om, ov, &err),
                     VBM_OK);
    ck_assert(fabs(om[1] - 0.5) < 1e-15 && fabs(ov[1] - 4.0) < 1e-15);
}
END_TEST

/* Bad input: each refusal is VBM_EINVAL with the field at fault. */
START_TEST(bad_views_are_refused_with_their_field)
{
    double mu[4] = {1.0, 2.0, 1.0, 2.0}, s2[4] = {0.5, 0.5, 0.5, 0.5}, om[2], ov[2];
    vbm_error err;

    ck_assert_int_eq(eng_fuse_codes(1, 0, 2, mu, s2, NULL, 0.0, 4.0, "codes", 0, om, ov, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "views_per_frame");
    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, s2, NULL, 0.0, 0.0, "codes", 0, om, ov, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "prior");
    mu[3] = NAN;
    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, s2, NULL, 0.0, 4.0, "codes", 0, om, ov, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.mu[1][1]");
    ck_assert_int_eq(
        eng_fuse_codes(1, 2, 2, mu, s2, NULL, 0.0, 4.0, "observations", 1, om, ov, &err),
        VBM_EINVAL);
    ck_assert_str_eq(err.field, "observations[1]");
    mu[3] = 2.0;
    s2[2] = 0.0; /* an exact view cannot be fused */
    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, s2, NULL, 0.0, 4.0, "codes", 0, om, ov, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.sigma2[1][0]");
    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, NULL, NULL, 0.0, 4.0, "codes", 0, om, ov, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.sigma2[0][0]");
    /* views wider than the prior: 2/10 - 1/4 < 0 */
    s2[0] = s2[1] = s2[2] = s2[3] = 10.0;
    ck_assert_int_eq(eng_fuse_codes(1, 2, 2, mu, s2, NULL, 0.0, 4.0, "codes", 0, om, ov, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.sigma2[0]");
    ck_assert_msg(strstr(err.msg, "precision") != NULL, "%s", err.msg);
}
END_TEST

/* The moment-matched prior of the memory kinds. */
START_TEST(prior_of_a_configuration)
{
    vbm_config cfg;
    double m, v;

    vbm_config_default(VBM_MIXTURE, 8, &cfg);
    cfg.rows = 6;
    cfg.u0 = 0.4;
    cfg.sigma2_b0 = 2.4;
    cfg.sigma_z2 = 1.2;
    eng_fuse_prior(&cfg, &m, &v);
    ck_assert(m == 0.0 && fabs(v - (6 * 0.4 + 2.4 + 1.2)) < 1e-12);
    cfg.kind = VBM_CATEGORICAL;
    cfg.shift = 0;
    eng_fuse_prior(&cfg, &m, &v);
    ck_assert(fabs(v - (0.4 + 1.2)) < 1e-12);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fuse");
    TCase *tc = tcase_create("fuse");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, one_dimension_matches_product_of_densities);
    tcase_add_test(tc, two_dimensions_match_product_of_densities);
    tcase_add_test(tc, one_view_is_the_code_itself);
    tcase_add_test(tc, identical_views_and_unknown_dimensions);
    tcase_add_test(tc, bad_views_are_refused_with_their_field);
    tcase_add_test(tc, prior_of_a_configuration);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
