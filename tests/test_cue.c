/* test_cue.c -- Check tests of engine/cue.c: the cue's likelihood, its noise estimate and the cue
 * combined with a prediction, each against an independent computation (direct sums, numerical
 * integration, synthetic noise of a known level). */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "engine/cue.h"
#include "numerics/rng.h"

#define P 6

/* The normal density. */
static double npdf(double x, double m, double v)
{
    return exp(-0.5 * (x - m) * (x - m) / v) / sqrt(2.0 * 3.14159265358979323846 * v);
}

START_TEST(combine_keeps_known_values_without_noise)
{
    double x[P] = {0.1, 0.5, 0.9, 0.0, 1.0, 0.3}, mean[P] = {0.2, 0.2, 0.2, 0.7, 0.7, 0.7};
    double sd[P] = {0.1, 0.2, 0.3, 0.1, 0.2, 0.3}, out[P];
    unsigned char mask[P] = {1, 0, 1, 1, 0, 1};
    eng_cue c = {1, P, x, mask, 1};
    eng_cue_pred pr = {mean, sd, 0.0};
    int p;

    eng_cue_combine(&c, 0, &pr, 0.0, out);
    for (p = 0; p < P; p++)
        ck_assert_double_eq(out[p], mask[p] ? x[p] : mean[p]);
}
END_TEST

START_TEST(combine_is_the_posterior_mean)
{
    /* known interior values: the Gaussian posterior mean; values on a bound: the mean of the
     * truncated posterior, here by numerical integration over the clean value */
    double x[3] = {0.4, 0.0, 1.0}, mean[3] = {0.6, 0.15, 0.8}, sd[3] = {0.2, 0.1, 0.15}, out[3];
    double sigma = 0.3, v, num, den, u, w, h = 1e-4;
    eng_cue c = {1, 3, x, NULL, 1};
    eng_cue_pred pr = {mean, sd, 0.0};

    eng_cue_combine(&c, 0, &pr, sigma, out);
    v = sd[0] * sd[0] + sigma * sigma;
    ck_assert_double_eq_tol(out[0], (x[0] * sd[0] * sd[0] + mean[0] * sigma * sigma) / v, 1e-12);
    for (int k = 1; k < 3; k++) {
        num = den = 0.0;
        for (u = mean[k] - 10 * sd[k]; u <= mean[k] + 10 * sd[k]; u += h) {
            /* p(clean u) P(u + noise on the bound's side) */
            double side = k == 1 ? 0.5 * erfc(u / (sigma * sqrt(2.0)))
                                 : 0.5 * erfc((1.0 - u) / (sigma * sqrt(2.0)));
            w = npdf(u, mean[k], sd[k] * sd[k]) * side;
            num += u * w;
            den += w;
        }
        ck_assert_double_eq_tol(out[k], fmin(1.0, fmax(0.0, num / den)), 1e-6);
    }
}
END_TEST

START_TEST(loglik_is_the_sum_of_the_known_terms)
{
    double x[4] = {0.3, 0.0, 1.0, 0.6}, mean[4] = {0.5, 0.2, 0.9, 0.1},
           sd[4] = {0.1, 0.2, 0.1, 0.3};
    unsigned char mask[4] = {1, 1, 1, 0};
    double sigma = 0.25, want = 0.0, v;
    eng_cue c = {1, 4, x, mask, 1};
    eng_cue_pred pr = {mean, sd, 0.0};

    v = sd[0] * sd[0] + sigma * sigma;
    want += log(npdf(x[0], mean[0], v)) + 0.5 * log(2.0 * 3.14159265358979323846);
    v = sd[1] * sd[1] + sigma * sigma; /* P(clean + noise <= 0) */
    want += log(0.5 * erfc(mean[1] / sqrt(2.0 * v)));
    v = sd[2] * sd[2] + sigma * sigma; /* P(clean + noise >= 1) */
    want += log(0.5 * erfc((1.0 - mean[2]) / sqrt(2.0 * v)));
    ck_assert_double_eq_tol(eng_cue_loglik(&c, 0, &pr, sigma), want, 1e-10);
    /* unbounded values: densities only, and the constant sd */
    c.bounded = 0;
    pr.sd = NULL;
    pr.sd_const = 0.5;
    want = 0.0;
    for (int p = 0; p < 3; p++)
        want += log(npdf(x[p], mean[p], 0.25 + sigma * sigma))
                + 0.5 * log(2.0 * 3.14159265358979323846);
    ck_assert_double_eq_tol(eng_cue_loglik(&c, 0, &pr, sigma), want, 1e-10);
}
END_TEST

START_TEST(noise_estimate_finds_a_known_level)
{
    enum { N = 4000 };
    double *x = malloc(N * sizeof *x), *mean = malloc(N * sizeof *mean),
           *sd = malloc(N * sizeof *sd);
    double levels[3] = {0.0, 0.2, 0.35}, est;
    rng_t r;
    eng_cue c = {1, N, x, NULL, 1};
    eng_cue_pred pr = {mean, sd, 0.0};

    for (int l = 0; l < 3; l++) {
        rng_seed(&r, 11 + (uint64_t)l);
        for (int p = 0; p < N; p++) {
            mean[p] = p % 3 == 0 ? 0.0 : rng_uniform(&r); /* a third on the bound, as background */
            sd[p] = 0.05;
            /* a clean value from the prediction, then the cue's noise, clipped */
            double clean = mean[p] + sd[p] * rng_normal(&r);
            x[p] = fmin(1.0, fmax(0.0, clean + levels[l] * rng_normal(&r)));
        }
        c.bounded = 1;
        est = eng_cue_noise_estimate(&c, 0, &pr);
        ck_assert_msg(fabs(est - levels[l]) <= 0.0251, "bounded: level %g estimated %g", levels[l],
                      est);
        /* unbounded: the same without clipping, by the Gaussian maximum */
        rng_seed(&r, 11 + (uint64_t)l);
        for (int p = 0; p < N; p++) {
            double clean = mean[p] + sd[p] * rng_normal(&r);
            x[p] = clean + levels[l] * rng_normal(&r);
        }
        c.bounded = 0;
        est = eng_cue_noise_estimate(&c, 0, &pr);
        ck_assert_msg(fabs(est - levels[l]) <= 0.02, "unbounded: level %g estimated %g", levels[l],
                      est);
    }
    free(x);
    free(mean);
    free(sd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cue");
    TCase *tc = tcase_create("cue");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, combine_keeps_known_values_without_noise);
    tcase_add_test(tc, combine_is_the_posterior_mean);
    tcase_add_test(tc, loglik_is_the_sum_of_the_known_terms);
    tcase_add_test(tc, noise_estimate_finds_a_known_level);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
