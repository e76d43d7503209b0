/* test_parity.c -- libvbmem against the trainer: replays the VB writes of
 * tests/data/golden_vb.json (written by train/golden_vb.py from the PyTorch
 * loop the networks are trained with) and checks posteriors, addresses and
 * ELBO terms within 1e-6 relative. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vbmem/vbmem.h"

#ifndef PARITY_DATA
#define PARITY_DATA "tests/data/golden_vb.json"
#endif

static json_t *golden;

static double *arr(json_t *c, const char *key, size_t *n)
{
    json_t *a = json_object_get(c, key);
    ck_assert_msg(json_is_array(a), "golden field %s missing", key);
    size_t len = json_array_size(a);
    double *out = malloc(sizeof(double) * (len ? len : 1));
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < len; i++)
        out[i] = json_number_value(json_array_get(a, i));
    if (n)
        *n = len;
    return out;
}

static double maxabs(const double *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* |got - want| <= 1e-6 max(|want|, 1e-2 max|want|): relative, with a floor for
 * elements near zero scaled by the array's own magnitude. */
static void check_close(const char *cname, const char *what, const double *got, const double *want,
                        size_t n)
{
    double floor_ = 1e-2 * maxabs(want, n);
    if (floor_ == 0.0)
        floor_ = 1e-12;
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-6 * fmax(fabs(want[i]), floor_);
        ck_assert_msg(fabs(got[i] - want[i]) <= tol,
                      "%s: %s[%zu] = %.12g, trainer %.12g (|diff| %.3g > %.3g)", cname, what, i,
                      got[i], want[i], fabs(got[i] - want[i]), tol);
    }
}

static void run_case(json_t *c, vbm_solver solver)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *kind = json_string_value(json_object_get(c, "kind"));
    int T = (int)json_integer_value(json_object_get(c, "T"));
    int C = (int)json_integer_value(json_object_get(c, "C"));
    int K = (int)json_integer_value(json_object_get(c, "K"));
    int H = (int)json_integer_value(json_object_get(c, "H"));
    int G = json_is_integer(json_object_get(c, "G"))
                ? (int)json_integer_value(json_object_get(c, "G"))
                : 1;
    vbm_kind k;
    vbm_error err;
    ck_assert_int_eq(vbm_kind_parse(kind, &k, &err), VBM_OK);
    vbm_config cfg;
    vbm_config_default(k, C, &cfg);
    cfg.rows = K;
    cfg.clusters = H;
    cfg.groups = G;
    cfg.shift = (int)json_integer_value(json_object_get(c, "shift"));
    cfg.sigma_z2 = json_number_value(json_object_get(c, "sigma_z2"));
    cfg.u0 = json_number_value(json_object_get(c, "u0"));
    cfg.sigma2_b0 = json_number_value(json_object_get(c, "sigma2_b0"));
    cfg.s_floor = json_number_value(json_object_get(c, "s_floor"));
    vbm_memory *mem = NULL;
    ck_assert_msg(vbm_memory_create(&cfg, NULL, NULL, &mem, &err) == VBM_OK, "%s: %s", name,
                  err.msg);

    json_t *start = json_object_get(c, "start"), *expect = json_object_get(c, "expect");
    size_t nR, nU, nb, ns;
    double *R = arr(start, "R", &nR), *U = arr(start, "U", &nU), *mb = arr(start, "mu_b", &nb),
           *s2b = arr(start, "s2_b", &ns);
    ck_assert_uint_eq(nR, (size_t)H * K * C); /* G groups of width C / G */
    ck_assert_uint_eq(nU, (size_t)G * H * K * K);
    memcpy(mem->R, R, sizeof(double) * nR);
    memcpy(mem->U, U, sizeof(double) * nU);
    if (cfg.shift) {
        memcpy(mem->mu_b, mb, sizeof(double) * nb);
        memcpy(mem->s2_b, s2b, sizeof(double) * ns);
    }
    double *mu = arr(c, "codes_mu", NULL);
    double *s2 = json_is_array(json_object_get(c, "codes_s2")) ? arr(c, "codes_s2", NULL) : NULL;
    vbm_codes codes = {T, C, mu, s2};
    vbm_write_opts opts;
    vbm_write_opts_default(&opts);
    opts.max_iter = (int)json_integer_value(json_object_get(c, "iterations"));
    opts.tol = 0.0;
    opts.init = VBM_INIT_CURRENT;
    opts.want_addresses = 1;
    opts.solver = solver;
    vbm_write_result res;
    ck_assert_msg(vbm_write(mem, &codes, &opts, &res, &err) == VBM_OK, "%s: %s", name, err.msg);

    double *eR = arr(expect, "R", NULL), *eU = arr(expect, "U", NULL);
    check_close(name, "R", mem->R, eR, nR);
    check_close(name, "U", mem->U, eU, nU);
    if (cfg.shift) {
        double *eb = arr(expect, "mu_b", NULL), *es = arr(expect, "s2_b", NULL);
        check_close(name, "mu_b", mem->mu_b, eb, nb);
        check_close(name, "s2_b", mem->s2_b, es, ns);
        free(eb);
        free(es);
    }
    size_t nsx, nw;
    double *es = arr(expect, "s", &nsx), *ew = arr(expect, "w_mu", &nw);
    ck_assert_uint_eq(nsx, (size_t)T * res.addr.G * res.addr.H);
    check_close(name, "q(s)", res.addr.s, es, nsx);
    ck_assert_uint_eq(nw, (size_t)T * res.addr.G * res.addr.H * res.addr.K);
    check_close(name, "q(w) means", res.addr.w_mu, ew, nw);
    const char *terms[] = {"loglik_codes", "kl_w", "kl_s", "kl_M", "kl_b"};
    double got[] = {res.elbo.loglik_codes, res.elbo.kl_w, res.elbo.kl_s, res.elbo.kl_M,
                    res.elbo.kl_b};
    for (int i = 0; i < 5; i++) {
        double want = json_number_value(json_object_get(expect, terms[i]));
        double tol = 1e-6 * fmax(fabs(want), 1e-3);
        ck_assert_msg(fabs(got[i] - want) <= tol, "%s: ELBO term %s = %.12g, trainer %.12g", name,
                      terms[i], got[i], want);
    }
    free(es);
    free(ew);
    free(eR);
    free(eU);
    free(R);
    free(U);
    free(mb);
    free(s2b);
    free(mu);
    free(s2);
    vbm_write_result_free(&res);
    vbm_memory_free(mem);
}

START_TEST(test_golden_vb)
{
    json_t *cases = json_object_get(golden, "cases");
    ck_assert_msg(json_array_size(cases) >= 5, "golden file holds %zu cases",
                  json_array_size(cases));
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        run_case(c, VBM_SOLVER_DIRECT);
        run_case(c, VBM_SOLVER_GRAM);
    }
}
END_TEST

int main(void)
{
    json_error_t jerr;
    golden = json_load_file(PARITY_DATA, 0, &jerr);
    if (!golden) {
        fprintf(stderr, "cannot read %s: %s (regenerate with train/golden_vb.py)\n", PARITY_DATA,
                jerr.text);
        return 1;
    }
    Suite *s = suite_create("parity");
    TCase *tc = tcase_create("vb");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_golden_vb);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    json_decref(golden);
    return failed ? 1 : 0;
}
