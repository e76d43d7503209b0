/* input.c -- Check tests of libvbmem (test-models, tests/test_models.c): bad input: an error code
 * and a message, never a crash; zero code variances. */
#include "common.h"

/* ---- bad input: an error code and a message, never a crash ---- */

START_TEST(bad_input_rejected)
{
    vbm_memory *m = make(VBM_MIXTURE, 4, 2, 3, 1);
    double mu[8] = {1, 2, 3, 4, 5, 6, 7, 8}, s2[8] = {0};
    vbm_codes codes = {2, 4, mu, s2};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    vbm_write_result r;
    vbm_error err;
    /* H = 3 > T = 2 for k-means++ */
    ck_assert(vbm_write(m, &codes, &o, &r, &err) == VBM_EINVAL);
    ck_assert(strstr(err.msg, "k-means++") != NULL);
    ck_assert(isnan(m->last_elbo)); /* memory unchanged */
    codes.T = 0;
    ck_assert(vbm_write(m, &codes, &o, &r, &err) == VBM_EINVAL);
    codes.T = 2;
    mu[5] = NAN;
    ck_assert(vbm_write(m, &codes, &o, &r, &err) == VBM_EINVAL);
    ck_assert(strstr(err.msg, "codes.mu[1][1]") != NULL);
    mu[5] = INFINITY;
    ck_assert(vbm_write(m, &codes, &o, &r, &err) == VBM_EINVAL);
    mu[5] = 6;
    s2[2] = -0.1;
    ck_assert(vbm_write(m, &codes, &o, &r, &err) == VBM_EINVAL);
    ck_assert(strstr(err.msg, "sigma2[0][2]") != NULL);
    s2[2] = 0.0;
    codes.C = 5;
    ck_assert(vbm_write(m, &codes, &o, &r, &err) == VBM_EINVAL);
    ck_assert(vbm_sample(m, 0, 1, -1, mu, NULL, &err) == VBM_EINVAL);
    ck_assert(vbm_sample(m, 1, 1, 3, mu, NULL, &err) == VBM_EINVAL);
    vbm_memory_free(m);
    /* configurations */
    vbm_config cfg;
    vbm_memory *x = NULL;
    vbm_config_default(VBM_GAUSSIAN, 10, &cfg);
    cfg.rows = 1000000;
    ck_assert(vbm_memory_create(&cfg, NULL, NULL, &x, &err) == VBM_EINVAL);
    vbm_config_default(VBM_MIXTURE, 65536, &cfg);
    cfg.clusters = 65536;
    cfg.rows = 4096;
    ck_assert(vbm_memory_create(&cfg, NULL, NULL, &x, &err) == VBM_ENOMEM);
    vbm_config_default(VBM_TREE, 10, &cfg);
    cfg.groups = 3;
    ck_assert(vbm_memory_create(&cfg, NULL, NULL, &x, &err) == VBM_EINVAL);
    vbm_config_default(VBM_GAUSSIAN, 10, &cfg);
    cfg.sigma_z2 = -1;
    ck_assert(vbm_memory_create(&cfg, NULL, NULL, &x, &err) == VBM_EINVAL);
    cfg.sigma_z2 = NAN;
    ck_assert(vbm_memory_create(&cfg, NULL, NULL, &x, &err) == VBM_EINVAL);
    vbm_config_default(VBM_GAUSSIAN, 2, &cfg);
    cfg.rows = 2;
    double badU[4] = {1, 2, 2, 1}; /* symmetric, indefinite */
    ck_assert(vbm_memory_create(&cfg, NULL, badU, &x, &err) == VBM_EINVAL);
    /* K-proportional defaults of the mixture follow K (0.2 K, 0.4 K: the paper author's code) */
    vbm_config_default(VBM_MIXTURE, 10, &cfg);
    ck_assert(fabs(cfg.sigma_z2 - 1.2) < 1e-15 && fabs(cfg.sigma2_b0 - 2.4) < 1e-15);
    vbm_config_set_rows(&cfg, 3);
    ck_assert(cfg.rows == 3 && fabs(cfg.sigma_z2 - 0.6) < 1e-15
              && fabs(cfg.sigma2_b0 - 1.2) < 1e-15);
    vbm_kind k;
    ck_assert(vbm_kind_parse("kanerva", &k, &err) == VBM_EINVAL);
    ck_assert(vbm_kind_parse("tree", &k, &err) == VBM_OK && k == VBM_TREE);
}
END_TEST

START_TEST(zero_variance_uses_loglik)
{
    /* with exact codes the codes term is the expected log-likelihood; a tiny
     * variance adds its (very negative) entropy, so the two differ by that */
    vbm_memory *m = make(VBM_GAUSSIAN, 3, 2, 1, 1);
    double mu[6] = {1, 0, -1, 2, 1, 0}, s2[6] = {0, 0, 0, 0, 0, 0};
    vbm_codes a = {2, 3, mu, NULL}, b = {2, 3, mu, s2};
    vbm_elbo e1, e2;
    vbm_error err;
    ck_assert(vbm_elbo_eval(m, &a, &e1, NULL, &err) == VBM_OK);
    ck_assert(vbm_elbo_eval(m, &b, &e2, NULL, &err) == VBM_OK);
    ck_assert(e1.total == e2.total);
    s2[0] = 1.0;
    ck_assert(vbm_elbo_eval(m, &b, &e2, NULL, &err) == VBM_OK);
    /* adding variance 1 to one dim: -1/(2 s2) from the expected error, +0.5 log(2 pi e) entropy */
    ck_assert(fabs((e2.total - e1.total) - (-0.5 + 0.5 * (log(2 * VBM_PI) + 1))) < 1e-12);
    vbm_memory_free(m);
}
END_TEST

TCase *models_input_tcase(void)
{
    TCase *tc = tcase_create("input");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, bad_input_rejected);
    tcase_add_test(tc, zero_variance_uses_loglik);
    return tc;
}
