/* test_forget.c -- Check tests of vbm_forget: the retained-code path against a write of the
 * codes left (bit for bit), the conjugate downdate against the theorems' formulas computed
 * here without the library, forgetting an appended item against the memory before the
 * append (and appending it again against the memory after), the prior-precision floor, a
 * forgotten item's reconstruction against the others', and failures leaving the memory as it
 * was. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/rng.h"
#include "test_codes.h"
#include "vbmem/vbmem.h"

/* The shared helpers, with frames in cluster t mod Hc. */
static double *clustered_codes(long T, int C, int Hc, uint64_t seed)
{
    return tc_clustered_codes(T, C, Hc, seed, 1);
}

/* A memory of the kind with the default configuration at K rows and H clusters (G = 2 for
 * the tree), retaining up to retain codes; shift 1 turns on the gaussian's optional shift. */
static vbm_memory *make_memory_s2(vbm_kind kind, int C, int K, int H, long retain, int shift,
                                  double sigma_z2)
{
    vbm_config cfg;
    vbm_config_default(kind, C, &cfg);
    vbm_config_set_rows(&cfg, K);
    cfg.clusters = H;
    cfg.groups = kind == VBM_TREE ? 2 : 1;
    cfg.retain_max = retain;
    if (kind == VBM_GAUSSIAN)
        cfg.shift = shift;
    if (sigma_z2 > 0.0)
        cfg.sigma_z2 = sigma_z2;
    vbm_memory *m = NULL;
    vbm_error err;
    ck_assert_msg(vbm_memory_create(&cfg, NULL, NULL, &m, &err) == VBM_OK, "%s", err.msg);
    return m;
}

static vbm_memory *make_memory(vbm_kind kind, int C, int K, int H, long retain, int shift)
{
    return make_memory_s2(kind, C, K, H, retain, shift, 0.0);
}

static vbm_write_opts opts_of(int iters, uint64_t seed)
{
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = iters;
    o.seed = seed;
    return o;
}

static void write_ok(vbm_memory *m, const double *z, long T, const vbm_write_opts *o, int append)
{
    vbm_codes codes = {T, m->cfg.code_size, z, NULL};
    vbm_write_result res;
    vbm_error err;
    vbm_status st =
        append ? vbm_append(m, &codes, o, &res, &err) : vbm_write(m, &codes, o, &res, &err);
    ck_assert_msg(st == VBM_OK, "write: %s", err.msg);
    vbm_write_result_free(&res);
}

/* 1 when the two memories export to the same bytes (configuration, prior, posterior, paths,
 * retained codes, frames, last ELBO). */
static int same_export(const vbm_memory *a, const vbm_memory *b)
{
    unsigned char *ba = NULL, *bb = NULL;
    size_t la = 0, lb = 0;
    vbm_error err;
    ck_assert(vbm_export(a, &ba, &la, &err) == VBM_OK);
    ck_assert(vbm_export(b, &bb, &lb, &err) == VBM_OK);
    int same = la == lb && memcmp(ba, bb, la) == 0;
    free(ba);
    free(bb);
    return same;
}

static vbm_memory *clone_of(const vbm_memory *m)
{
    vbm_memory *c = NULL;
    vbm_error err;
    ck_assert(vbm_memory_clone(m, &c, &err) == VBM_OK);
    return c;
}

static double max_abs_diff(const double *a, const double *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > m)
            m = fabs(a[i] - b[i]);
    return m;
}

static double max_abs(const double *a, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i]) > m)
            m = fabs(a[i]);
    return m;
}

/* The largest difference between two memories' posteriors (R, U, mu_b, s2_b), relative to the
 * largest entry of each array of b. */
static double posterior_gap(const vbm_memory *a, const vbm_memory *b)
{
    size_t GH = (size_t)a->cfg.groups * a->cfg.clusters, K = a->cfg.rows, cg = a->cg;
    double g = max_abs_diff(a->R, b->R, GH * K * cg) / max_abs(b->R, GH * K * cg);
    double u = max_abs_diff(a->U, b->U, GH * K * K) / max_abs(b->U, GH * K * K);
    g = u > g ? u : g;
    if (a->cfg.shift) {
        double mb = max_abs_diff(a->mu_b, b->mu_b, GH * cg) / max_abs(b->mu_b, GH * cg);
        double sb = max_abs_diff(a->s2_b, b->s2_b, GH) / max_abs(b->s2_b, GH);
        g = mb > g ? mb : g;
        g = sb > g ? sb : g;
    }
    return g;
}

/* ---- retained-code path ---- */

/* Forget two items by slightly perturbed cues from a memory that retains its codes: the
 * items are the cues' own, and the memory is a write of the other codes, bit for bit (export
 * bytes), with the same options. Every kind (the tree with G = 2, its paths included). */
static void check_retained(vbm_kind kind, int shift)
{
    int C = 8, K = 3, H = kind == VBM_MIXTURE || kind == VBM_TREE ? 3 : 1;
    long T = 24;
    double *z = clustered_codes(T, C, 3, 41);
    vbm_write_opts o = opts_of(30, 5);
    vbm_memory *m = make_memory(kind, C, K, H, 100, shift);
    write_ok(m, z, T, &o, 0);

    double cue[2 * 8];
    static const long want[2] = {17, 5};
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < C; c++)
            cue[i * C + c] = z[want[i] * C + c] + (c % 2 ? 0.01 : -0.01);
    vbm_codes cues = {2, C, cue, NULL};
    vbm_forget_result res;
    vbm_error err;
    ck_assert_msg(vbm_forget(m, &cues, &o, &res, &err) == VBM_OK, "%s: %s", vbm_kind_name(kind),
                  err.msg);
    ck_assert_int_eq(res.exact, 1);
    ck_assert_int_eq(res.n, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(res.item[i], want[i]);
        ck_assert_msg(fabs(res.distance[i] - 0.01 * sqrt((double)C)) < 1e-12, "distance %g",
                      res.distance[i]);
    }
    ck_assert_int_eq(res.addr.T, 2);
    ck_assert(isfinite(res.fit.elbo.per_frame));
    ck_assert_int_eq(m->n_codes, T - 2);
    ck_assert_int_eq(m->frames, T - 2);

    double *rest = malloc(sizeof(double) * (T - 2) * C);
    for (long t = 0, j = 0; t < T; t++)
        if (t != 5 && t != 17)
            memcpy(rest + (j++) * C, z + t * C, sizeof(double) * C);
    vbm_memory *fresh = make_memory(kind, C, K, H, 100, shift);
    write_ok(fresh, rest, T - 2, &o, 0);
    ck_assert_msg(same_export(m, fresh), "%s: not the write of the codes left",
                  vbm_kind_name(kind));
    for (long j = 0; j < m->n_codes; j++) /* the forgotten codes are gone */
        ck_assert(memcmp(m->codes_mu + j * C, z + 5 * C, sizeof(double) * C) != 0
                  && memcmp(m->codes_mu + j * C, z + 17 * C, sizeof(double) * C) != 0);
    vbm_forget_result_free(&res);
    ck_assert(res.item == NULL && res.n == 0);
    vbm_memory_free(fresh);
    vbm_memory_free(m);
    free(rest);
    free(z);
}

START_TEST(retained_forget_is_a_write_of_the_codes_left)
{
    check_retained(VBM_GAUSSIAN, 0);
    check_retained(VBM_GAUSSIAN, 1);
    check_retained(VBM_CATEGORICAL, 0);
    check_retained(VBM_MIXTURE, 0);
    check_retained(VBM_TREE, 0);
    check_retained(VBM_DKM, 0);
}
END_TEST

START_TEST(retained_forget_of_everything_is_the_prior)
{
    /* four codes, four cues: the first two both nearest code 1, which goes to the first; the
     * second takes the next nearest; every code goes once; the memory is a new one */
    int C = 6;
    double *z = clustered_codes(4, C, 2, 3);
    vbm_write_opts o = opts_of(20, 1);
    vbm_memory *m = make_memory(VBM_MIXTURE, C, 2, 2, 10, 0);
    write_ok(m, z, 4, &o, 0);
    double cue[4 * 6];
    memcpy(cue, z + 1 * C, sizeof(double) * C);
    memcpy(cue + C, z + 1 * C, sizeof(double) * C);
    memcpy(cue + 2 * C, z + 0 * C, sizeof(double) * C);
    memcpy(cue + 3 * C, z + 2 * C, sizeof(double) * C);
    vbm_codes cues = {4, C, cue, NULL};
    vbm_forget_result res;
    vbm_error err;
    ck_assert_msg(vbm_forget(m, &cues, &o, &res, &err) == VBM_OK, "%s", err.msg);
    ck_assert_int_eq(res.exact, 1);
    ck_assert_int_eq(res.item[0], 1);
    ck_assert(res.distance[0] == 0.0);
    int seen[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++)
        seen[res.item[i]]++;
    for (int j = 0; j < 4; j++)
        ck_assert_int_eq(seen[j], 1);
    double d2 = 0.0;
    for (int c = 0; c < C; c++)
        d2 += (z[1 * C + c] - z[res.item[1] * C + c]) * (z[1 * C + c] - z[res.item[1] * C + c]);
    ck_assert(fabs(res.distance[1] - sqrt(d2)) < 1e-12);
    ck_assert(isnan(res.fit.elbo.per_frame));
    ck_assert_int_eq(m->n_codes, 0);
    ck_assert_int_eq(m->frames, 0);
    vbm_memory *fresh = make_memory(VBM_MIXTURE, C, 2, 2, 10, 0);
    ck_assert_msg(same_export(m, fresh), "not the prior");
    vbm_forget_result_free(&res);
    vbm_memory_free(fresh);
    vbm_memory_free(m);
    free(z);
}
END_TEST

/* ---- downdate path ---- */

/* The downdate of memory `before` by the cues, computed here from Theorem 4 (Eq. 198-207;
 * Theorems 1 and 3 with H = 1) with Gauss-Jordan inverses: with the addresses a of the cues
 * under `before` (dkm: theta = 1, Sigma = 0), Q = U^-1, Y = Q R,
 *   Q' = Q - sum_i th (w w^T + Sigma) / s2,  Y' = Y - sum_i th w (z - mu_b)^T / s2,
 *   1/s2b' = 1/s2b - sum_i th / s2,  mu_b'/s2b' = mu_b/s2b - sum_i th (z - R^T w) / s2,
 * R' = Q'^-1 Y', U' = Q'^-1. Writes into `out` (a clone of before). */
static void hand_downdate(const vbm_memory *before, const vbm_codes *cues, const vbm_addresses *a,
                          int no_cov, vbm_memory *out)
{
    int K = before->cfg.rows, C = before->cfg.code_size, H = before->cfg.clusters;
    int shift = before->cfg.shift;
    double s2 = before->cfg.sigma_z2;
    double *Q = malloc(sizeof(double) * K * K), *A = malloc(sizeof(double) * K * K);
    double *Y = malloc(sizeof(double) * K * C), *eta = malloc(sizeof(double) * C);
    for (int h = 0; h < H; h++) {
        const double *R = before->R + (size_t)h * K * C, *mb = before->mu_b + (size_t)h * C;
        memcpy(A, before->U + (size_t)h * K * K, sizeof(double) * K * K);
        tc_spd_inverse(K, A, Q);
        for (int k = 0; k < K; k++)
            for (int c = 0; c < C; c++) {
                double v = 0.0;
                for (int l = 0; l < K; l++)
                    v += Q[k * K + l] * R[l * C + c];
                Y[k * C + c] = v;
            }
        double prec = 1.0 / before->s2_b[h];
        for (int c = 0; c < C; c++)
            eta[c] = shift ? mb[c] * prec : 0.0;
        for (long i = 0; i < cues->T; i++) {
            double th = a->s[i * H + h];
            const double *w = a->w_mu + ((size_t)i * H + h) * K, *z = cues->mu + i * C;
            const double *Sw = a->w_cov + (size_t)h * K * K;
            for (int k = 0; k < K; k++)
                for (int l = 0; l < K; l++)
                    Q[k * K + l] -= th * (w[k] * w[l] + (no_cov ? 0.0 : Sw[k * K + l])) / s2;
            for (int k = 0; k < K; k++)
                for (int c = 0; c < C; c++)
                    Y[k * C + c] -= th * w[k] * (z[c] - (shift ? mb[c] : 0.0)) / s2;
            prec -= th / s2;
            for (int c = 0; c < C; c++) {
                double rw = 0.0;
                for (int k = 0; k < K; k++)
                    rw += R[k * C + c] * w[k];
                eta[c] -= th * (z[c] - rw) / s2;
            }
        }
        double *U = out->U + (size_t)h * K * K, *Ro = out->R + (size_t)h * K * C;
        tc_spd_inverse(K, Q, U);
        for (int k = 0; k < K; k++)
            for (int c = 0; c < C; c++) {
                double v = 0.0;
                for (int l = 0; l < K; l++)
                    v += U[k * K + l] * Y[l * C + c];
                Ro[k * C + c] = v;
            }
        if (shift) {
            out->s2_b[h] = 1.0 / prec;
            for (int c = 0; c < C; c++)
                out->mu_b[(size_t)h * C + c] = eta[c] / prec;
        }
    }
    free(Q);
    free(A);
    free(Y);
    free(eta);
}

/* The dkm writer's address means (R R^T + I)^{-1} R z of the cues, by Gauss-Jordan, into
 * a->w_mu (T x K). */
static void hand_dkm_addresses(const vbm_memory *m, const vbm_codes *cues, double *w_mu)
{
    int K = m->cfg.rows, C = m->cfg.code_size;
    double *A = malloc(sizeof(double) * K * K), *Ai = malloc(sizeof(double) * K * K);
    for (int k = 0; k < K; k++)
        for (int l = 0; l < K; l++) {
            double v = k == l;
            for (int c = 0; c < C; c++)
                v += m->R[k * C + c] * m->R[l * C + c];
            A[k * K + l] = v;
        }
    tc_spd_inverse(K, A, Ai);
    for (long i = 0; i < cues->T; i++)
        for (int k = 0; k < K; k++) {
            double v = 0.0;
            for (int l = 0; l < K; l++) {
                double rz = 0.0;
                for (int c = 0; c < C; c++)
                    rz += m->R[l * C + c] * cues->mu[i * C + c];
                v += Ai[k * K + l] * rz;
            }
            w_mu[i * K + k] = v;
        }
    free(A);
    free(Ai);
}

/* Forget two cues (one a stored code perturbed, one a stored code) from a memory written in
 * one batch without retained codes: the posterior is the hand-computed downdate to 1e-9
 * (relative to each array's largest entry), the addresses are vbm_address's (dkm: the
 * writer's, by hand), the distances those to the posterior-mean read, frames drop by two. */
static void check_downdate(vbm_kind kind, int shift, int H)
{
    int C = 8, K = 3;
    long T = 40;
    double *z = clustered_codes(T, C, 3, 77);
    vbm_write_opts o = opts_of(60, 9);
    vbm_memory *m = make_memory(kind, C, K, H, 0, shift);
    write_ok(m, z, T, &o, 0);
    vbm_memory *before = clone_of(m), *want = clone_of(m);
    double cue[2 * 8];
    for (int c = 0; c < C; c++) {
        cue[c] = z[3 * C + c] + 0.05 * (c % 3 - 1);
        cue[C + c] = z[20 * C + c];
    }
    vbm_codes cues = {2, C, cue, NULL};
    vbm_addresses a;
    vbm_error err;
    ck_assert(vbm_address(before, &cues, &a, &err) == VBM_OK);
    if (kind == VBM_DKM)
        hand_dkm_addresses(before, &cues, a.w_mu);
    hand_downdate(before, &cues, &a, kind == VBM_DKM, want);

    vbm_forget_result res;
    ck_assert_msg(vbm_forget(m, &cues, &o, &res, &err) == VBM_OK, "%s", err.msg);
    ck_assert_int_eq(res.exact, 0);
    ck_assert_int_eq(m->frames, T - 2);
    ck_assert(isnan(m->last_elbo) && isnan(res.fit.elbo.per_frame));
    ck_assert(max_abs_diff(res.addr.w_mu, a.w_mu, (size_t)2 * H * K) < 1e-12);
    ck_assert(max_abs_diff(res.addr.s, a.s, (size_t)2 * H) == 0.0);
    double gap = posterior_gap(m, want);
    ck_assert_msg(gap < 1e-9, "%s shift %d H %d: the downdate differs from the hand one by %g",
                  vbm_kind_name(kind), shift, H, gap);
    ck_assert_msg(posterior_gap(m, before) > 1e-4, "nothing changed");
    /* distances: to the posterior-mean read under the memory before */
    double read[2 * 8];
    vbm_read_opts ro = {VBM_READ_MEAN};
    ck_assert(vbm_read(before, &cues, &ro, 0, read, NULL, &err) == VBM_OK);
    for (int i = 0; i < 2; i++) {
        double d2 = 0.0;
        for (int c = 0; c < C; c++)
            d2 += (cue[i * C + c] - read[i * C + c]) * (cue[i * C + c] - read[i * C + c]);
        if (kind != VBM_DKM) /* (dkm's read addresses by VB, its forget by the writer's rule) */
            ck_assert_msg(fabs(res.distance[i] - sqrt(d2)) < 1e-9, "distance %g, read %g",
                          res.distance[i], sqrt(d2));
        ck_assert_int_eq(res.item[i], -1);
    }
    vbm_forget_result_free(&res);
    vbm_addresses_free(&a);
    vbm_memory_free(before);
    vbm_memory_free(want);
    vbm_memory_free(m);
    free(z);
}

START_TEST(downdate_is_the_conjugate_downdate)
{
    check_downdate(VBM_GAUSSIAN, 0, 1);
    check_downdate(VBM_GAUSSIAN, 1, 1);
    check_downdate(VBM_MIXTURE, 1, 3);
    check_downdate(VBM_DKM, 0, 1);
}
END_TEST

/* Append one item to a written memory (online VB to its fixed point), forget it by its own
 * code: the memory before the append comes back, to the append's convergence; append it
 * again to that: the memory after the append comes back. The append's posterior is the
 * memory before plus the item's term at the fixed point (tests/test_online.c), and the
 * downdate subtracts that term, so these are exact up to the fit's convergence. */
static void check_undo_append(vbm_kind kind, int shift, int H)
{
    int C = 8, K = 3;
    long T = 30;
    double *z = clustered_codes(T + 1, C, 3, 123);
    vbm_write_opts o = opts_of(400, 3);
    vbm_memory *m0 = make_memory(kind, C, K, H, 0, shift);
    write_ok(m0, z, T, &o, 0);
    vbm_memory *m1 = clone_of(m0);
    write_ok(m1, z + T * C, 1, &o, 1);
    ck_assert_msg(posterior_gap(m1, m0) > 1e-3, "the append changed nothing");
    vbm_memory *m = clone_of(m1);
    vbm_codes cue = {1, C, z + T * C, NULL};
    vbm_forget_result res;
    vbm_error err;
    ck_assert_msg(vbm_forget(m, &cue, &o, &res, &err) == VBM_OK, "%s", err.msg);
    vbm_forget_result_free(&res);
    double back = posterior_gap(m, m0);
    ck_assert_msg(back < 1e-8, "%s shift %d: forgetting the appended item leaves %g",
                  vbm_kind_name(kind), shift, back);
    ck_assert_int_eq(m->frames, m0->frames);
    write_ok(m, z + T * C, 1, &o, 1);
    double again = posterior_gap(m, m1);
    ck_assert_msg(again < 1e-8, "%s shift %d: appending it again leaves %g", vbm_kind_name(kind),
                  shift, again);
    vbm_memory_free(m);
    vbm_memory_free(m0);
    vbm_memory_free(m1);
    free(z);
}

START_TEST(forgetting_an_appended_item_undoes_the_append)
{
    check_undo_append(VBM_GAUSSIAN, 0, 1);
    check_undo_append(VBM_GAUSSIAN, 1, 1);
    check_undo_append(VBM_MIXTURE, 1, 3);
}
END_TEST

START_TEST(downdate_never_goes_below_the_prior_precision)
{
    /* two frames written, a far cue that was never written forgotten: its term exceeds what
     * the frames put in, so Q - U0^{-1} - dQ is indefinite; the memory keeps the prior
     * precision as its floor (and the shift's) */
    int C = 4, K = 3;
    double z[8] = {1, 2, 0, -1, 0.5, -1, 2, 1};
    double far[4] = {40, -30, 25, 10};
    vbm_write_opts o = opts_of(50, 2);
    vbm_memory *m = make_memory(VBM_MIXTURE, C, K, 1, 0, 0);
    write_ok(m, z, 2, &o, 0);
    vbm_codes cue = {1, C, far, NULL};
    vbm_forget_result res;
    vbm_error err;
    ck_assert_msg(vbm_forget(m, &cue, &o, &res, &err) == VBM_OK, "%s", err.msg);
    vbm_forget_result_free(&res);
    /* Q' - U0^{-1} (U0 = u0 I) positive semidefinite: its smallest eigenvalue by the
     * smallest diagonal entry of its Cholesky-free test -- x^T (Q' - U0^-1) x >= 0 for the
     * coordinate vectors and 200 random directions */
    double A[9], Q[9];
    memcpy(A, m->U, sizeof A);
    tc_spd_inverse(K, A, Q);
    for (int k = 0; k < K; k++)
        Q[k * K + k] -= 1.0 / m->cfg.u0;
    rng_t r;
    rng_seed(&r, 5);
    double worst = 0.0;
    for (int trial = 0; trial < 203; trial++) {
        double x[3] = {0, 0, 0};
        if (trial < 3)
            x[trial] = 1.0;
        else
            for (int k = 0; k < K; k++)
                x[k] = rng_normal(&r);
        double n2 = 0.0, q = 0.0;
        for (int k = 0; k < K; k++) {
            n2 += x[k] * x[k];
            for (int l = 0; l < K; l++)
                q += x[k] * Q[k * K + l] * x[l];
        }
        if (q / n2 < worst)
            worst = q / n2;
    }
    ck_assert_msg(worst > -1e-9, "precision below the prior's: x^T (Q' - U0^-1) x / |x|^2 = %g",
                  worst);
    ck_assert_msg(m->s2_b[0] <= m->cfg.sigma2_b0 * (1 + 1e-12), "shift variance %g above %g",
                  m->s2_b[0], m->cfg.sigma2_b0);
    ck_assert_int_eq(m->frames, 1);
    vbm_memory_free(m);
}
END_TEST

/* ---- what forgetting does to reads ---- */

/* |z - E[z | q(y), q(Omega)]| of every code under m (the posterior-mean read). */
static void residuals(const vbm_memory *m, const double *z, long T, double *out)
{
    int C = m->cfg.code_size;
    double *read = malloc(sizeof(double) * T * C);
    vbm_codes q = {T, C, z, NULL};
    vbm_read_opts ro = {VBM_READ_MEAN};
    vbm_error err;
    ck_assert(vbm_read(m, &q, &ro, 0, read, NULL, &err) == VBM_OK);
    for (long t = 0; t < T; t++) {
        double d2 = 0.0;
        for (int c = 0; c < C; c++)
            d2 += (z[t * C + c] - read[t * C + c]) * (z[t * C + c] - read[t * C + c]);
        out[t] = sqrt(d2);
    }
    free(read);
}

START_TEST(forgotten_item_fades_while_the_others_stay)
{
    /* codes of a known mixture (3 clusters, 4 items each, 2-dimensional within a cluster plus
     * noise) written to a mixture memory of 3 clusters, K = 4 rows and sigma_z^2 = 0.2 without
     * retained codes. Forget item j by a perturbed cue: the residual of its posterior-mean
     * read grows by at least half of what the exact answer (a memory written without it)
     * gives (measured: 0.69-0.99 of it), while no other item's moves by half as much as its
     * own (measured: at most 0.13 of it). */
    int C = 8, K = 4, H = 3;
    long T = 12;
    double *z = clustered_codes(T, C, 3, 2024);
    vbm_write_opts o = opts_of(200, 7);
    for (long j = 0; j < T; j += 5) {
        vbm_memory *m = make_memory_s2(VBM_MIXTURE, C, K, H, 0, 0, 0.2);
        write_ok(m, z, T, &o, 0);
        double r0[12], r1[12], rx[12];
        residuals(m, z, T, r0);
        double cue[8];
        for (int c = 0; c < C; c++)
            cue[c] = z[j * C + c] + 0.05 * (c % 2 ? 1 : -1);
        vbm_codes cues = {1, C, cue, NULL};
        vbm_forget_result res;
        vbm_error err;
        ck_assert_msg(vbm_forget(m, &cues, &o, &res, &err) == VBM_OK, "%s", err.msg);
        vbm_forget_result_free(&res);
        residuals(m, z, T, r1);
        /* the exact answer: a memory written without item j */
        double rest[11 * 8];
        for (long t = 0, i = 0; t < T; t++)
            if (t != j)
                memcpy(rest + (i++) * C, z + t * C, sizeof(double) * C);
        vbm_memory *x = make_memory_s2(VBM_MIXTURE, C, K, H, 0, 0, 0.2);
        write_ok(x, rest, T - 1, &o, 0);
        residuals(x, z, T, rx);
        double other = 0.0;
        for (long t = 0; t < T; t++)
            if (t != j && fabs(r1[t] - r0[t]) > other)
                other = fabs(r1[t] - r0[t]);
        ck_assert_msg(r1[j] - r0[j] > 0.5 * (rx[j] - r0[j]),
                      "item %ld: residual %g -> %g, a memory without it %g", j, r0[j], r1[j],
                      rx[j]);
        ck_assert_msg(other < 0.5 * (r1[j] - r0[j]), "item %ld: another item moved %g, it %g", j,
                      other, r1[j] - r0[j]);
        vbm_memory_free(x);
        vbm_memory_free(m);
    }
    free(z);
}
END_TEST

/* ---- failures ---- */

/* vbm_forget(m, cues) fails with status st naming field (NULL: any), and leaves m's export
 * bytes and a zeroed result. */
static void check_refused(vbm_memory *m, const vbm_codes *cues, vbm_status st, const char *field)
{
    vbm_memory *before = clone_of(m);
    vbm_forget_result res;
    memset(&res, 0x5a, sizeof res);
    vbm_error err;
    memset(&err, 0, sizeof err);
    vbm_write_opts o = opts_of(20, 1);
    vbm_status got = vbm_forget(m, cues, &o, &res, &err);
    ck_assert_msg(got == st, "status %d, want %d (%s)", got, st, err.msg);
    if (field)
        ck_assert_msg(strcmp(err.field, field) == 0, "field \"%s\", want \"%s\"", err.field, field);
    ck_assert(res.item == NULL && res.distance == NULL && res.n == 0 && res.addr.s == NULL
              && res.fit.trace == NULL);
    ck_assert_msg(same_export(m, before), "the memory changed");
    vbm_memory_free(before);
}

START_TEST(failures_leave_the_memory_unchanged)
{
    int C = 6;
    double *z = clustered_codes(12, C, 3, 8);
    vbm_write_opts o = opts_of(20, 1);
    vbm_memory *mix = make_memory(VBM_MIXTURE, C, 2, 3, 0, 0);
    write_ok(mix, z, 12, &o, 0);
    double wide[7] = {0};
    vbm_codes bad_size = {1, C + 1, wide, NULL};
    check_refused(mix, &bad_size, VBM_EINVAL, "codes");
    double nan2[12];
    memcpy(nan2, z, sizeof nan2);
    nan2[C + 2] = NAN;
    vbm_codes has_nan = {2, C, nan2, NULL};
    check_refused(mix, &has_nan, VBM_EINVAL, "codes.mu[1][2]");
    vbm_codes none = {0, C, z, NULL};
    check_refused(mix, &none, VBM_EINVAL, "codes");
    vbm_codes null_mu = {1, C, NULL, NULL};
    check_refused(mix, &null_mu, VBM_EINVAL, "codes");
    double neg[6] = {-1, 0, 0, 0, 0, 0};
    vbm_codes neg_var = {1, C, z, neg};
    check_refused(mix, &neg_var, VBM_EINVAL, "codes.sigma2[0][0]");
    /* a posterior covariance that is not positive definite: the downdate cannot invert it */
    vbm_memory *broken = clone_of(mix);
    broken->U[2 * 2 * 2] = -1.0; /* cluster 2's U[0][0] */
    vbm_codes one = {1, C, z, NULL};
    check_refused(broken, &one, VBM_ENUMERIC, NULL);
    vbm_memory_free(broken);
    /* the kinds without a downdate, retaining nothing */
    vbm_memory *cat = make_memory(VBM_CATEGORICAL, C, 3, 1, 0, 0);
    write_ok(cat, z, 12, &o, 0);
    check_refused(cat, &one, VBM_EINVAL, "kind");
    vbm_memory *tree = make_memory(VBM_TREE, C, 2, 2, 0, 0);
    write_ok(tree, z, 12, &o, 0);
    check_refused(tree, &one, VBM_EINVAL, "kind");
    /* more cues than retained codes */
    vbm_memory *kept = make_memory(VBM_GAUSSIAN, C, 2, 1, 10, 0);
    write_ok(kept, z, 3, &o, 0);
    vbm_codes four = {4, C, z, NULL};
    check_refused(kept, &four, VBM_EINVAL, "codes");
    /* a refit the write would refuse: 2 codes left for 3 clusters seeded by k-means++ */
    vbm_memory *small = make_memory(VBM_MIXTURE, C, 2, 3, 10, 0);
    write_ok(small, z, 4, &o, 0);
    vbm_codes two = {2, C, z, NULL};
    check_refused(small, &two, VBM_EINVAL, NULL);
    vbm_memory_free(small);
    vbm_memory_free(kept);
    vbm_memory_free(tree);
    vbm_memory_free(cat);
    vbm_memory_free(mix);
    free(z);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("forget");
    TCase *tc = tcase_create("forget");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, retained_forget_is_a_write_of_the_codes_left);
    tcase_add_test(tc, retained_forget_of_everything_is_the_prior);
    tcase_add_test(tc, downdate_is_the_conjugate_downdate);
    tcase_add_test(tc, forgetting_an_appended_item_undoes_the_append);
    tcase_add_test(tc, downdate_never_goes_below_the_prior_precision);
    tcase_add_test(tc, forgotten_item_fades_while_the_others_stay);
    tcase_add_test(tc, failures_leave_the_memory_unchanged);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
