/* test_predictive.c -- Check tests of the memory's predictive distribution (vbm_predictive_logpdf,
 * vbm_predictive_complete) against dense Gaussians built here from the posterior's moments, and of
 * the recall read of a masked code cue that completes it from the memory. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/recall.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

#define MAXC   12
#define TWO_PI 6.283185307179586476925

/* log N(x; m, S) over the n indices idx, S a dense C x C covariance, by a Cholesky
 * factorisation written here (no library call). */
static double dense_logpdf(int C, const double *S, const double *m, const double *x, const int *idx,
                           int n)
{
    double L[MAXC * MAXC] = {0}, y[MAXC], ld = 0.0, q = 0.0;

    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = S[idx[i] * C + idx[j]];

            for (int k = 0; k < j; k++)
                s -= L[i * MAXC + k] * L[j * MAXC + k];
            if (i == j)
                L[i * MAXC + i] = sqrt(s);
            else
                L[i * MAXC + j] = s / L[j * MAXC + j];
        }
    for (int i = 0; i < n; i++) {
        double s = x[idx[i]] - m[idx[i]];

        for (int k = 0; k < i; k++)
            s -= L[i * MAXC + k] * y[k];
        y[i] = s / L[i * MAXC + i];
        q += y[i] * y[i];
        ld += 2.0 * log(L[i * MAXC + i]);
    }
    return -0.5 * (q + ld + n * log(TWO_PI));
}

/* The dense predictive covariance of block gh of a mixture memory: R^T R + (tr U + s2_b +
 * sigma_z^2) I. */
static void dense_cov(const vbm_memory *mem, int gh, double *S)
{
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    const double *R = mem->R + (size_t)gh * K * C, *U = mem->U + (size_t)gh * K * K;
    double c = mem->cfg.sigma_z2 + (mem->cfg.shift ? mem->s2_b[gh] : 0.0);

    for (int k = 0; k < K; k++)
        c += U[k * K + k];
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double s = i == j ? c : 0.0;

            for (int k = 0; k < K; k++)
                s += R[k * C + i] * R[k * C + j];
            S[i * C + j] = s;
        }
}

/* A mixture memory of H clusters over codes of size C written on codes drawn from 3
 * clusters (so that its posterior is far from the prior). */
static vbm_memory *written_mixture(int C, int H, int K, uint64_t seed, double *codes, long T)
{
    vbm_config cfg;
    vbm_memory *mem = NULL;
    vbm_write_opts wo;
    vbm_write_result res;
    vbm_codes vc = {T, C, codes, NULL};
    rng_t r;

    rng_seed(&r, seed);
    for (long t = 0; t < T; t++) {
        int h = (int)rng_below(&r, 3);
        double v = rng_normal(&r);

        for (int c = 0; c < C; c++)
            codes[t * C + c] = 3.0 * (h - 1) + (c % 3 == h ? v : 0.2 * v) + 0.3 * rng_normal(&r);
    }
    vbm_config_default(VBM_MIXTURE, C, &cfg);
    cfg.clusters = H;
    vbm_config_set_rows(&cfg, K);
    cfg.sigma_z2 = 0.2;
    ck_assert_int_eq(vbm_memory_create(&cfg, NULL, NULL, &mem, NULL), VBM_OK);
    vbm_write_opts_default(&wo);
    wo.max_iter = 20;
    wo.seed = seed + 1;
    ck_assert_int_eq(vbm_write(mem, &vc, &wo, &res, NULL), VBM_OK);
    vbm_write_result_free(&res);
    return mem;
}

/* log sum_h exp(lp[h]) */
static double lse(const double *lp, int n)
{
    double mx = lp[0], s = 0.0;

    for (int i = 1; i < n; i++)
        mx = lp[i] > mx ? lp[i] : mx;
    for (int i = 0; i < n; i++)
        s += exp(lp[i] - mx);
    return mx + log(s);
}

START_TEST(logpdf_matches_dense_mixture)
{
    int C = 7, H = 4, K = 2;
    long T = 60;
    double *codes = malloc(sizeof(double) * T * C), S[MAXC * MAXC], lp[8], out[5];
    double q[5 * 7];
    unsigned char mask[5 * 7];
    vbm_memory *mem = written_mixture(C, H, K, 11, codes, T);
    rng_t r;

    rng_seed(&r, 5);
    for (int i = 0; i < 5 * C; i++) {
        q[i] = 3.0 * rng_normal(&r);
        mask[i] = (unsigned char)(rng_below(&r, 3) != 0);
    }
    mask[0 * C + 0] = 1;                /* every frame knows something */
    memset(mask + 4 * C, 0, (size_t)C); /* frame 4 knows nothing: log density 0 */
    for (int masked = 0; masked < 2; masked++) {
        vbm_codes vc = {5, C, q, NULL};

        ck_assert_int_eq(vbm_predictive_logpdf(mem, &vc, masked ? mask : NULL, out, NULL), VBM_OK);
        for (int t = 0; t < 5; t++) {
            int idx[MAXC], n = 0;

            for (int c = 0; c < C; c++)
                if (!masked || mask[t * C + c])
                    idx[n++] = c;
            for (int h = 0; h < H; h++) {
                dense_cov(mem, h, S);
                lp[h] = dense_logpdf(C, S, mem->mu_b + (size_t)h * C, q + t * C, idx, n) - log(H);
            }
            double want = n > 0 ? lse(lp, H) : 0.0;

            ck_assert_msg(fabs(out[t] - want) <= 1e-9 * (1.0 + fabs(want)),
                          "frame %d (masked %d): %.12g, dense %.12g", t, masked, out[t], want);
        }
    }
    vbm_memory_free(mem);
    free(codes);
}
END_TEST

START_TEST(complete_matches_dense_conditional)
{
    int C = 6, H = 3, K = 2;
    long T = 60;
    double *codes = malloc(sizeof(double) * T * C), S[MAXC * MAXC], out[6];
    vbm_memory *mem = written_mixture(C, H, K, 21, codes, T);
    unsigned char mask[6] = {1, 0, 1, 0, 0, 1};
    int kn[3] = {0, 2, 5}, un[3] = {1, 3, 4};
    double q[6];
    vbm_codes vc = {1, C, q, NULL};

    for (int trial = 0; trial < 6; trial++) {
        int best = 0;
        double bl = -HUGE_VAL;

        memcpy(q, codes + (size_t)(trial * 7) * C, sizeof q);
        for (int i = 0; i < 3; i++)
            q[un[i]] = 100.0; /* the unknown values must not matter */
        ck_assert_int_eq(vbm_predictive_complete(mem, &vc, mask, out, NULL), VBM_OK);
        for (int h = 0; h < H; h++) {
            dense_cov(mem, h, S);
            double l = dense_logpdf(C, S, mem->mu_b + (size_t)h * C, q, kn, 3);

            if (l > bl) {
                bl = l;
                best = h;
            }
        }
        /* the conditional mean mu_u + S_uk S_kk^{-1} (x_k - mu_k) of the best cluster, by
         * Gauss-Jordan on the 3 x 3 S_kk */
        dense_cov(mem, best, S);
        const double *m = mem->mu_b + (size_t)best * C;
        double A[3][4];

        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 3; j++)
                A[i][j] = S[kn[i] * C + kn[j]];
            A[i][3] = q[kn[i]] - m[kn[i]];
        }
        for (int p = 0; p < 3; p++)
            for (int i = 0; i < 3; i++) {
                if (i == p)
                    continue;
                double f = A[i][p] / A[p][p];

                for (int j = 0; j < 4; j++)
                    A[i][j] -= f * A[p][j];
            }
        for (int i = 0; i < 3; i++)
            ck_assert(out[kn[i]] == q[kn[i]]); /* known values unchanged */
        for (int u = 0; u < 3; u++) {
            double want = m[un[u]];

            for (int i = 0; i < 3; i++)
                want += S[un[u] * C + kn[i]] * A[i][3] / A[i][i];
            ck_assert_msg(fabs(out[un[u]] - want) <= 1e-9 * (1.0 + fabs(want)),
                          "trial %d dim %d: %.12g, dense %.12g", trial, un[u], out[un[u]], want);
        }
    }
    vbm_memory_free(mem);
    free(codes);
}
END_TEST

/* The predictive of an empty memory is its prior's: N(0, (K u0 + sigma2_b0 + sigma_z^2) I)
 * per cluster, for the categorical model row k's N(0, (u0 + sigma_z^2) I). */
START_TEST(empty_memory_is_the_prior_predictive)
{
    for (int kind = 0; kind < 2; kind++) {
        vbm_config cfg;
        vbm_memory *mem = NULL;
        double z[4] = {0.5, -1.0, 2.0, 0.1}, out, v;
        vbm_codes vc = {1, 4, z, NULL};

        vbm_config_default(kind == 0 ? VBM_MIXTURE : VBM_CATEGORICAL, 4, &cfg);
        if (kind == 0) {
            cfg.clusters = 3;
            vbm_config_set_rows(&cfg, 2);
        } else {
            cfg.rows = 3;
        }
        ck_assert_int_eq(vbm_memory_create(&cfg, NULL, NULL, &mem, NULL), VBM_OK);
        ck_assert_int_eq(vbm_predictive_logpdf(mem, &vc, NULL, &out, NULL), VBM_OK);
        v = kind == 0 ? 2 * cfg.u0 + cfg.sigma2_b0 + cfg.sigma_z2 : cfg.u0 + cfg.sigma_z2;
        double q = 0.25 + 1.0 + 4.0 + 0.01;
        double want = -0.5 * (q / v + 4 * log(v) + 4 * log(TWO_PI));

        ck_assert_msg(fabs(out - want) < 1e-10, "kind %d: %.12g, want %.12g", kind, out, want);
        vbm_memory_free(mem);
    }
}
END_TEST

START_TEST(bad_codes_are_refused)
{
    vbm_config cfg;
    vbm_memory *mem = NULL;
    double z[4] = {0.5, NAN, 2.0, 0.1}, out;
    vbm_codes vc = {1, 4, z, NULL}, wrong = {1, 3, z, NULL};
    vbm_error err;

    vbm_config_default(VBM_MIXTURE, 4, &cfg);
    ck_assert_int_eq(vbm_memory_create(&cfg, NULL, NULL, &mem, NULL), VBM_OK);
    ck_assert_int_eq(vbm_predictive_logpdf(mem, &vc, NULL, &out, &err), VBM_EINVAL);
    ck_assert_int_eq(vbm_predictive_complete(mem, &wrong, NULL, z, &err), VBM_EINVAL);
    ck_assert_int_eq(vbm_predictive_logpdf(mem, &vc, NULL, NULL, &err), VBM_EINVAL);
    vbm_memory_free(mem);
}
END_TEST

/* A latent session's masked read in recall mode fills the unknown dimensions from the
 * memory: codes written near (3, 3, 3, 3) and (-3, -3, -3, -3); the query (3, 3, 0, 0) with
 * mask (1, 1, 0, 0) must come back with its last two dimensions near 3, not 0. */
START_TEST(latent_masked_recall_completes_from_memory)
{
    long T = 40;
    double *codes = malloc(sizeof(double) * T * 4), q[4] = {3, 3, 0, 0};
    unsigned char mask[4] = {1, 1, 0, 0};
    vbm_config cfg;
    vbm_memory *mem = NULL;
    vbm_write_opts wo;
    vbm_write_result res;
    vbm_codes vc = {T, 4, codes, NULL}, qc = {1, 4, q, NULL};
    eng_recall_query rq;
    eng_recall_opts ro;
    eng_recall_out out;
    rng_t r;

    rng_seed(&r, 3);
    for (long t = 0; t < T; t++) {
        double s = t % 2 ? 3.0 : -3.0;

        for (int c = 0; c < 4; c++)
            codes[t * 4 + c] = s + 0.3 * rng_normal(&r);
    }
    vbm_config_default(VBM_MIXTURE, 4, &cfg);
    cfg.clusters = 2;
    vbm_config_set_rows(&cfg, 2);
    ck_assert_int_eq(vbm_memory_create(&cfg, NULL, NULL, &mem, NULL), VBM_OK);
    vbm_write_opts_default(&wo);
    wo.seed = 1;
    ck_assert_int_eq(vbm_write(mem, &vc, &wo, &res, NULL), VBM_OK);
    vbm_write_result_free(&res);
    memset(&rq, 0, sizeof rq);
    memset(&ro, 0, sizeof ro);
    rq.codes = &qc;
    rq.T = 1;
    ro.steps = 3;
    ro.seed = 9;
    ro.mode = ENG_READ_RECALL;
    ro.candidates = 4;
    ro.cue_noise = 0.0;
    ro.mask = mask;
    ck_assert_int_eq(eng_recall_run(mem, NULL, &rq, &ro, &out, NULL), VBM_OK);
    const double *a = out.z + (size_t)(ro.steps - 1) * 4;

    ck_assert_msg(a[0] == 3.0 && a[1] == 3.0, "known values changed: %g %g", a[0], a[1]);
    ck_assert_msg(a[2] > 2.0 && a[3] > 2.0, "unknown values not completed: %g %g", a[2], a[3]);
    ck_assert(out.familiarity != NULL && out.familiarity[0] <= 0.0);
    ck_assert(out.stopped_at >= 0 && out.stopped_at < ro.steps);
    eng_recall_out_free(&out);
    vbm_memory_free(mem);
    free(codes);
}
END_TEST

/* Familiarity: a written code is more familiar than a code far from every cluster. */
START_TEST(written_codes_are_familiar)
{
    long T = 40;
    double *codes = malloc(sizeof(double) * T * 6), q[12];
    vbm_memory *mem = written_mixture(6, 3, 2, 31, codes, T);
    vbm_codes qc = {2, 6, q, NULL};
    eng_recall_query rq;
    eng_recall_opts ro;
    eng_recall_out out;

    memcpy(q, codes, sizeof(double) * 6);
    for (int c = 0; c < 6; c++)
        q[6 + c] = c % 2 ? 6.0 : -6.0;
    memset(&rq, 0, sizeof rq);
    memset(&ro, 0, sizeof ro);
    rq.codes = &qc;
    rq.T = 2;
    ro.steps = 1;
    ro.mode = ENG_READ_MEAN;
    ck_assert_int_eq(eng_recall_run(mem, NULL, &rq, &ro, &out, NULL), VBM_OK);
    ck_assert_msg(out.familiarity[0] > out.familiarity[1] + 1.0, "written %g, far %g",
                  out.familiarity[0], out.familiarity[1]);
    eng_recall_out_free(&out);
    vbm_memory_free(mem);
    free(codes);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("predictive");
    TCase *tc = tcase_create("predictive");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, logpdf_matches_dense_mixture);
    tcase_add_test(tc, complete_matches_dense_conditional);
    tcase_add_test(tc, empty_memory_is_the_prior_predictive);
    tcase_add_test(tc, bad_codes_are_refused);
    tcase_add_test(tc, latent_masked_recall_completes_from_memory);
    tcase_add_test(tc, written_codes_are_familiar);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
