/* test_online.c -- Check tests of online writes (vbm_append) against online Bayes: an episode
 * written as N appends gives the conjugate posterior of M (and b, and every mixture cluster's
 * M_h, b_h) that the prior plus the recorded addresses' statistics give, computed here from
 * the theorems' formulas without the library; the DKM writer's N appends equal one write. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/rng.h"
#include "test_codes.h"
#include "vbmem/vbmem.h"

#define MAX_PIECES 8

/* The shared helpers, with frames in clusters drawn uniformly. */
static double *clustered_codes(long T, int C, int Hc, uint64_t seed)
{
    return tc_clustered_codes(T, C, Hc, seed, 0);
}

/* What one append recorded: its codes, the addresses it returned, and the memory's q(M)
 * means R and q(b) means mu_b right after it (the values the piece's last updates of q(b)
 * and q(M) used, at the fit's fixed point). */
typedef struct {
    vbm_codes codes;
    vbm_addresses addr;
    double *R;    /* [H][K x C] */
    double *mu_b; /* [H][C] */
} piece_rec;

/* The posterior of every cluster h implied by the base prior R0 = 0, U0 = u0 I, mu_b0 = 0,
 * Sigma_b0 = s2b0 I and the statistics of the n recorded pieces (Theorem 1 Eq. 178-179;
 * Theorem 3 Eq. 170-171; Theorem 4 Eq. 198-199, 206-207; H = 1, q(s) = 1 for the gaussian),
 * accumulated in natural parameters, the precision and precision-times-mean:
 *   U_h^{-1} = U0^{-1} + sum_pieces sum_t q(s_t=h) (w_th w_th^T + Sigma_w,h) / s2
 *   U_h^{-1} R_h = U0^{-1} R0 + sum_pieces sum_t q(s_t=h) w_th (z_t - mu_bh[piece])^T / s2
 *   1/s2_bh = 1/s2b0 + sum_pieces sum_t q(s_t=h) / s2
 *   mu_bh/s2_bh = mu_b0/s2b0 + sum_pieces sum_t q(s_t=h) (z_t - R_h[piece]^T w_th) / s2
 * Writes R [H][K x C], U [H][K x K], mu_b [H][C], s2_b [H]. */
static void reference_posterior(const piece_rec *p, int n, int H, int K, int C, double u0,
                                double s2b0, double s2, int shift, double *R, double *U,
                                double *mu_b, double *s2_b)
{
    double *Q = malloc(sizeof(double) * K * K), *B = malloc(sizeof(double) * K * C);
    double *nb = malloc(sizeof(double) * C);
    for (int h = 0; h < H; h++) {
        double prec_b = 1.0 / s2b0;
        for (int i = 0; i < K * K; i++)
            Q[i] = (i / K == i % K) ? 1.0 / u0 : 0.0;
        memset(B, 0, sizeof(double) * K * C);
        memset(nb, 0, sizeof(double) * C);
        for (int j = 0; j < n; j++) {
            const vbm_addresses *a = &p[j].addr;
            const double *Sw = a->w_cov + (size_t)h * K * K, *Rj = p[j].R + (size_t)h * K * C,
                         *bj = p[j].mu_b + (size_t)h * C;
            for (long t = 0; t < a->T; t++) {
                double th = a->s[t * H + h];
                const double *w = a->w_mu + ((size_t)t * H + h) * K,
                             *z = p[j].codes.mu + (size_t)t * C;
                for (int k = 0; k < K; k++)
                    for (int l = 0; l < K; l++)
                        Q[k * K + l] += th * (w[k] * w[l] + Sw[k * K + l]) / s2;
                for (int k = 0; k < K; k++)
                    for (int c = 0; c < C; c++)
                        B[k * C + c] += th * w[k] * (z[c] - (shift ? bj[c] : 0.0)) / s2;
                prec_b += th / s2;
                for (int c = 0; c < C; c++) {
                    double rw = 0.0;
                    for (int k = 0; k < K; k++)
                        rw += Rj[k * C + c] * w[k];
                    nb[c] += th * (z[c] - rw) / s2;
                }
            }
        }
        double *Uh = U + (size_t)h * K * K, *Rh = R + (size_t)h * K * C;
        tc_spd_inverse(K, Q, Uh);
        for (int k = 0; k < K; k++)
            for (int c = 0; c < C; c++) {
                double v = 0.0;
                for (int l = 0; l < K; l++)
                    v += Uh[k * K + l] * B[l * C + c];
                Rh[k * C + c] = v;
            }
        s2_b[h] = 1.0 / prec_b;
        for (int c = 0; c < C; c++)
            mu_b[(size_t)h * C + c] = nb[c] / prec_b;
    }
    free(Q);
    free(B);
    free(nb);
}

static double max_abs_diff(const double *a, const double *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > m)
            m = fabs(a[i] - b[i]);
    return m;
}

/* The largest difference between the memory's posterior and the reference's. */
static double posterior_gap(const vbm_memory *m, const piece_rec *p, int n)
{
    int H = m->cfg.clusters, K = m->cfg.rows, C = m->cfg.code_size, shift = m->cfg.shift;
    double *R = malloc(sizeof(double) * H * K * C), *U = malloc(sizeof(double) * H * K * K);
    double *mu_b = malloc(sizeof(double) * H * C), *s2_b = malloc(sizeof(double) * H);
    reference_posterior(p, n, H, K, C, m->cfg.u0, m->cfg.sigma2_b0, m->cfg.sigma_z2, shift, R, U,
                        mu_b, s2_b);
    double gap = max_abs_diff(R, m->R, (size_t)H * K * C);
    double gu = max_abs_diff(U, m->U, (size_t)H * K * K);
    gap = gu > gap ? gu : gap;
    if (shift) {
        double gb = max_abs_diff(mu_b, m->mu_b, (size_t)H * C);
        double gs = max_abs_diff(s2_b, m->s2_b, (size_t)H);
        gap = gb > gap ? gb : gap;
        gap = gs > gap ? gs : gap;
    }
    free(R);
    free(U);
    free(mu_b);
    free(s2_b);
    return gap;
}

/* A memory of the kind with the default configuration at K rows and H clusters; R0 (K x C)
 * overrides the zero prior mean when not NULL. */
static vbm_memory *make_memory(vbm_kind kind, int C, int K, int H, const double *R0)
{
    vbm_config cfg;
    vbm_config_default(kind, C, &cfg);
    vbm_config_set_rows(&cfg, K);
    cfg.clusters = H;
    vbm_memory *m = NULL;
    vbm_error err;
    ck_assert_msg(vbm_memory_create(&cfg, R0, NULL, &m, &err) == VBM_OK, "%s", err.msg);
    return m;
}

/* Write the T codes as n pieces: the first by vbm_write (from the base prior, seeded as a
 * write is: random means, k-means++ shifts), the others by vbm_append (the posterior as the
 * prior), iters VB iterations each, recording every piece. */
static void write_in_pieces(vbm_memory *m, const double *z, long T, int n, int iters, piece_rec *p)
{
    int C = m->cfg.code_size, GH = m->cfg.clusters * m->cfg.groups, K = m->cfg.rows;
    long len = T / n;
    for (int j = 0; j < n; j++) {
        vbm_write_opts o;
        vbm_write_opts_default(&o);
        o.max_iter = iters;
        o.seed = 17;
        o.want_addresses = 1;
        vbm_write_result res;
        vbm_error err;
        p[j].codes = (vbm_codes){len, C, z + (size_t)j * len * C, NULL};
        vbm_status st = j == 0 ? vbm_write(m, &p[j].codes, &o, &res, &err)
                               : vbm_append(m, &p[j].codes, &o, &res, &err);
        ck_assert_msg(st == VBM_OK, "piece %d: %s", j, err.msg);
        p[j].addr = res.addr; /* taken over from the result */
        memset(&res.addr, 0, sizeof res.addr);
        vbm_write_result_free(&res);
        p[j].R = malloc(sizeof(double) * GH * K * C);
        p[j].mu_b = malloc(sizeof(double) * GH * C);
        memcpy(p[j].R, m->R, sizeof(double) * GH * K * C);
        memcpy(p[j].mu_b, m->mu_b, sizeof(double) * GH * C);
    }
}

static void free_pieces(piece_rec *p, int n)
{
    for (int j = 0; j < n; j++) {
        vbm_addresses_free(&p[j].addr);
        free(p[j].R);
        free(p[j].mu_b);
    }
}

/* The appends' posterior equals the reference built from their recorded addresses to
 * within tol; perturbing one recorded address mean of the first piece by 0.05 moves the
 * reference by more than 100 tol (the comparison can fail); and the addresses that batch
 * VB would use instead -- every frame re-inferred against the final memory -- give a
 * different posterior when n > 1 (the part of batch VB that appends do not do). */
static void check_appends(vbm_kind kind, int C, int K, int H, long T, double tol)
{
    double *z = clustered_codes(T, C, 3, 101);
    static const int ns[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        int n = ns[i];
        vbm_memory *m = make_memory(kind, C, K, H, NULL);
        piece_rec p[MAX_PIECES];
        memset(p, 0, sizeof p);
        write_in_pieces(m, z, T, n, 400, p);
        double gap = posterior_gap(m, p, n);
        ck_assert_msg(gap < tol, "%s, %d pieces: posterior differs from prior + statistics by %g",
                      vbm_kind_name(kind), n, gap);

        /* frame 0's address mean under its most probable cluster */
        int top = 0;
        for (int h = 1; h < H; h++)
            if (p[0].addr.s[h] > p[0].addr.s[top])
                top = h;
        p[0].addr.w_mu[(size_t)top * K] += 0.05;
        double bad = posterior_gap(m, p, n);
        ck_assert_msg(bad > 100 * tol, "%s, %d pieces: a perturbed address moved it only %g",
                      vbm_kind_name(kind), n, bad);
        p[0].addr.w_mu[(size_t)top * K] -= 0.05;

        if (n > 1) { /* batch re-inference of every piece's addresses against the final memory */
            vbm_error err;
            piece_rec q[MAX_PIECES];
            memcpy(q, p, sizeof q);
            for (int j = 0; j < n; j++) {
                ck_assert_msg(vbm_address(m, &q[j].codes, &q[j].addr, &err) == VBM_OK, "%s",
                              err.msg);
                q[j].R = m->R;
                q[j].mu_b = m->mu_b;
            }
            double rein = posterior_gap(m, q, n);
            ck_assert_msg(rein > 100 * tol, "%s, %d pieces: re-inferred addresses agree (%g)",
                          vbm_kind_name(kind), n, rein);
            for (int j = 0; j < n; j++)
                vbm_addresses_free(&q[j].addr);
        }
        free_pieces(p, n);
        vbm_memory_free(m);
    }
    free(z);
}

START_TEST(gaussian_appends_are_prior_plus_statistics)
{
    check_appends(VBM_GAUSSIAN, 8, 3, 1, 64, 1e-10);
}
END_TEST

START_TEST(gaussian_shift_appends_are_prior_plus_statistics)
{
    /* Theorem 3: q(b) and q(M) are coupled only through each other's means at the time of
     * each piece, which the reference takes from the memory right after that piece */
    double *z = clustered_codes(64, 8, 3, 7);
    vbm_config cfg;
    vbm_config_default(VBM_GAUSSIAN, 8, &cfg);
    cfg.rows = 3;
    cfg.shift = 1;
    static const int ns[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        vbm_memory *m = NULL;
        vbm_error err;
        ck_assert(vbm_memory_create(&cfg, NULL, NULL, &m, &err) == VBM_OK);
        piece_rec p[MAX_PIECES];
        memset(p, 0, sizeof p);
        write_in_pieces(m, z, 64, ns[i], 400, p);
        double gap = posterior_gap(m, p, ns[i]);
        ck_assert_msg(gap < 1e-10, "%d pieces: %g", ns[i], gap);
        p[ns[i] - 1].addr.w_mu[3] += 0.05;
        ck_assert(posterior_gap(m, p, ns[i]) > 1e-7);
        free_pieces(p, ns[i]);
        vbm_memory_free(m);
    }
    free(z);
}
END_TEST

START_TEST(mixture_appends_are_prior_plus_statistics)
{
    check_appends(VBM_MIXTURE, 8, 2, 3, 64, 1e-10);
}
END_TEST

START_TEST(dkm_appends_equal_one_write)
{
    /* the DKM writer is a Kalman filter over the frames: writing them in pieces is the same
     * computation in the same order, bit for bit. Both with a random prior mean R0 and with
     * the default R0 = 0, from which the writer (a write, or the first append on a fresh
     * memory) starts at R drawn from p(M) with the options' seed. */
    int C = 8;
    long T = 64;
    double *z = clustered_codes(T, C, 3, 5), *R0 = clustered_codes(4, C, 1, 9);
    vbm_codes all = {T, C, z, NULL};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.seed = 23;
    vbm_write_result res;
    vbm_error err;
    for (int pr = 0; pr < 2; pr++) {
        const double *prior = pr == 0 ? R0 : NULL;
        vbm_memory *one = make_memory(VBM_DKM, C, 4, 1, prior);
        ck_assert(vbm_write(one, &all, &o, &res, &err) == VBM_OK);
        vbm_write_result_free(&res);
        double rabs = 0.0;
        for (int i = 0; i < 4 * C; i++)
            rabs += fabs(one->R[i]);
        ck_assert_msg(rabs > 0.1, "prior %d: nothing written", pr);
        vbm_elbo e1;
        ck_assert(vbm_elbo_eval(one, &all, &e1, NULL, &err) == VBM_OK);
        static const int ns[] = {1, 2, 4, 8};
        for (int i = 0; i < 4; i++) {
            int n = ns[i];
            vbm_memory *m = make_memory(VBM_DKM, C, 4, 1, prior);
            for (int j = 0; j < n; j++) {
                vbm_codes piece = {T / n, C, z + (size_t)j * (T / n) * C, NULL};
                ck_assert(vbm_append(m, &piece, &o, &res, &err) == VBM_OK);
                vbm_write_result_free(&res);
            }
            ck_assert_msg(memcmp(m->R, one->R, sizeof(double) * 4 * C) == 0,
                          "prior %d, %d pieces: R", pr, n);
            ck_assert_msg(memcmp(m->U, one->U, sizeof(double) * 4 * 4) == 0,
                          "prior %d, %d pieces: U", pr, n);
            vbm_elbo e;
            ck_assert(vbm_elbo_eval(m, &all, &e, NULL, &err) == VBM_OK);
            ck_assert(e.total == e1.total);
            vbm_memory_free(m);
        }
        /* and a different order of the frames is a different memory (the check can fail) */
        double *rev = malloc(sizeof(double) * T * C);
        for (long t = 0; t < T; t++)
            memcpy(rev + t * C, z + (T - 1 - t) * C, sizeof(double) * C);
        vbm_codes back = {T, C, rev, NULL};
        vbm_memory *r = make_memory(VBM_DKM, C, 4, 1, prior);
        ck_assert(vbm_write(r, &back, &o, &res, &err) == VBM_OK);
        vbm_write_result_free(&res);
        ck_assert(memcmp(r->R, one->R, sizeof(double) * 4 * C) != 0);
        vbm_memory_free(r);
        free(rev);
        vbm_memory_free(one);
    }
    free(z);
    free(R0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("online");
    TCase *tc = tcase_create("online");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gaussian_appends_are_prior_plus_statistics);
    tcase_add_test(tc, gaussian_shift_appends_are_prior_plus_statistics);
    tcase_add_test(tc, mixture_appends_are_prior_plus_statistics);
    tcase_add_test(tc, dkm_appends_equal_one_write);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
