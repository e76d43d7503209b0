/* test_temporal.c -- Check tests of the temporal (identity/attribute) memory of seed 003:
 * monotone free energy, recovery of the generating parameters, ARD pruning, the VBE posterior
 * against brute-force enumeration, bad input; appends against one write, continuations (the
 * predictive mean against sampled continuations, held-out frames), bit-exact export/import. */
#define _DEFAULT_SOURCE /* M_PI */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/temporal.h"
#include "numerics/linalg.h"
#include "numerics/rng.h"
#include "vbmem/vbmem.h"

/* ---- data drawn from the model itself ---- */

typedef struct {
    int D, P, Q, K;
    double *W;      /* D x K */
    double *lambda; /* K */
    double T[4];    /* T[2 m + n] = P(b_t = n | b_{t-1} = m) */
    double pi0;
    double noise; /* standard deviation of the observation noise */
} truth_t;

/* Draw truth: W with N(0, 1) entries scaled by wscale[p] (0 switches a column off). */
static void truth_init(truth_t *tr, int D, int P, int Q, const double *lambda, double t01,
                       double t10, double noise, uint64_t seed)
{
    rng_t r;
    rng_seed(&r, seed);
    tr->D = D;
    tr->P = P;
    tr->Q = Q;
    tr->K = P * Q;
    tr->W = malloc(sizeof(double) * D * tr->K);
    tr->lambda = malloc(sizeof(double) * tr->K);
    for (int i = 0; i < D * tr->K; i++)
        tr->W[i] = rng_normal(&r);
    memcpy(tr->lambda, lambda, sizeof(double) * tr->K);
    tr->T[0] = 1.0 - t01;
    tr->T[1] = t01;
    tr->T[2] = t10;
    tr->T[3] = 1.0 - t10;
    tr->pi0 = 0.5;
    tr->noise = noise;
}

static void truth_free(truth_t *tr)
{
    free(tr->W);
    free(tr->lambda);
}

/* A sequence of T frames (malloc'd T x D) drawn ancestrally from the truth. */
static double *truth_draw(const truth_t *tr, long T, uint64_t seed)
{
    rng_t r;
    int D = tr->D, P = tr->P, Q = tr->Q, K = tr->K;
    double *y = calloc((size_t)T * D, sizeof(double));
    int *b = calloc(P, sizeof(int));
    double *a = calloc(K, sizeof(double));

    rng_seed(&r, seed);
    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            if (t == 0)
                b[p] = rng_uniform(&r) < tr->pi0;
            else
                b[p] = rng_uniform(&r) < tr->T[2 * b[p] + 1];
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double l = tr->lambda[k];
                a[k] = t == 0 ? rng_normal(&r) : l * a[k] + sqrt(1 - l * l) * rng_normal(&r);
            }
        }
        for (int d = 0; d < D; d++) {
            double v = tr->noise * rng_normal(&r);
            for (int k = 0; k < K; k++)
                v += tr->W[d * K + k] * a[k] * b[k / Q];
            y[(size_t)t * D + d] = v;
        }
    }
    free(b);
    free(a);
    return y;
}

static vbm_temporal *make_vbe(int D, int P, int Q, int temporal)
{
    vbm_temporal_config c;
    vbm_temporal *m = NULL;
    vbm_error err;
    vbm_temporal_config_default(D, P, &c);
    c.attributes = Q;
    c.vbe_temporal = temporal;
    ck_assert_msg(vbm_temporal_create(&c, &m, &err) == VBM_OK, "%s", err.msg);
    return m;
}

/* A memory with the eq. 18 VBE. */
static vbm_temporal *make(int D, int P, int Q)
{
    return make_vbe(D, P, Q, 0);
}

/* ---- free energy ---- */

static void check_monotone(int D, int P, int Q, int nseq, long T, int iters, int rescale,
                           int ard_start, int temporal, uint64_t seed)
{
    double lam[8] = {0.9, 0.5, 0.7, 0.2, 0.95, 0.3, 0.8, 0.6};
    truth_t tr;
    vbm_sequence *s = calloc(nseq, sizeof *s);
    vbm_temporal *m = make_vbe(D, P, Q, temporal);
    vbm_temporal_opts o;
    vbm_temporal_trace tc;
    vbm_error err;

    truth_init(&tr, D, P, Q, lam, 0.1, 0.2, 0.3, seed);
    for (int i = 0; i < nseq; i++) {
        s[i].T = T;
        s[i].D = D;
        s[i].y = truth_draw(&tr, T, seed + 100 + i);
    }
    vbm_temporal_opts_default(&o);
    o.iterations = iters;
    o.seed = seed;
    o.rescale = rescale;
    o.ard_start = ard_start;
    ck_assert_msg(vbm_temporal_write(m, s, nseq, &o, &tc, &err) == VBM_OK, "%s", err.msg);
    ck_assert_int_eq(tc.iterations, iters);
    for (int i = 1; i < tc.iterations; i++) {
        double a = tc.free_energy[i - 1], b = tc.free_energy[i];
        ck_assert_msg(b >= a - 1e-9 * fabs(a), "F decreased at iteration %d: %.12g -> %.12g", i, a,
                      b);
    }
    /* it also moved: the fit is not a no-op */
    ck_assert_msg(tc.free_energy[tc.iterations - 1] > tc.free_energy[0] + 1.0,
                  "F did not rise: %.6g -> %.6g", tc.free_energy[0],
                  tc.free_energy[tc.iterations - 1]);
    vbm_temporal_trace_free(&tc);
    for (int i = 0; i < nseq; i++)
        free((void *)s[i].y);
    free(s);
    truth_free(&tr);
    vbm_temporal_free(m);
}

START_TEST(free_energy_never_decreases)
{
    /* with and without the rescaling step and the ARD update */
    check_monotone(8, 3, 1, 2, 60, 60, 1, 5, 0, 11);
    check_monotone(8, 3, 1, 2, 60, 60, 0, 5, 0, 11);
    check_monotone(8, 3, 1, 2, 60, 60, 1, -1, 0, 11);
    check_monotone(6, 2, 2, 3, 40, 60, 1, 0, 0, 12);
    check_monotone(6, 2, 2, 3, 40, 60, 0, -1, 0, 12);
    check_monotone(5, 4, 1, 1, 1, 10, 1, 5, 0, 13); /* T = 1: no transitions */
    /* the eq. 19 VBE (forward-backward, Kalman smoother) */
    check_monotone(8, 3, 1, 2, 60, 60, 1, 5, 1, 11);
    check_monotone(8, 3, 1, 2, 60, 60, 0, -1, 1, 11);
    check_monotone(6, 2, 2, 3, 40, 60, 1, 0, 1, 12);
    check_monotone(5, 4, 1, 1, 1, 10, 1, 5, 1, 13);
}
END_TEST

/* ---- recovery against the generating parameters ---- */

/* |sin| of the principal angles between the column spaces of A and B (D x n each, row
 * stride lda / ldb): sqrt(sum sin^2) = |(I - P_B) U_A|_F with U_A an orthonormal basis of A. */
static double subspace_sin(int D, int n, const double *A, int lda, const double *B, int ldb)
{
    double *UA = calloc((size_t)D * n, sizeof(double)), *UB = calloc((size_t)D * n, sizeof(double));
    double tot = 0.0;

    for (int pass = 0; pass < 2; pass++) {
        const double *X = pass ? B : A;
        int ld = pass ? ldb : lda;
        double *U = pass ? UB : UA;
        for (int j = 0; j < n; j++) {
            double nr = 0.0;
            for (int d = 0; d < D; d++)
                U[d * n + j] = X[d * ld + j];
            for (int i = 0; i < j; i++) {
                double c = 0.0;
                for (int d = 0; d < D; d++)
                    c += U[d * n + i] * U[d * n + j];
                for (int d = 0; d < D; d++)
                    U[d * n + j] -= c * U[d * n + i];
            }
            for (int d = 0; d < D; d++)
                nr += U[d * n + j] * U[d * n + j];
            nr = sqrt(nr);
            for (int d = 0; d < D; d++)
                U[d * n + j] /= nr;
        }
    }
    for (int j = 0; j < n; j++) {
        double *r = calloc(D, sizeof(double));
        for (int d = 0; d < D; d++)
            r[d] = UA[d * n + j];
        for (int i = 0; i < n; i++) {
            double c = 0.0;
            for (int d = 0; d < D; d++)
                c += UB[d * n + i] * UA[d * n + j];
            for (int d = 0; d < D; d++)
                r[d] -= c * UB[d * n + i];
        }
        for (int d = 0; d < D; d++)
            tot += r[d] * r[d];
        free(r);
    }
    free(UA);
    free(UB);
    return sqrt(tot);
}

/* |cos| of the angle between column i of A and column j of B. */
static double col_cos(int D, const double *A, int lda, int i, const double *B, int ldb, int j)
{
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int d = 0; d < D; d++) {
        ab += A[d * lda + i] * B[d * ldb + j];
        aa += A[d * lda + i] * A[d * lda + i];
        bb += B[d * ldb + j] * B[d * ldb + j];
    }
    return aa > 0 && bb > 0 ? fabs(ab) / sqrt(aa * bb) : 0.0;
}

typedef struct {
    double sin_w;    /* subspace distance of the active columns of W */
    double err_T;    /* max |E[T] - T| */
    double err_lam;  /* max |E[lambda] - lambda| over matched components */
    double lam_over; /* max E[lambda] - lambda over matched components */
    double err_rho;  /* relative error of the mean over k of E[rho_k] */
    int active;      /* columns not switched off by ARD */
    double min_cos;  /* smallest |cos| between a true column and its match */
    double extra;    /* sum of |<W_k>|^2 over the columns matched to no true column, over the
                       same sum over the matched ones */
} recovery_t;

/* Fit a P_model-component memory to nseq sequences of T frames drawn from truth; match each
 * true column to the learned active column of largest |cos|. */
static recovery_t fit_and_compare(const truth_t *tr, int P_model, int Q_model, int nseq, long T,
                                  int iters, int ard_start, double *gamma_out, int temporal,
                                  uint64_t seed)
{
    int D = tr->D, Q = Q_model, K = P_model * Q;
    vbm_sequence *s = calloc(nseq, sizeof *s);
    vbm_temporal *m = make_vbe(D, P_model, Q, temporal);
    vbm_temporal_opts o;
    vbm_error err;
    double *W = calloc((size_t)D * K, sizeof(double)), *g = calloc(K, sizeof(double));
    double *lam = calloc(K, sizeof(double)), *rho = calloc(D, sizeof(double)), Tm[4];
    double *Wa = calloc((size_t)D * K, sizeof(double)), wmax = 0.0;
    int *act = calloc(K, sizeof(int));
    recovery_t rv = {0, 0, 0, -INFINITY, 0, 0, 1.0, 0};
    int *matched = calloc(K, sizeof(int));
    double wm = 0.0, wx = 0.0;

    for (int i = 0; i < nseq; i++) {
        s[i].T = T;
        s[i].D = D;
        s[i].y = truth_draw(tr, T, seed * 1000 + i);
    }
    vbm_temporal_opts_default(&o);
    o.iterations = iters;
    o.seed = seed;
    o.ard_start = ard_start;
    o.restarts = 2;
    ck_assert_msg(vbm_temporal_write(m, s, nseq, &o, NULL, &err) == VBM_OK, "%s", err.msg);
    vbm_temporal_posterior(m, W, g, Tm, lam, rho);
    if (gamma_out)
        memcpy(gamma_out, g, sizeof(double) * K);
    /* active: sum_d <w_dk>^2 above 1e-3 of the largest */
    for (int k = 0; k < K; k++) {
        double n2 = 0.0;
        for (int d = 0; d < D; d++)
            n2 += W[d * K + k] * W[d * K + k];
        wmax = n2 > wmax ? n2 : wmax;
    }
    for (int k = 0; k < K; k++) {
        double n2 = 0.0;
        for (int d = 0; d < D; d++)
            n2 += W[d * K + k] * W[d * K + k];
        if (n2 > 1e-3 * wmax) {
            for (int d = 0; d < D; d++)
                Wa[d * K + rv.active] = W[d * K + k];
            act[rv.active++] = k;
        }
    }
    if (rv.active == tr->K)
        rv.sin_w = subspace_sin(D, tr->K, tr->W, tr->K, Wa, K);
    else
        rv.sin_w = INFINITY;
    for (int i = 0; i < 4; i++)
        rv.err_T = fmax(rv.err_T, fabs(Tm[i] - tr->T[i]));
    for (int j = 0; j < tr->K; j++) {
        int best = -1;
        double bc = -1.0;
        for (int a = 0; a < rv.active; a++) {
            double c = col_cos(D, tr->W, tr->K, j, W, K, act[a]);
            if (c > bc) {
                bc = c;
                best = act[a];
            }
        }
        rv.min_cos = fmin(rv.min_cos, bc);
        if (best >= 0)
            matched[best] = 1;
        rv.err_lam = best < 0 ? INFINITY : fmax(rv.err_lam, fabs(lam[best] - tr->lambda[j]));
        rv.lam_over = best < 0 ? INFINITY : fmax(rv.lam_over, lam[best] - tr->lambda[j]);
    }
    for (int k = 0; k < K; k++)
        for (int d = 0; d < D; d++) {
            if (matched[k])
                wm += W[d * K + k] * W[d * K + k];
            else
                wx += W[d * K + k] * W[d * K + k];
        }
    rv.extra = wx / wm;
    free(matched);
    for (int d = 0; d < D; d++)
        rv.err_rho += rho[d] / D;
    rv.err_rho = fabs(rv.err_rho * tr->noise * tr->noise - 1.0);
    for (int i = 0; i < nseq; i++)
        free((void *)s[i].y);
    free(s);
    free(W);
    free(g);
    free(lam);
    free(rho);
    free(Wa);
    free(act);
    vbm_temporal_free(m);
    return rv;
}

START_TEST(recovers_generating_parameters)
{
    /* identities on two thirds of the time, off for stretches of ten frames on average.
     * Under the eq. 18 factorisation q(a_t) q(a_{t-1}) drops the temporal covariance of a
     * inside the stretches with b = 0, which biases E[lambda] towards 0 (measured: 0.09 to
     * 0.18 below the truth here); lambda is checked for that direction and a bound */
    double lam[3] = {0.9, 0.5, 0.7};
    truth_t tr;
    for (uint64_t seed = 1; seed <= 2; seed++) {
        truth_init(&tr, 20, 3, 1, lam, 0.2, 0.1, 0.3, 40 + seed);
        recovery_t rv = fit_and_compare(&tr, 3, 1, 8, 200, 150, 5, NULL, 0, seed);
        fprintf(stderr,
                "recovery seed %d: sin W %.4f, T err %.4f, lambda err %.4f, rho rel err %.4f, "
                "min cos %.4f\n",
                (int)seed, rv.sin_w, rv.err_T, rv.err_lam, rv.err_rho, rv.min_cos);
        ck_assert_int_eq(rv.active, 3);
        ck_assert_msg(rv.sin_w < 0.05, "subspace sin %g", rv.sin_w);
        ck_assert_msg(rv.min_cos > 0.99, "min cos %g", rv.min_cos);
        ck_assert_msg(rv.err_T < 0.06, "T error %g", rv.err_T);
        ck_assert_msg(rv.err_lam < 0.2, "lambda error %g", rv.err_lam);
        ck_assert_msg(rv.lam_over < 0.02, "lambda above the truth by %g", rv.lam_over);
        ck_assert_msg(rv.err_rho < 0.05, "rho error %g", rv.err_rho);
        truth_free(&tr);
    }
}
END_TEST

START_TEST(ard_switches_off_unneeded_attributes)
{
    /* one identity with two attributes in the data, four attributes in the model: b is shared
     * by the attributes of an identity, so only the ARD precisions (sec. 6) can switch the
     * two extra columns off */
    double lam[2] = {0.9, 0.6}, g[4], g0[4];
    truth_t tr;
    truth_init(&tr, 16, 1, 2, lam, 0.2, 0.1, 0.3, 92);
    recovery_t rv = fit_and_compare(&tr, 1, 4, 3, 150, 150, 5, g, 0, 2);
    recovery_t r0 = fit_and_compare(&tr, 1, 4, 3, 150, 150, -1, g0, 0, 2);
    int big = 0, small = 0;
    fprintf(stderr,
            "ard: active %d, sin W %.4f; gamma %.3g %.3g %.3g %.3g; without ARD: active %d\n",
            rv.active, rv.sin_w, g[0], g[1], g[2], g[3], r0.active);
    ck_assert_int_eq(rv.active, 2);
    ck_assert_msg(rv.sin_w < 0.05, "subspace sin %g", rv.sin_w);
    for (int k = 0; k < 4; k++) {
        big += g[k] > 1e3;
        small += g[k] < 10.0;
    }
    ck_assert_int_eq(big, 2);
    ck_assert_int_eq(small, 2);
    /* without the ARD update the extra columns stay */
    ck_assert_int_gt(r0.active, 2);
    truth_free(&tr);
}
END_TEST

/* ---- the VBE posterior against brute-force enumeration ---- */

/* log of the normaliser of exp <log p(Y, B, A | Theta)>_{q(Theta)} over all B (enumerated) and
 * A (integrated exactly as one Gaussian of dimension T * K), the optimum of the free energy's
 * latent terms over every q(B, A) without factorisation; qb_out (T x P) gets the exact
 * marginals q*(b_{t,p} = 1). */
static double brute_force(const vbm_temporal *m, const double *y, int T, double *qb_out)
{
    const temporal_exp *e = &m->ex;
    int D = e->D, P = e->P, Q = e->Q, K = e->K, n = T * K, nb = T * P;
    double *L = calloc((size_t)n * n, sizeof(double)), *h = calloc(n, sizeof(double));
    double *wry = calloc((size_t)T * K, sizeof(double)),
           *lz = calloc((size_t)1 << nb, sizeof(double));
    double c = 0.0, mx = -INFINITY, tot = 0.0;

    for (int t = 0; t < T; t++)
        for (int i = 0; i < K; i++)
            for (int d = 0; d < D; d++)
                wry[t * K + i] += e->Wr[d * K + i] * y[t * D + d];
    for (int t = 0; t < T; t++) {
        c += -0.5 * D * log(2 * M_PI);
        for (int d = 0; d < D; d++)
            c += 0.5 * e->elogrho[d] - 0.5 * e->rho[d] * y[t * D + d] * y[t * D + d];
        for (int k = 0; k < K; k++)
            c += t == 0 ? -0.5 * log(2 * M_PI * e->sigma_a2)
                        : -0.5 * log(2 * M_PI) - 0.5 * e->elog[k];
    }
    for (long cfg = 0; cfg < (1L << nb); cfg++) {
        double v = c, q;
#define BIT(t, p) ((int)((cfg >> ((t)*P + (p))) & 1))
        memset(L, 0, sizeof(double) * n * n);
        memset(h, 0, sizeof(double) * n);
        for (int p = 0; p < P; p++) {
            v += e->logpi[BIT(0, p)];
            for (int t = 1; t < T; t++)
                v += e->elogT[2 * BIT(t - 1, p) + BIT(t, p)];
        }
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                int r = t * K + k;
                L[r * n + r] +=
                    (t == 0 ? 1.0 / e->sigma_a2 : e->einv[k]) + (t < T - 1 ? e->elam2[k] : 0.0);
                if (t > 0) {
                    L[r * n + r - K] -= e->elam[k];
                    L[(r - K) * n + r] -= e->elam[k];
                }
                if (BIT(t, k / Q)) {
                    h[r] += wry[t * K + k];
                    for (int j = 0; j < K; j++)
                        if (BIT(t, j / Q))
                            L[r * n + t * K + j] += e->M[k * K + j];
                }
            }
        ck_assert_int_eq(la_chol(n, L), 0);
        q = 0.0;
        {
            double *x = malloc(sizeof(double) * n);
            memcpy(x, h, sizeof(double) * n);
            la_chol_solve(n, 1, L, x, 1);
            for (int i = 0; i < n; i++)
                q += h[i] * x[i];
            free(x);
        }
        v += 0.5 * n * log(2 * M_PI) - 0.5 * la_chol_logdet(n, L) + 0.5 * q;
        lz[cfg] = v;
        mx = fmax(mx, v);
    }
    for (long cfg = 0; cfg < (1L << nb); cfg++)
        tot += exp(lz[cfg] - mx);
    memset(qb_out, 0, sizeof(double) * nb);
    for (long cfg = 0; cfg < (1L << nb); cfg++)
        for (int t = 0; t < T; t++)
            for (int p = 0; p < P; p++)
                if (BIT(t, p))
                    qb_out[t * P + p] += exp(lz[cfg] - mx) / tot;
#undef BIT
    free(L);
    free(h);
    free(wry);
    free(lz);
    return mx + log(tot);
}

/* A memory fitted to data of the given shape, and a query of T frames from the same truth. */
static vbm_temporal *fitted(int D, int P, int Q, double **query, int T, uint64_t seed)
{
    double lam[4] = {0.8, 0.4, 0.6, 0.3};
    truth_t tr;
    vbm_sequence s;
    vbm_temporal *m = make(D, P, Q);
    vbm_temporal_opts o;
    vbm_error err;

    truth_init(&tr, D, P, Q, lam, 0.3, 0.3, 0.5, seed);
    s.T = 100;
    s.D = D;
    s.y = truth_draw(&tr, 100, seed + 1);
    vbm_temporal_opts_default(&o);
    o.iterations = 30;
    ck_assert_msg(vbm_temporal_write(m, &s, 1, &o, NULL, &err) == VBM_OK, "%s", err.msg);
    free((void *)s.y);
    *query = truth_draw(&tr, T, seed + 2);
    truth_free(&tr);
    return m;
}

START_TEST(vbe_matches_brute_force)
{
    vbm_error err;
    double qb[16], qx[16], a[64], fe, lz;
    double *y;

    /* one frame, one identity (two attributes): eq. 18 factorises nothing, so the VBE optimum
     * (eq. 39-46) is the exact one: equal marginal and equal free energy */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        vbm_temporal *m = fitted(5, 1, 2, &y, 1, seed);
        vbm_sequence q = {1, 5, y};
        ck_assert_msg(vbm_temporal_infer(m, &q, 3, qb, a, &fe, &err) == VBM_OK, "%s", err.msg);
        lz = brute_force(m, y, 1, qx);
        fprintf(stderr, "brute force T=1 P=1: q(b) %.12f vs %.12f, F %.12f vs %.12f\n", qb[0],
                qx[0], fe, lz);
        ck_assert_msg(fabs(qb[0] - qx[0]) < 1e-9, "q(b) %.15g vs %.15g", qb[0], qx[0]);
        ck_assert_msg(fabs(fe - lz) < 1e-9 * fabs(lz), "F %.15g vs %.15g", fe, lz);
        free(y);
        vbm_temporal_free(m);
    }
    /* four frames, two identities: 2^8 configurations. The mean-field optimum is a lower
     * bound on the exact one, and its marginals are close to the exact ones */
    for (uint64_t seed = 4; seed <= 6; seed++) {
        vbm_temporal *m = fitted(6, 2, 1, &y, 4, seed);
        vbm_sequence q = {4, 6, y};
        double md = 0.0;
        ck_assert_msg(vbm_temporal_infer(m, &q, 200, qb, a, &fe, &err) == VBM_OK, "%s", err.msg);
        lz = brute_force(m, y, 4, qx);
        for (int i = 0; i < 8; i++)
            md = fmax(md, fabs(qb[i] - qx[i]));
        fprintf(stderr, "brute force T=4 P=2: max |q(b) - q*(b)| %.4f, F %.6f <= %.6f\n", md, fe,
                lz);
        ck_assert_msg(fe <= lz + 1e-9 * fabs(lz), "F %.15g above the exact %.15g", fe, lz);
        ck_assert_msg(lz - fe < 0.05 * fabs(lz), "F %.15g far below the exact %.15g", fe, lz);
        ck_assert_msg(md < 0.1, "marginals differ by %g", md);
        /* the eq. 19 factorisation (chains by forward-backward and the Kalman smoother) under
         * the same q(Theta): also a bound, also close */
        m->cfg.vbe_temporal = 1;
        ck_assert_msg(vbm_temporal_infer(m, &q, 200, qb, a, &fe, &err) == VBM_OK, "%s", err.msg);
        md = 0.0;
        for (int i = 0; i < 8; i++)
            md = fmax(md, fabs(qb[i] - qx[i]));
        fprintf(stderr, "brute force T=4 P=2, eq. 19: max |q(b) - q*(b)| %.4f, F %.6f <= %.6f\n",
                md, fe, lz);
        ck_assert_msg(fe <= lz + 1e-9 * fabs(lz), "F %.15g above the exact %.15g", fe, lz);
        ck_assert_msg(lz - fe < 0.1 * fabs(lz), "F %.15g far below the exact %.15g", fe, lz);
        free(y);
        vbm_temporal_free(m);
    }
    /* one identity with two attributes over six frames, eq. 19, with <log T> and log pi0 set
     * so that b = 1 at every frame is certain (the other 63 paths have weight e^-700): then
     * q(a_{1:6}) of the Kalman smoother is the exact posterior of a, and F equals the
     * brute-force optimum; this checks the smoother's means, covariances, lag-one
     * covariances and log-determinant, and eq. 19's free energy */
    for (uint64_t seed = 7; seed <= 9; seed++) {
        vbm_temporal *m = fitted(5, 1, 2, &y, 6, seed);
        vbm_sequence q = {6, 5, y};
        m->cfg.vbe_temporal = 1;
        m->ex.logpi[0] = -700.0;
        m->ex.logpi[1] = 0.0;
        m->ex.elogT[0] = m->ex.elogT[2] = -700.0;
        m->ex.elogT[1] = m->ex.elogT[3] = 0.0;
        ck_assert_msg(vbm_temporal_infer(m, &q, 3, qb, a, &fe, &err) == VBM_OK, "%s", err.msg);
        lz = brute_force(m, y, 6, qx);
        fprintf(stderr, "brute force T=6 P=1 Q=2, b certain, eq. 19: F %.12f vs %.12f\n", fe, lz);
        ck_assert_msg(fabs(fe - lz) < 1e-9 * fabs(lz), "F %.15g vs %.15g", fe, lz);
        for (int t = 0; t < 6; t++)
            ck_assert(qb[t] == 1.0);
        free(y);
        vbm_temporal_free(m);
    }
}
END_TEST

/* The latent free energy of seq under m after sweeps eq. 18 sweeps from q(b) = 1/2; with
 * structured non-zero, in the structured form of eq. 18 from the start. */
static double eq18_fe(const vbm_temporal *m, const vbm_sequence *q, int sweeps, int structured)
{
    tseq s;
    vbm_error err;
    double scr[64], F;

    ck_assert_msg(temporal_seq_init(&s, m, q, 0, &err) == VBM_OK, "%s", err.msg);
    temporal_seq_data(&s, &m->ex);
    if (structured)
        ck_assert_msg(temporal_seq_bchain(&s, m->P, &err) == VBM_OK, "%s", err.msg);
    for (int i = 0; i < sweeps; i++)
        ck_assert_msg(temporal_seq_sweep(&m->ex, &s, i % 2, scr, &err) == VBM_OK, "%s", err.msg);
    F = temporal_seq_fe(&m->ex, &s);
    temporal_seq_free(&s);
    return F;
}

START_TEST(structured_inference_exact_without_coupling)
{
    vbm_error err;
    double qb[8], qx[8], a[16], fe, lz, fmf;
    double *y;

    /* one identity over six frames with the AR(1) coupling of a switched off (<lambda / (1 -
     * lambda^2)> = 0): the exact posterior is then a chain over b times q(a_t | b_t), the
     * structured form that inference uses, so its q(b) and F equal the brute-force optimum
     * (the eq. 18 sites, one q(b_t) each, stay below it) */
    for (uint64_t seed = 10; seed <= 12; seed++) {
        vbm_temporal *m = fitted(5, 1, 2, &y, 6, seed);
        vbm_sequence q = {6, 5, y};
        double md = 0.0;
        for (int k = 0; k < m->K; k++)
            m->ex.elam[k] = 0.0;
        ck_assert_msg(vbm_temporal_infer(m, &q, 20, qb, a, &fe, &err) == VBM_OK, "%s", err.msg);
        lz = brute_force(m, y, 6, qx);
        fmf = eq18_fe(m, &q, 20, 0);
        for (int t = 0; t < 6; t++)
            md = fmax(md, fabs(qb[t] - qx[t]));
        fprintf(stderr,
                "brute force T=6 P=1 Q=2, no AR coupling: max |q(b) - q*(b)| %.2g, F %.12f vs "
                "%.12f (eq. 18 sites %.6f)\n",
                md, fe, lz, fmf);
        ck_assert_msg(md < 1e-9, "q(b) differs from the exact by %g", md);
        ck_assert_msg(fabs(fe - lz) < 1e-9 * fabs(lz), "F %.15g vs %.15g", fe, lz);
        ck_assert_msg(fmf < lz - 1e-6, "eq. 18 sites %.15g reach the exact %.15g", fmf, lz);
        free(y);
        vbm_temporal_free(m);
    }
}
END_TEST

START_TEST(structured_inference_free_energy_never_decreases)
{
    vbm_error err;
    double *y, scr[64];

    /* three identities, 80 frames: turning converged eq. 18 sites into the structured form
     * keeps the free energy (the chains' pair marginals are the products), and every later
     * sweep of the structured form raises it or leaves it */
    for (uint64_t seed = 20; seed <= 22; seed++) {
        vbm_temporal *m = fitted(8, 3, 1, &y, 80, seed);
        vbm_sequence q = {80, 8, y};
        tseq s;
        double F0, F1, Fs = eq18_fe(m, &q, 30, 0);
        ck_assert_msg(temporal_seq_init(&s, m, &q, 0, &err) == VBM_OK, "%s", err.msg);
        temporal_seq_data(&s, &m->ex);
        for (int i = 0; i < 30; i++)
            ck_assert_msg(temporal_seq_sweep(&m->ex, &s, i % 2, scr, &err) == VBM_OK, "%s",
                          err.msg);
        F0 = temporal_seq_fe(&m->ex, &s);
        ck_assert(F0 == Fs);
        ck_assert_msg(temporal_seq_bchain(&s, m->P, &err) == VBM_OK, "%s", err.msg);
        F1 = temporal_seq_fe(&m->ex, &s);
        ck_assert_msg(fabs(F1 - F0) < 1e-10 * fabs(F0), "F %.15g, structured %.15g", F0, F1);
        for (int i = 0; i < 30; i++) {
            double F2;
            ck_assert_msg(temporal_seq_sweep(&m->ex, &s, i % 2, scr, &err) == VBM_OK, "%s",
                          err.msg);
            F2 = temporal_seq_fe(&m->ex, &s);
            ck_assert_msg(F2 >= F1 - 1e-10 * fabs(F1), "sweep %d: F %.15g -> %.15g", i, F1, F2);
            F1 = F2;
        }
        fprintf(stderr, "structured inference P=3 T=80: F eq. 18 sites %.6f, structured %.6f\n", F0,
                F1);
        temporal_seq_free(&s);
        free(y);
        vbm_temporal_free(m);
    }
}
END_TEST

/* ---- ancestral sampling ---- */

START_TEST(samples_follow_the_posterior)
{
    /* a memory fitted to plenty of data (q(Theta) concentrated), then one long sample: its
     * transition frequencies, the lag-one autocorrelation of its attributes and its noise
     * variance match the posterior means */
    double lam[2] = {0.8, 0.3}, Tm[4], lm[2], rho[6], W[12];
    truth_t tr;
    vbm_sequence s[4];
    vbm_temporal *m = make(6, 2, 1);
    vbm_temporal_opts o;
    vbm_error err;
    long Ts = 20000;
    double *y = malloc(sizeof(double) * Ts * 6), *a = malloc(sizeof(double) * Ts * 2);
    int *b = malloc(sizeof(int) * Ts * 2);
    double n[4] = {0, 0, 0, 0}, res = 0.0;

    truth_init(&tr, 6, 2, 1, lam, 0.2, 0.1, 0.5, 3);
    for (int i = 0; i < 4; i++) {
        s[i].T = 300;
        s[i].D = 6;
        s[i].y = truth_draw(&tr, 300, 300 + i);
    }
    vbm_temporal_opts_default(&o);
    o.iterations = 60;
    ck_assert_msg(vbm_temporal_write(m, s, 4, &o, NULL, &err) == VBM_OK, "%s", err.msg);
    vbm_temporal_posterior(m, W, NULL, Tm, lm, rho);
    ck_assert_msg(vbm_temporal_sample(m, Ts, 9, y, b, a, &err) == VBM_OK, "%s", err.msg);
    for (long t = 1; t < Ts; t++)
        for (int p = 0; p < 2; p++)
            n[2 * b[(t - 1) * 2 + p] + b[t * 2 + p]] += 1.0;
    for (int r = 0; r < 2; r++) {
        /* T is drawn once from q(T): three standard deviations of that draw (Beta) and of
         * the frequency over the sample's transitions */
        double f1 = n[2 * r + 1] / (n[2 * r] + n[2 * r + 1]), u0 = m->ut[2 * r],
               u1 = m->ut[2 * r + 1];
        double vq = u0 * u1 / ((u0 + u1) * (u0 + u1) * (u0 + u1 + 1.0));
        double tol = 3.0 * sqrt(vq + f1 * (1.0 - f1) / (n[2 * r] + n[2 * r + 1]));
        fprintf(stderr, "sample: P(1 | %d) %.4f vs E[T] %.4f (tolerance %.4f)\n", r, f1,
                Tm[2 * r + 1], tol);
        ck_assert_msg(fabs(f1 - Tm[2 * r + 1]) < tol, "transition %d: %g vs %g", r, f1,
                      Tm[2 * r + 1]);
    }
    for (int k = 0; k < 2; k++) {
        double c = 0.0, v = 0.0;
        for (long t = 1; t < Ts; t++) {
            c += a[t * 2 + k] * a[(t - 1) * 2 + k];
            v += a[(t - 1) * 2 + k] * a[(t - 1) * 2 + k];
        }
        /* lambda is drawn once from q(lambda) (on its grid): its variance there, and that of
         * the estimate over the sample */
        double mx = -INFINITY, z = 0.0, m1 = 0.0, m2 = 0.0, tol;
        const double *th = m->lam + 4 * k;
        for (int i = 0; i < m->G; i++) {
            const double *ph = m->phi + 4 * i;
            mx = fmax(mx, th[0] * ph[0] + th[1] * ph[1] + th[2] * ph[2] + th[3] * ph[3]);
        }
        for (int i = 0; i < m->G; i++) {
            const double *ph = m->phi + 4 * i;
            double w = exp(th[0] * ph[0] + th[1] * ph[1] + th[2] * ph[2] + th[3] * ph[3] - mx);
            z += w;
            m1 += w * m->grid[i];
            m2 += w * m->grid[i] * m->grid[i];
        }
        m1 /= z;
        m2 /= z;
        tol = 3.0 * sqrt(m2 - m1 * m1 + (1.0 - m1 * m1) / (double)Ts);
        fprintf(stderr, "sample: lag-one correlation %.4f vs E[lambda] %.4f (tolerance %.4f)\n",
                c / v, lm[k], tol);
        ck_assert_msg(fabs(c / v - lm[k]) < tol, "lambda %d: %g vs %g", k, c / v, lm[k]);
    }
    /* the residual y - W x with the posterior-mean W: noise variance 1 / E[rho] (up to the
     * draw of W from q(W), small here) */
    for (long t = 0; t < Ts; t++)
        for (int d = 0; d < 6; d++) {
            double v = y[t * 6 + d];
            for (int k = 0; k < 2; k++)
                v -= b[t * 2 + k] * W[d * 2 + k] * a[t * 2 + k];
            res += v * v * rho[d];
        }
    res /= (double)Ts * 6;
    fprintf(stderr, "sample: residual variance x E[rho] %.4f\n", res);
    ck_assert_msg(fabs(res - 1.0) < 0.1, "residual %g", res);
    /* equal seeds, equal samples */
    {
        double *y2 = malloc(sizeof(double) * 100 * 6);
        ck_assert(vbm_temporal_sample(m, 100, 9, y2, NULL, NULL, &err) == VBM_OK);
        ck_assert(memcmp(y, y2, sizeof(double) * 100 * 6) == 0);
        free(y2);
    }
    ck_assert_int_eq(vbm_temporal_sample(m, 0, 9, y, NULL, NULL, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "T");
    for (int i = 0; i < 4; i++)
        free((void *)s[i].y);
    free(y);
    free(a);
    free(b);
    truth_free(&tr);
    vbm_temporal_free(m);
}
END_TEST

/* ---- bad input ---- */

static void expect_fail(vbm_status st, vbm_status want, const vbm_error *err, const char *field)
{
    ck_assert_int_eq(st, want);
    ck_assert_str_eq(err->field, field);
}

START_TEST(bad_input_rejected)
{
    vbm_temporal_config c;
    vbm_temporal *m = NULL;
    vbm_temporal_opts o;
    vbm_temporal_trace tc = {7, NULL};
    vbm_error err;
    double y[12] = {0}, qb[4];

    vbm_temporal_config_default(0, 2, &c);
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "code_size");
    ck_assert_ptr_null(m);
    vbm_temporal_config_default(3, 65, &c);
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "components");
    vbm_temporal_config_default(3, 2, &c);
    c.attributes = 17;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "attributes");
    vbm_temporal_config_default(3, 2, &c);
    c.pi0 = 1.0;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "pi0");
    vbm_temporal_config_default(3, 2, &c);
    c.u_T[1][0] = -1;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "u_T[1][0]");
    vbm_temporal_config_default(3, 2, &c);
    c.lam_g = NAN;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "lam_g");
    vbm_temporal_config_default(3, 2, &c);
    c.lambda_grid = 3;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "lambda_grid");
    vbm_temporal_config_default(3, 2, &c);
    c.rho_e = 0;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "rho_e");
    vbm_temporal_config_default(3, 2, &c);
    c.gamma_max = 0.5;
    expect_fail(vbm_temporal_create(&c, &m, &err), VBM_EINVAL, &err, "gamma_max");

    m = make(3, 2, 1);
    vbm_sequence s[2] = {{4, 3, y}, {0, 3, y}};
    expect_fail(vbm_temporal_write(m, s, 2, NULL, &tc, &err), VBM_EINVAL, &err, "sequences[1].T");
    ck_assert_int_eq(tc.iterations, 0);
    ck_assert_ptr_null(tc.free_energy);
    s[1].T = 2;
    s[1].D = 4;
    expect_fail(vbm_temporal_write(m, s, 2, NULL, NULL, &err), VBM_EINVAL, &err, "sequences[1].D");
    s[1].D = 3;
    s[1].y = NULL;
    expect_fail(vbm_temporal_write(m, s, 2, NULL, NULL, &err), VBM_EINVAL, &err, "sequences[1].y");
    s[1].y = y;
    y[5] = INFINITY;
    expect_fail(vbm_temporal_write(m, s, 2, NULL, NULL, &err), VBM_EINVAL, &err,
                "sequences[0].y[1][2]");
    y[5] = 0.0;
    expect_fail(vbm_temporal_write(m, s, 0, NULL, NULL, &err), VBM_EINVAL, &err, "sequences");
    vbm_temporal_opts_default(&o);
    o.sweeps = 0;
    expect_fail(vbm_temporal_write(m, s, 2, &o, NULL, &err), VBM_EINVAL, &err, "sweeps");
    vbm_temporal_opts_default(&o);
    o.restarts = 0;
    expect_fail(vbm_temporal_write(m, s, 2, &o, NULL, &err), VBM_EINVAL, &err, "restarts");
    vbm_temporal_opts_default(&o);
    o.start = 3;
    expect_fail(vbm_temporal_write(m, s, 2, &o, NULL, &err), VBM_EINVAL, &err, "start");
    vbm_temporal_opts_default(&o);
    o.warm_start = 2;
    expect_fail(vbm_temporal_write(m, s, 2, &o, NULL, &err), VBM_EINVAL, &err, "warm_start");
    vbm_temporal_opts_default(&o);
    o.tol = -1;
    expect_fail(vbm_temporal_write(m, s, 2, &o, NULL, &err), VBM_EINVAL, &err, "tol");
    expect_fail(vbm_temporal_infer(m, &s[0], 0, qb, NULL, NULL, &err), VBM_EINVAL, &err, "sweeps");
    s[0].D = 2;
    expect_fail(vbm_temporal_infer(m, &s[0], 1, qb, NULL, NULL, &err), VBM_EINVAL, &err,
                "sequence.D");
    /* all-zero codes are valid input: the fit runs and F is finite */
    s[0].D = 3;
    vbm_temporal_opts_default(&o);
    o.iterations = 5;
    ck_assert_msg(vbm_temporal_write(m, s, 2, &o, &tc, &err) == VBM_OK, "%s", err.msg);
    ck_assert(isfinite(tc.free_energy[4]));
    vbm_temporal_trace_free(&tc);
    vbm_temporal_free(m);
    vbm_temporal_free(NULL);
}
END_TEST

/* ---- append: sequences one by one against all at once ---- */

/* The memory after writing seqs[0] and appending seqs[1..n) one by one (iters each), with the
 * appends' traces checked to never decrease and to end at vbm_temporal_free_energy. */
static vbm_temporal *write_then_append(int D, int P, int Q, const vbm_sequence *s, int n, int iters,
                                       int temporal)
{
    vbm_temporal *m = make_vbe(D, P, Q, temporal);
    vbm_temporal_opts o;
    vbm_temporal_trace tc;
    vbm_error err;

    vbm_temporal_opts_default(&o);
    o.iterations = iters;
    o.restarts = 2;
    ck_assert_msg(vbm_temporal_write(m, s, 1, &o, NULL, &err) == VBM_OK, "%s", err.msg);
    for (int i = 1; i < n; i++) {
        double before = vbm_temporal_free_energy(m);
        ck_assert_msg(vbm_temporal_append(m, &s[i], 1, &o, &tc, &err) == VBM_OK, "%s", err.msg);
        ck_assert_int_eq(tc.iterations, iters);
        for (int it = 1; it < tc.iterations; it++) {
            double a = tc.free_energy[it - 1], b = tc.free_energy[it];
            ck_assert_msg(b >= a - 1e-9 * fabs(a), "append %d: F decreased at %d: %.12g -> %.12g",
                          i, it, a, b);
        }
        ck_assert_msg(fabs(vbm_temporal_free_energy(m) - tc.free_energy[iters - 1])
                          <= 1e-9 * fabs(tc.free_energy[iters - 1]),
                      "free energy %.12g, trace %.12g", vbm_temporal_free_energy(m),
                      tc.free_energy[iters - 1]);
        /* the append counts the earlier sequences: F falls by about their share */
        ck_assert(tc.free_energy[iters - 1] < before);
        vbm_temporal_trace_free(&tc);
    }
    return m;
}

static void append_vs_batch(int temporal, double *dF, double *dT, double *drho, double *sinW,
                            double *eTb, double *eTa)
{
    enum { D = 8, P = 2, Q = 1, N = 4 };
    const long T = 100;
    double lam[2] = {0.9, 0.7}, Tb[4], Ta[4], rb[D], ra[D], Wb[D * P], Wa[D * P];
    long seqs_a = 0, frames_a = 0;
    truth_t tr;
    vbm_sequence s[N];
    vbm_temporal *batch = make_vbe(D, P, Q, temporal), *app;
    vbm_temporal_opts o;
    vbm_error err;

    truth_init(&tr, D, P, Q, lam, 0.1, 0.15, 0.3, 31);
    for (int i = 0; i < N; i++) {
        s[i].T = T;
        s[i].D = D;
        s[i].y = truth_draw(&tr, T, 3100 + i);
    }
    vbm_temporal_opts_default(&o);
    o.iterations = 60;
    o.restarts = 2;
    ck_assert_msg(vbm_temporal_write(batch, s, N, &o, NULL, &err) == VBM_OK, "%s", err.msg);
    app = write_then_append(D, P, Q, s, N, 60, temporal);
    vbm_temporal_summary(app, NULL, &seqs_a, &frames_a, NULL);
    ck_assert_int_eq(seqs_a, N);
    ck_assert_int_eq(frames_a, N * T);
    *dF = (vbm_temporal_free_energy(batch) - vbm_temporal_free_energy(app)) / (double)(N * T);
    vbm_temporal_posterior(batch, Wb, NULL, Tb, NULL, rb);
    vbm_temporal_posterior(app, Wa, NULL, Ta, NULL, ra);
    *dT = 0.0;
    for (int i = 0; i < 4; i++)
        *dT = fmax(*dT, fabs(Tb[i] - Ta[i]));
    *drho = 0.0;
    for (int d = 0; d < D; d++)
        *drho = fmax(*drho, fabs(ra[d] / rb[d] - 1.0));
    *sinW = subspace_sin(D, P, Wb, P, Wa, P);
    *eTb = *eTa = 0.0; /* against the generating transition matrix */
    for (int i = 0; i < 4; i++) {
        *eTb = fmax(*eTb, fabs(Tb[i] - tr.T[i]));
        *eTa = fmax(*eTa, fabs(Ta[i] - tr.T[i]));
    }
    for (int i = 0; i < N; i++)
        free((void *)s[i].y);
    truth_free(&tr);
    vbm_temporal_free(batch);
    vbm_temporal_free(app);
}

START_TEST(appends_land_near_one_write)
{
    for (int temporal = 0; temporal < 2; temporal++) {
        double dF, dT, drho, sinW, eTb, eTa;
        append_vs_batch(temporal, &dF, &dT, &drho, &sinW, &eTb, &eTa);
        fprintf(stderr,
                "append vs batch (eq. %d): F/frame batch - appends %.4f, max |dT| %.4f, "
                "max |rho ratio - 1| %.4f, subspace sin %.4f; T error vs the truth: batch %.4f, "
                "appends %.4f\n",
                temporal ? 19 : 18, dF, dT, drho, sinW, eTb, eTa);
        if (temporal)
            continue; /* eq. 19: printed only (its batch fits recover worse: docs/design) */
        ck_assert_msg(fabs(dF) < 0.2, "F per frame differs by %g", dF);
        ck_assert_msg(dT < 0.06, "transition matrices differ by %g", dT);
        ck_assert_msg(drho < 0.1, "noise precisions differ by %g", drho);
        ck_assert_msg(sinW < 0.02, "W subspaces differ: sin %g", sinW);
    }
}
END_TEST

/* An append is not a write of the new sequence alone: with the earlier data kept, the posterior
 * differs from a write of the last sequence (its frame count shows it, and q(T) carries the
 * transitions of all sequences). */
START_TEST(append_keeps_earlier_sequences)
{
    enum { D = 6, P = 1, Q = 1 };
    double lam[1] = {0.8}, Tw[4], Ta[4];
    truth_t tr;
    vbm_sequence s[2];
    vbm_temporal *a = make(D, P, Q), *w = make(D, P, Q), *e = make(D, P, Q);
    vbm_temporal_opts o;
    vbm_temporal_trace tc;
    vbm_error err;
    long fr;

    truth_init(&tr, D, P, Q, lam, 0.2, 0.2, 0.3, 41);
    for (int i = 0; i < 2; i++) {
        s[i].T = 60;
        s[i].D = D;
        s[i].y = truth_draw(&tr, 60, 4100 + i);
    }
    vbm_temporal_opts_default(&o);
    o.iterations = 20;
    /* an append to an empty memory is a write */
    ck_assert(vbm_temporal_append(e, &s[0], 1, &o, NULL, &err) == VBM_OK);
    ck_assert(vbm_temporal_write(a, &s[0], 1, &o, NULL, &err) == VBM_OK);
    ck_assert(vbm_temporal_free_energy(a) == vbm_temporal_free_energy(e));
    ck_assert(vbm_temporal_append(a, &s[1], 1, &o, &tc, &err) == VBM_OK);
    vbm_temporal_trace_free(&tc);
    ck_assert(vbm_temporal_write(w, &s[1], 1, &o, NULL, &err) == VBM_OK);
    vbm_temporal_summary(a, NULL, NULL, &fr, NULL);
    ck_assert_int_eq(fr, 120);
    vbm_temporal_summary(w, NULL, NULL, &fr, NULL);
    ck_assert_int_eq(fr, 60);
    vbm_temporal_posterior(a, NULL, NULL, Ta, NULL, NULL);
    vbm_temporal_posterior(w, NULL, NULL, Tw, NULL, NULL);
    /* pseudo-counts of q(T) are 4 + transitions: 118 against 59 (E[T] is a ratio, so look at
     * the free energy's scale instead: twice the frames, about twice the |F|) */
    ck_assert_msg(vbm_temporal_free_energy(a) < 1.5 * vbm_temporal_free_energy(w), "F %g vs %g",
                  vbm_temporal_free_energy(a), vbm_temporal_free_energy(w));
    for (int i = 0; i < 2; i++)
        free((void *)s[i].y);
    truth_free(&tr);
    vbm_temporal_free(a);
    vbm_temporal_free(w);
    vbm_temporal_free(e);
}
END_TEST

/* ---- continuation of a prefix ---- */

static vbm_temporal *fit_truth(const truth_t *tr, int temporal, int nseq, long T, uint64_t seed)
{
    vbm_sequence *s = calloc(nseq, sizeof *s);
    vbm_temporal *m = make_vbe(tr->D, tr->P, tr->Q, temporal);
    vbm_temporal_opts o;
    vbm_error err;

    for (int i = 0; i < nseq; i++) {
        s[i].T = T;
        s[i].D = tr->D;
        s[i].y = truth_draw(tr, T, seed + i);
    }
    vbm_temporal_opts_default(&o);
    o.iterations = 60;
    o.restarts = 2;
    ck_assert_msg(vbm_temporal_write(m, s, nseq, &o, NULL, &err) == VBM_OK, "%s", err.msg);
    for (int i = 0; i < nseq; i++)
        free((void *)s[i].y);
    free(s);
    return m;
}

/* What appends rely on: a sequence's latent free energy is its statistics' q(Theta) part
 * (temporal_stats_fe) plus a part that does not depend on q(Theta). Checked exactly with one
 * q(B, A) under two different posteriors (eq. 18 and eq. 19), and falsifiable: the q(Theta)
 * parts differ by far more than the tolerance. */
START_TEST(free_energy_splits_into_statistics)
{
    enum { D = 5, P = 2, Q = 2 };
    double lam[4] = {0.9, 0.5, 0.7, 0.3};
    truth_t tr;

    truth_init(&tr, D, P, Q, lam, 0.1, 0.2, 0.3, 91);
    for (int temporal = 0; temporal < 2; temporal++) {
        vbm_temporal *m1 = fit_truth(&tr, temporal, 1, 40, 9100);
        vbm_temporal *m2 = fit_truth(&tr, temporal, 2, 40, 9200);
        vbm_sequence q = {30, D, truth_draw(&tr, 30, 9300)};
        double out[4], c1, c2;
        vbm_error err;
        ck_assert_msg(temporal_fe_split(m1, m2, &q, 4, out, &err) == VBM_OK, "%s", err.msg);
        c1 = out[0] - out[1];
        c2 = out[2] - out[3];
        fprintf(stderr, "split (eq. %d): const %.12g vs %.12g; q(Theta) parts %.6g vs %.6g\n",
                temporal ? 19 : 18, c1, c2, out[1], out[3]);
        ck_assert_msg(fabs(c1 - c2) <= 1e-9 * (fabs(c1) + fabs(out[1])), "%.12g vs %.12g", c1, c2);
        ck_assert(fabs(out[1] - out[3]) > 1.0);
        free((void *)q.y);
        vbm_temporal_free(m1);
        vbm_temporal_free(m2);
    }
    truth_free(&tr);
}
END_TEST

/* The predictive mean against the average of sampled continuations (two computations of the
 * same expectation), and the same seed giving the same samples. */
START_TEST(continuation_mean_matches_its_samples)
{
    enum { D = 6, P = 2, Q = 1, NS = 3000, H = 4 };
    double lam[2] = {0.9, 0.6};
    truth_t tr;

    truth_init(&tr, D, P, Q, lam, 0.1, 0.2, 0.3, 51);
    for (int temporal = 0; temporal < 2; temporal++) {
        vbm_temporal *m = fit_truth(&tr, temporal, 2, 100, 5100);
        vbm_sequence pre = {40, D, truth_draw(&tr, 40, 5200)};
        double mean[H * D], qb[H * P], *smp = malloc(sizeof(double) * NS * H * D),
                                       *smp2 = malloc(sizeof(double) * 2 * H * D), worst = 0.0;
        vbm_error err;

        ck_assert_msg(vbm_temporal_continue(m, &pre, H, 4, 7, NS, mean, qb, smp, &err) == VBM_OK,
                      "%s", err.msg);
        for (int i = 0; i < H * P; i++)
            ck_assert(qb[i] >= 0.0 && qb[i] <= 1.0);
        for (int i = 0; i < H * D; i++) {
            double s1 = 0.0, s2 = 0.0, mu, sd, z;
            for (int j = 0; j < NS; j++) {
                double v = smp[(size_t)j * H * D + i];
                s1 += v;
                s2 += v * v;
            }
            mu = s1 / NS;
            sd = sqrt((s2 / NS - mu * mu) / NS);
            z = fabs(mu - mean[i]) / sd;
            worst = fmax(worst, z);
        }
        fprintf(stderr, "continuation (eq. %d): worst |sample mean - mean| / se = %.2f\n",
                temporal ? 19 : 18, worst);
        ck_assert_msg(worst < 4.5, "sample mean %g standard errors from the predictive mean",
                      worst);
        /* seeded: the first two samples again, bit for bit */
        ck_assert(vbm_temporal_continue(m, &pre, H, 4, 7, 2, mean, NULL, smp2, &err) == VBM_OK);
        ck_assert(memcmp(smp, smp2, sizeof(double) * 2 * H * D) == 0);
        ck_assert(vbm_temporal_continue(m, &pre, H, 4, 8, 2, mean, NULL, smp2, &err) == VBM_OK);
        ck_assert(memcmp(smp, smp2, sizeof(double) * 2 * H * D) != 0);
        free(smp);
        free(smp2);
        free((void *)pre.y);
        vbm_temporal_free(m);
    }
    truth_free(&tr);
}
END_TEST

/* The continuation predicts held-out frames: the squared error of the one-step and three-step
 * predictive means, over held-out sequences, against predicting the stationary mean (zero, the
 * model's mean with a_t of mean zero) and against the last frame of the prefix. */
START_TEST(continuation_predicts_held_out_frames)
{
    enum { D = 8, P = 2, Q = 1, NQ = 20, T0 = 30, H = 3 };
    double lam[2] = {0.95, 0.9};
    truth_t tr;
    vbm_temporal *m;
    double e_model[H] = {0}, e_zero[H] = {0}, e_last[H] = {0};

    truth_init(&tr, D, P, Q, lam, 0.05, 0.05, 0.3, 61);
    m = fit_truth(&tr, 0, 4, 100, 6100);
    for (int i = 0; i < NQ; i++) {
        double *y = truth_draw(&tr, T0 + H, 6200 + i), mean[H * D];
        vbm_sequence pre = {T0, D, y};
        vbm_error err;
        ck_assert_msg(vbm_temporal_continue(m, &pre, H, 4, 1, 0, mean, NULL, NULL, &err) == VBM_OK,
                      "%s", err.msg);
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                double v = y[(T0 + h) * D + d];
                e_model[h] += (v - mean[h * D + d]) * (v - mean[h * D + d]);
                e_zero[h] += v * v;
                e_last[h] += (v - y[(T0 - 1) * D + d]) * (v - y[(T0 - 1) * D + d]);
            }
        free(y);
    }
    for (int h = 0; h < H; h++) {
        fprintf(stderr,
                "continuation, step %d: squared error model %.3f, zero %.3f, last frame %.3f "
                "(per frame)\n",
                h + 1, e_model[h] / NQ, e_zero[h] / NQ, e_last[h] / NQ);
        ck_assert_msg(e_model[h] < 0.7 * e_zero[h], "step %d: %g vs zero %g", h + 1, e_model[h],
                      e_zero[h]);
        ck_assert_msg(e_model[h] < e_last[h], "step %d: %g vs last frame %g", h + 1, e_model[h],
                      e_last[h]);
    }
    vbm_temporal_free(m);
    truth_free(&tr);
}
END_TEST

/* ---- export / import ---- */

START_TEST(export_import_is_bit_exact)
{
    enum { D = 5, P = 2, Q = 2 };
    double lam[4] = {0.9, 0.5, 0.7, 0.3};
    truth_t tr;
    unsigned char *b1 = NULL, *b2 = NULL, *bad = NULL, *mb = NULL;
    size_t n1, n2, nm;
    vbm_temporal *m, *c = NULL;
    vbm_memory *mem = NULL;
    vbm_config mc;
    vbm_error err;
    vbm_temporal_opts o;
    vbm_temporal_trace t1, t2;

    truth_init(&tr, D, P, Q, lam, 0.1, 0.2, 0.3, 71);
    for (int temporal = 0; temporal < 2; temporal++) {
        m = fit_truth(&tr, temporal, 1, 50, 7100);
        vbm_sequence more = {30, D, truth_draw(&tr, 30, 7200)};
        double m1[3 * D], m2[3 * D];
        /* an empty memory too */
        vbm_temporal *e = make_vbe(D, P, Q, temporal), *ec = NULL;
        ck_assert(vbm_temporal_export(e, &b1, &n1, &err) == VBM_OK);
        ck_assert_msg(vbm_temporal_import(b1, n1, &ec, &err) == VBM_OK, "%s", err.msg);
        ck_assert(isnan(vbm_temporal_free_energy(ec)));
        free(b1);
        vbm_temporal_free(e);
        vbm_temporal_free(ec);

        ck_assert(vbm_temporal_export(m, &b1, &n1, &err) == VBM_OK);
        ck_assert_msg(vbm_temporal_import(b1, n1, &c, &err) == VBM_OK, "%s", err.msg);
        ck_assert(vbm_temporal_export(c, &b2, &n2, &err) == VBM_OK);
        ck_assert_uint_eq(n1, n2);
        ck_assert(memcmp(b1, b2, n1) == 0);
        free(b2);
        ck_assert(vbm_temporal_free_energy(m) == vbm_temporal_free_energy(c));
        /* the copy behaves the same, bit for bit: a continuation and an append */
        ck_assert(vbm_temporal_continue(m, &more, 3, 3, 1, 0, m1, NULL, NULL, &err) == VBM_OK);
        ck_assert(vbm_temporal_continue(c, &more, 3, 3, 1, 0, m2, NULL, NULL, &err) == VBM_OK);
        ck_assert(memcmp(m1, m2, sizeof m1) == 0);
        vbm_temporal_opts_default(&o);
        o.iterations = 5;
        ck_assert(vbm_temporal_append(m, &more, 1, &o, &t1, &err) == VBM_OK);
        ck_assert(vbm_temporal_append(c, &more, 1, &o, &t2, &err) == VBM_OK);
        ck_assert(memcmp(t1.free_energy, t2.free_energy, sizeof(double) * 5) == 0);
        vbm_temporal_trace_free(&t1);
        vbm_temporal_trace_free(&t2);
        vbm_temporal_free(c);
        c = NULL;

        /* truncated, padded, a non-finite value, a bad kind, a negative variance */
        ck_assert(vbm_temporal_import(b1, n1 - 8, &c, &err) == VBM_EFORMAT);
        ck_assert_ptr_null(c);
        bad = malloc(n1 + 8);
        memcpy(bad, b1, n1);
        memset(bad + n1, 0, 8);
        ck_assert(vbm_temporal_import(bad, n1 + 8, &c, &err) == VBM_EFORMAT);
        memcpy(bad, b1, n1);
        {
            double nan = NAN;
            memcpy(bad + n1 - 8, &nan, 8);
        }
        ck_assert(vbm_temporal_import(bad, n1, &c, &err) == VBM_EFORMAT);
        ck_assert_msg(strstr(err.msg, "non-finite") != NULL, "%s", err.msg);
        memcpy(bad, b1, n1);
        bad[16] = 2; /* kind: mixture */
        ck_assert(vbm_temporal_import(bad, n1, &c, &err) == VBM_EFORMAT);
        ck_assert_msg(strstr(err.msg, "kind 2") != NULL, "%s", err.msg);
        /* a libvbmem memory import refuses a temporal memory, naming it */
        ck_assert(vbm_import(b1, n1, &mem, &err) == VBM_EFORMAT);
        ck_assert_msg(strstr(err.msg, "temporal") != NULL, "%s", err.msg);
        /* and the temporal import refuses a mixture memory */
        vbm_config_default(VBM_MIXTURE, 4, &mc);
        mc.rows = 2;
        mc.clusters = 2;
        ck_assert(vbm_memory_create(&mc, NULL, NULL, &mem, &err) == VBM_OK);
        ck_assert(vbm_export(mem, &mb, &nm, &err) == VBM_OK);
        ck_assert(vbm_temporal_import(mb, nm, &c, &err) == VBM_EFORMAT);
        ck_assert_ptr_null(c);
        free(mb);
        vbm_memory_free(mem);
        mem = NULL;
        free(bad);
        free(b1);
        free((void *)more.y);
        vbm_temporal_free(m);
    }
    truth_free(&tr);
}
END_TEST

START_TEST(bad_continuations_rejected)
{
    double *q, mean[12], nan = NAN;
    vbm_temporal *m = fitted(4, 1, 1, &q, 10, 81);
    vbm_sequence pre = {10, 4, q}, wrong = {10, 3, q}, none = {0, 4, q};
    vbm_error err;

    expect_fail(vbm_temporal_continue(m, &pre, 0, 2, 1, 0, mean, NULL, NULL, &err), VBM_EINVAL,
                &err, "steps");
    expect_fail(vbm_temporal_continue(m, &wrong, 3, 2, 1, 0, mean, NULL, NULL, &err), VBM_EINVAL,
                &err, "prefix.D");
    expect_fail(vbm_temporal_continue(m, &none, 3, 2, 1, 0, mean, NULL, NULL, &err), VBM_EINVAL,
                &err, "prefix.T");
    expect_fail(vbm_temporal_continue(m, &pre, 3, 2, 1, 2, mean, NULL, NULL, &err), VBM_EINVAL,
                &err, "samples");
    expect_fail(vbm_temporal_continue(m, &pre, 3, 0, 1, 0, mean, NULL, NULL, &err), VBM_EINVAL,
                &err, "sweeps");
    q[13] = nan;
    expect_fail(vbm_temporal_continue(m, &pre, 3, 2, 1, 0, mean, NULL, NULL, &err), VBM_EINVAL,
                &err, "prefix.y[3][1]");
    expect_fail(vbm_temporal_append(m, &pre, 1, NULL, NULL, &err), VBM_EINVAL, &err,
                "sequences[0].y[3][1]");
    free(q);
    vbm_temporal_free(m);
}
END_TEST

static Suite *temporal_suite(void)
{
    Suite *s = suite_create("temporal");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, free_energy_never_decreases);
    tcase_add_test(tc, recovers_generating_parameters);
    tcase_add_test(tc, ard_switches_off_unneeded_attributes);
    tcase_add_test(tc, vbe_matches_brute_force);
    tcase_add_test(tc, structured_inference_exact_without_coupling);
    tcase_add_test(tc, structured_inference_free_energy_never_decreases);
    tcase_add_test(tc, samples_follow_the_posterior);
    tcase_add_test(tc, bad_input_rejected);
    tcase_add_test(tc, appends_land_near_one_write);
    tcase_add_test(tc, append_keeps_earlier_sequences);
    tcase_add_test(tc, continuation_mean_matches_its_samples);
    tcase_add_test(tc, continuation_predicts_held_out_frames);
    tcase_add_test(tc, export_import_is_bit_exact);
    tcase_add_test(tc, bad_continuations_rejected);
    tcase_add_test(tc, free_energy_splits_into_statistics);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(temporal_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
