/* temporal_predict.c -- owns what the temporal memory predicts: the continuation of a prefix and
 * ancestral samples of the model under q(Theta). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "memory/temporal.h"
#include "numerics/linalg.h"
#include "numerics/rng.h"

/* ---- continuation of a prefix ---- */

vbm_status vbm_temporal_continue(const vbm_temporal *m, const vbm_sequence *prefix, long n,
                                 int sweeps, uint64_t seed, int nsamples, double *mean, double *qb,
                                 double *samples, vbm_error *err)
{
    int D, P, Q, K;
    long T0, tl;
    tseq s;
    double *scr = NULL, *x = NULL, *pi1 = NULL, *pi0 = NULL, *L = NULL, *a = NULL, *z = NULL;
    int *bt = NULL, have_seq = 0;
    double Tm[4], fpre;
    vbm_status rc = VBM_OK;
    rng_t r;

    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (prefix == NULL)
        return vbm_fail(err, VBM_EINVAL, "prefix", "is NULL");
    if (n < 1 || n > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "steps", "%ld is not in [1, %ld]", n, VBM_MAX_FRAMES);
    if (sweeps < 1 || sweeps > 100000)
        return vbm_fail(err, VBM_EINVAL, "sweeps", "%d is not in [1, 100000]", sweeps);
    if (nsamples < 0 || nsamples > 100000)
        return vbm_fail(err, VBM_EINVAL, "samples", "%d is not in [0, 100000]", nsamples);
    if (mean == NULL)
        return vbm_fail(err, VBM_EINVAL, "mean", "is NULL");
    if (nsamples > 0 && samples == NULL)
        return vbm_fail(err, VBM_EINVAL, "samples", "is NULL");
    if ((rc = temporal_seq_check(m, prefix, "prefix", err)) != VBM_OK)
        return rc;
    D = m->D;
    P = m->P;
    Q = m->Q;
    K = m->K;
    if ((double)n * D * (nsamples + 1) > (double)VBM_MAX_ELEMENTS)
        return vbm_fail(err, VBM_ENOMEM, "steps", "%ld steps of %d samples are too many", n,
                        nsamples);
    /* filter the prefix: q(b_t, a_t) of its last frame under q(Theta) (the last frame of a
     * smoother is its filter) */
    if ((rc = temporal_infer_best(m, prefix, sweeps, 1, &s, &fpre, err)) != VBM_OK)
        return rc;
    have_seq = 1;
    scr = vbm_calloc((size_t)4 * Q * Q + 4 * Q, sizeof(double));
    x = vbm_calloc((size_t)K, sizeof(double));
    pi1 = vbm_calloc((size_t)P, sizeof(double));
    pi0 = vbm_calloc((size_t)P, sizeof(double));
    L = vbm_calloc((size_t)P * 2 * Q * Q, sizeof(double));
    a = vbm_calloc((size_t)K, sizeof(double));
    z = vbm_calloc((size_t)K, sizeof(double));
    bt = vbm_calloc((size_t)P, sizeof(int));
    if (!scr || !x || !pi1 || !pi0 || !L || !a || !z || !bt) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for a continuation");
        goto out;
    }
    T0 = prefix->T;
    tl = T0 - 1;
    /* q(a_T0 | b_T0 = 1), q(a_T0 | b_T0 = 0): means and Cholesky factors of the covariances
     * (eq. 18: N(mu1, S1) and N(mu2, diag(s2)); eq. 19: q(a) is one Gaussian, N(ea, V)) */
    for (int p = 0; p < P; p++)
        for (int bb = 0; bb < 2; bb++) {
            double *Lp = L + ((size_t)p * 2 + bb) * Q * Q;
            if (s.temporal) {
                memcpy(Lp, s.V + ((size_t)tl * P + p) * Q * Q, sizeof(double) * Q * Q);
            } else if (bb == 1) {
                memcpy(Lp, s.S1 + ((size_t)tl * P + p) * Q * Q, sizeof(double) * Q * Q);
            } else {
                memset(Lp, 0, sizeof(double) * Q * Q);
                for (int q = 0; q < Q; q++)
                    Lp[q * Q + q] = s.s2[(size_t)tl * K + p * Q + q];
            }
            if (la_chol(Q, Lp) != 0) {
                rc = vbm_fail(err, VBM_ENUMERIC, "",
                              "the covariance of a_{%ld,%d} is not positive definite", tl, p);
                goto out;
            }
        }
    for (int rr = 0; rr < 2; rr++) {
        double su = m->ut[2 * rr] + m->ut[2 * rr + 1];
        Tm[2 * rr] = m->ut[2 * rr] / su;
        Tm[2 * rr + 1] = m->ut[2 * rr + 1] / su;
    }
    /* the predictive mean: P(b_{T0+h} = 1 | b_T0 = 1 or 0) by the chain, a by E[lambda]^h,
     * y = <W> <b a> */
    for (int p = 0; p < P; p++) {
        pi1[p] = 1.0;
        pi0[p] = 0.0;
    }
    for (long h = 1; h <= n; h++) {
        for (int p = 0; p < P; p++) {
            double q1 = s.q1[tl * P + p], q0 = s.q0[tl * P + p];
            pi1[p] = pi1[p] * Tm[3] + (1.0 - pi1[p]) * Tm[1];
            pi0[p] = pi0[p] * Tm[3] + (1.0 - pi0[p]) * Tm[1];
            if (qb)
                qb[(size_t)(h - 1) * P + p] = q1 * pi1[p] + q0 * pi0[p];
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double m1 = s.temporal ? s.ea[tl * K + k] : s.mu1[tl * K + k];
                double m0 = s.temporal ? s.ea[tl * K + k] : s.mu2[tl * K + k];
                x[k] = pow(m->ex.lmean[k], (double)h) * (q1 * pi1[p] * m1 + q0 * pi0[p] * m0);
            }
        }
        for (int d = 0; d < D; d++) {
            double v = 0.0;
            for (int k = 0; k < K; k++)
                v += m->mw[(size_t)d * K + k] * x[k];
            mean[(size_t)(h - 1) * D + d] = v;
        }
    }
    /* sampled continuations: (b_T0, a_T0) from their filtered q, then the chains, the AR(1)
     * attributes and the noise under the posterior means of T, lambda, W and rho */
    rng_seed(&r, seed);
    for (int j = 0; j < nsamples; j++) {
        double *yj = samples + (size_t)j * n * D;
        for (int p = 0; p < P; p++) {
            const double *Lp;
            bt[p] = rng_uniform(&r) < s.q1[tl * P + p];
            Lp = L + ((size_t)p * 2 + bt[p]) * Q * Q;
            rng_normal_fill(&r, z, Q);
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double v = bt[p] && !s.temporal ? s.mu1[tl * K + k]
                           : s.temporal         ? s.ea[tl * K + k]
                                                : s.mu2[tl * K + k];
                for (int u = 0; u <= q; u++)
                    v += Lp[q * Q + u] * z[u];
                a[k] = v;
            }
        }
        for (long h = 0; h < n; h++) {
            for (int p = 0; p < P; p++) {
                bt[p] = rng_uniform(&r) < Tm[2 * bt[p] + 1];
                for (int q = 0; q < Q; q++) {
                    int k = p * Q + q;
                    double l = m->ex.lmean[k];
                    a[k] = l * a[k] + sqrt((1.0 - l) * (1.0 + l)) * rng_normal(&r);
                }
            }
            for (int d = 0; d < D; d++) {
                double v = rng_normal(&r) / sqrt(m->ex.rho[d]);
                for (int k = 0; k < K; k++)
                    if (bt[k / Q])
                        v += m->mw[(size_t)d * K + k] * a[k];
                yj[(size_t)h * D + d] = v;
            }
        }
    }
out:
    if (have_seq)
        temporal_seq_free(&s);
    free(scr);
    free(x);
    free(pi1);
    free(pi0);
    free(L);
    free(a);
    free(z);
    free(bt);
    return rc;
}

/* ---- ancestral sampling ---- */

/* Gamma(shape a, rate 1) draw (Marsaglia-Tsang; a < 1 through a + 1 and u^(1/a)). */
static double draw_gamma(rng_t *r, double a)
{
    double boost = 1.0, d, c;

    if (a < 1.0) {
        double u = rng_uniform(r);
        boost = pow(u > 0 ? u : 1e-300, 1.0 / a);
        a += 1.0;
    }
    d = a - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x, u;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        u = rng_uniform(r);
        if (u > 0 && log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return boost * d * v;
    }
}

vbm_status vbm_temporal_sample(const vbm_temporal *m, long T, uint64_t seed, double *y, int *b,
                               double *a, vbm_error *err)
{
    int D, P, Q, K;
    double *W = NULL, *L = NULL, *rho = NULL, *lam = NULL, *post = NULL, *z = NULL, *at = NULL;
    int *bt = NULL;
    double Tr[4];
    vbm_status rc = VBM_OK;
    rng_t r;

    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (T < 1 || T > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "T", "%ld is not in [1, %ld]", T, VBM_MAX_FRAMES);
    if (y == NULL)
        return vbm_fail(err, VBM_EINVAL, "y", "is NULL");
    D = m->D;
    P = m->P;
    Q = m->Q;
    K = m->K;
    if ((double)T * D > (double)VBM_MAX_ELEMENTS)
        return vbm_fail(err, VBM_ENOMEM, "T", "%ld frames are too many", T);
    W = vbm_calloc((size_t)D * K, sizeof(double));
    L = vbm_calloc((size_t)K * K, sizeof(double));
    rho = vbm_calloc(D, sizeof(double));
    lam = vbm_calloc(K, sizeof(double));
    post = vbm_calloc(m->G, sizeof(double));
    z = vbm_calloc(K, sizeof(double));
    at = vbm_calloc(K, sizeof(double));
    bt = vbm_calloc(P, sizeof(int));
    if (!W || !L || !rho || !lam || !post || !z || !at || !bt) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for a sample");
        goto out;
    }
    rng_seed(&r, seed);
    /* Theta ~ q(Theta): T's rows (Beta by two Gammas), lambda on its grid, W's rows, rho */
    for (int row = 0; row < 2; row++) {
        double g0 = draw_gamma(&r, m->ut[2 * row]), g1 = draw_gamma(&r, m->ut[2 * row + 1]);
        double s = g0 + g1;
        Tr[2 * row] = s > 0 ? g0 / s : 0.5;
        Tr[2 * row + 1] = s > 0 ? g1 / s : 0.5;
    }
    for (int k = 0; k < K; k++) {
        temporal_lam_lognorm(m, m->lam + 4 * k, post);
        lam[k] = m->grid[rng_categorical(&r, post, m->G)];
    }
    for (int d = 0; d < D; d++) {
        memcpy(L, m->Sw + (size_t)d * K * K, sizeof(double) * K * K);
        if (la_chol(K, L) != 0) {
            rc = vbm_fail(err, VBM_ENUMERIC, "",
                          "the covariance of q(w_%d) is not positive definite", d);
            goto out;
        }
        rng_normal_fill(&r, z, K);
        for (int i = 0; i < K; i++) {
            double v = m->mw[(size_t)d * K + i];
            for (int j = 0; j <= i; j++)
                v += L[i * K + j] * z[j];
            W[(size_t)d * K + i] = v;
        }
        rho[d] = draw_gamma(&r, m->rd[d]) / m->re[d];
    }
    /* b, a, y ancestrally (eq. 1-11) */
    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            double p1 = t == 0 ? m->cfg.pi0 : Tr[2 * bt[p] + 1];
            bt[p] = rng_uniform(&r) < p1;
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double l = lam[k];
                at[k] = t == 0 ? sqrt(m->cfg.sigma_a2) * rng_normal(&r)
                               : l * at[k] + sqrt((1.0 - l) * (1.0 + l)) * rng_normal(&r);
            }
        }
        for (int d = 0; d < D; d++) {
            double v = rng_normal(&r) / sqrt(rho[d]);
            for (int k = 0; k < K; k++)
                if (bt[k / Q])
                    v += W[(size_t)d * K + k] * at[k];
            y[(size_t)t * D + d] = v;
        }
        if (b)
            memcpy(b + (size_t)t * P, bt, sizeof(int) * P);
        if (a)
            memcpy(a + (size_t)t * K, at, sizeof(double) * K);
    }
out:
    free(W);
    free(L);
    free(rho);
    free(lam);
    free(post);
    free(z);
    free(at);
    free(bt);
    return rc;
}
