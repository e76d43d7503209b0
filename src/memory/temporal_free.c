/* temporal_free.c -- owns the free energy of the temporal memory (sec. 7): the terms of q(B, A),
 * those of q(Theta) alone, and the split of them that appends rely on. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "memory/temporal.h"
#include "numerics/linalg.h"
#include "numerics/special.h"

/* ---- KL terms of q(Theta) ---- */

/* KL(Gamma(a1, b1) || Gamma(a0, b0)), shape/rate. */
static double kl_gamma(double a1, double b1, double a0, double b0)
{
    return (a1 - a0) * special_digamma(a1) - special_lgamma(a1) + special_lgamma(a0)
           + a0 * (log(b1) - log(b0)) + a1 * (b0 - b1) / b1;
}

/* KL(Beta(u1) || Beta(u0)) for pairs u1, u0. */
static double kl_beta(const double *u1, const double *u0)
{
    double s1 = u1[0] + u1[1], s0 = u0[0] + u0[1];
    double lb1 = special_lgamma(u1[0]) + special_lgamma(u1[1]) - special_lgamma(s1);
    double lb0 = special_lgamma(u0[0]) + special_lgamma(u0[1]) - special_lgamma(s0);
    double ds = special_digamma(s1);

    return lb0 - lb1 + (u1[0] - u0[0]) * (special_digamma(u1[0]) - ds)
           + (u1[1] - u0[1]) * (special_digamma(u1[1]) - ds);
}

/* ---- the terms of q(B, A) ---- */

/* <log P(y_t | ...)> of frame t (eq. 116) with <W^T diag(rho) W> = M, given c0 (the constant and
 * the <log rho> terms) and the second moments of a_{t,p} given b_{t,p} = 1: covariance blocks
 * cov[(t P + p) Q Q ...] and means mean[t K + p Q ...] (eq. 18: V and ea; eq. 19: S1 and mu1). */
static double frame_loglik_y(const temporal_exp *e, const tseq *s, long t, double c0,
                             const double *cov, const double *mean)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    const double *y = s->y + (size_t)t * D, *x = s->ex + (size_t)t * K;
    double F = c0, quad = 0.0;

    for (int k = 0; k < D; k++)
        F -= 0.5 * e->rho[k] * y[k] * y[k];
    for (int i = 0; i < K; i++) {
        F += x[i] * s->wry[t * K + i];
        for (int j = 0; j < K; j++)
            if (i / Q != j / Q)
                quad += x[i] * e->M[i * K + j] * x[j];
    }
    for (int p = 0; p < P; p++) {
        const double *V = cov + ((size_t)t * P + p) * Q * Q, *m = mean + t * K + p * Q;
        double q1 = s->q1[t * P + p];
        for (int a = 0; a < Q; a++)
            for (int b = 0; b < Q; b++)
                quad += q1 * e->M[(p * Q + a) * K + p * Q + b] * (V[a * Q + b] + m[a] * m[b]);
    }
    return F - 0.5 * quad;
}

/* The latent free-energy terms under eq. 19 (sec. 7 with q(b_{1:T,p}) q(a_{1:T,p})). */
static double chain_local_fe(const temporal_exp *e, const tseq *s)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;
    double F = 0.0, c0 = -0.5 * D * TEMPORAL_LOG2PI, sa2 = e->sigma_a2;

    for (int k = 0; k < D; k++)
        c0 += 0.5 * e->elogrho[k];
    for (int p = 0; p < P; p++)
        F += s->Hb[p] + 0.5 * ((double)T * Q * (TEMPORAL_LOG2PI + 1.0) - s->lda[p]);
    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            if (t == 0) {
                F += s->q0[p] * e->logpi[0] + s->q1[p] * e->logpi[1];
            } else {
                const double *xi = s->xi + ((size_t)t * P + p) * 4;
                for (int i = 0; i < 4; i++)
                    F += xi[i] * e->elogT[i];
            }
        }
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            if (t == 0) {
                F += -0.5 * (TEMPORAL_LOG2PI + log(sa2)) - 0.5 * s->eaa[i] / sa2;
            } else {
                int p = k / Q, q = k % Q;
                double cr = s->ea[i] * s->ea[i - K] + s->C[((size_t)t * P + p) * Q * Q + q * Q + q];
                F += -0.5 * TEMPORAL_LOG2PI - 0.5 * e->elog[k]
                     - 0.5
                           * (e->einv[k] * s->eaa[i] - 2.0 * e->elam[k] * cr
                              + e->elam2[k] * s->eaa[i - K]);
            }
        }
        F += frame_loglik_y(e, s, t, c0, s->V, s->ea);
    }
    return F;
}

/* The latent free-energy terms under the structured form of eq. 18 (q(b_{1:T,p}) prod_t
 * q(a_{t,p} | b_{t,p})): as tseq's eq. 18 terms, with the entropy of each chain over b, its pair
 * marginals in <log P(B | T)> and <a_t a_{t-1}> = sum over pairs of q(b_{t-1}, b_t) times the
 * product of the means given them. */
static double bchain_local_fe(const temporal_exp *e, const tseq *s)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;
    double F = 0.0, c0 = -0.5 * D * TEMPORAL_LOG2PI, sa2 = e->sigma_a2;

    for (int k = 0; k < D; k++)
        c0 += 0.5 * e->elogrho[k];
    for (int p = 0; p < P; p++)
        F += s->Hb[p];
    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            double q1 = s->q1[t * P + p], q0 = s->q0[t * P + p], lds = 0.0;
            if (t == 0) {
                F += q0 * e->logpi[0] + q1 * e->logpi[1];
            } else {
                const double *xi = s->xi + ((size_t)t * P + p) * 4;
                for (int i = 0; i < 4; i++)
                    F += xi[i] * e->elogT[i];
            }
            /* the entropies of q(a_{t,p} | b) */
            for (int q = 0; q < Q; q++)
                lds += log(s->s2[(size_t)t * K + p * Q + q]);
            F += 0.5 * q1 * (Q * (TEMPORAL_LOG2PI + 1.0) - s->ld1[t * P + p])
                 + 0.5 * q0 * (Q * (TEMPORAL_LOG2PI + 1.0) + lds);
        }
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            if (t == 0) {
                F += -0.5 * (TEMPORAL_LOG2PI + log(sa2)) - 0.5 * s->eaa[i] / sa2;
            } else {
                const double *xi = s->xi + ((size_t)t * P + k / Q) * 4;
                double cr = 0.0;
                for (int j = 0; j < 4; j++)
                    cr += xi[j] * (j / 2 ? s->mu1[i - K] : s->mu2[i - K])
                          * (j % 2 ? s->mu1[i] : s->mu2[i]);
                F += -0.5 * TEMPORAL_LOG2PI - 0.5 * e->elog[k]
                     - 0.5
                           * (e->einv[k] * s->eaa[i] - 2.0 * e->elam[k] * cr
                              + e->elam2[k] * s->eaa[i - K]);
            }
        }
        F += frame_loglik_y(e, s, t, c0, s->S1, s->mu1);
    }
    return F;
}

/* The terms of the free energy (sec. 7) that involve q(B, A) of this sequence:
 * <log P(B | T)> + <log P(A | Lambda)> + <log P(Y | B, A, W, rho)> - <log Q(B, A)>. */
double temporal_seq_fe(const temporal_exp *e, const tseq *s)
{
    if (s->temporal)
        return chain_local_fe(e, s);
    if (s->bchain)
        return bchain_local_fe(e, s);
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;
    double F = 0.0, c0 = -0.5 * D * TEMPORAL_LOG2PI, sa2 = e->sigma_a2;

    for (int k = 0; k < D; k++)
        c0 += 0.5 * e->elogrho[k];
    for (long t = 0; t < T; t++) {

        /* <log P(b)> (eq. 101-102) and the entropy of q(b) */
        for (int p = 0; p < P; p++) {
            double q1 = s->q1[t * P + p], q0 = s->q0[t * P + p];
            if (t == 0) {
                F += q0 * e->logpi[0] + q1 * e->logpi[1];
            } else {
                double r1 = s->q1[(t - 1) * P + p], r0 = s->q0[(t - 1) * P + p];
                F += r0 * (q0 * e->elogT[0] + q1 * e->elogT[1])
                     + r1 * (q0 * e->elogT[2] + q1 * e->elogT[3]);
            }
            /* -<log Q> (eq. 94) */
            if (q1 > 0)
                F -= q1 * (log(q1) - 0.5 * (Q * (TEMPORAL_LOG2PI + 1.0) - s->ld1[t * P + p]));
            if (q0 > 0) {
                double lds = 0.0;
                for (int q = 0; q < Q; q++)
                    lds += log(s->s2[(size_t)t * K + p * Q + q]);
                F -= q0 * (log(q0) - 0.5 * (Q * (TEMPORAL_LOG2PI + 1.0) + lds));
            }
        }
        /* <log P(A | Lambda)> (eq. 103-104) */
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            if (t == 0)
                F += -0.5 * (TEMPORAL_LOG2PI + log(sa2)) - 0.5 * s->eaa[i] / sa2;
            else
                F += -0.5 * TEMPORAL_LOG2PI - 0.5 * e->elog[k]
                     - 0.5
                           * (e->einv[k] * s->eaa[i] - 2.0 * e->elam[k] * s->ea[i] * s->ea[i - K]
                              + e->elam2[k] * s->eaa[i - K]);
        }
        /* <log P(y_t | ...)> (eq. 116) with <W^T diag(rho) W> = M */
        F += frame_loglik_y(e, s, t, c0, s->S1, s->mu1);
    }
    return F;
}

/* The latent free energy (temporal_seq_fe, chain_local_fe) is linear in the expectations under
 * q(Theta), with the sufficient statistics of q(B, A) as coefficients, plus terms that do not
 * involve q(Theta) (entropies of q(B, A), the first frame's <log P(b_1)> and <log P(a_1)>,
 * 2 pi constants). This is the q(Theta) part, term by term as those functions write it. */
double temporal_stats_fe(const temporal_exp *e, const tstats *st)
{
    int D = e->D, K = e->K;
    double F = 0.0, erl = 0.0;

    for (int i = 0; i < 4; i++)
        F += st->N[i] * e->elogT[i];
    for (int k = 0; k < K; k++)
        F += -0.5 * e->elog[k] * st->ntr
             - 0.5
                   * (e->einv[k] * st->Saa[k] - 2.0 * e->elam[k] * st->Scr[k]
                      + e->elam2[k] * st->Spr[k]);
    for (int k = 0; k < D; k++) {
        erl += e->elogrho[k];
        F -= 0.5 * e->rho[k] * st->yy[k];
        for (int i = 0; i < K; i++)
            F += e->Wr[(size_t)k * K + i] * st->r[(size_t)k * K + i];
    }
    F += 0.5 * erl * st->nfr;
    for (int i = 0; i < K * K; i++)
        F -= 0.5 * e->M[i] * st->R[i];
    return F;
}

/* The free energy's terms in q(Theta) alone: -KL(q(W) || p(W | gamma)) - KL(q(rho) || p(rho))
 * - KL(q(T) || p(T)) - KL(q(Lambda) || p(Lambda)) (eq. 96-113). Needs m->ex fresh. */
double temporal_global_fe(const vbm_temporal *m)
{
    const vbm_temporal_config *c = &m->cfg;
    int D = m->D, K = m->K;
    double F = 0.0, sl = 0.0;

    for (int i = 0; i < K; i++)
        sl += log(m->gamma[i]);
    for (int k = 0; k < D; k++) {
        const double *S = m->Sw + (size_t)k * K * K, *w = m->mw + (size_t)k * K;
        double kl = -K - sl + m->ldJw[k];
        for (int i = 0; i < K; i++)
            kl += m->gamma[i] * (S[i * K + i] + w[i] * w[i]);
        F -= 0.5 * kl;
        F -= kl_gamma(m->rd[k], m->re[k], c->rho_d, c->rho_e);
    }
    F -= kl_beta(m->ut, c->u_T[0]);
    F -= kl_beta(m->ut + 2, c->u_T[1]);
    for (int k = 0; k < K; k++)
        F -= m->ex.kl_lam[k];
    return F;
}

/* Test hook (temporal.h): q(B, A) of seq inferred under m (sweeps VBE sweeps), then its latent
 * free energy and the q(Theta) part of it (temporal_stats_fe of its statistics) under m and under
 * m2 (same configuration): out = {local(m), stats(m), local(m2), stats(m2)}. */
vbm_status temporal_fe_split(const vbm_temporal *m, const vbm_temporal *m2, const vbm_sequence *seq,
                             int sweeps, double out[4], vbm_error *err)
{
    tseq s;
    tstats st;
    double *scr;
    vbm_status rc;

    if ((rc = temporal_seq_check(m, seq, "sequence", err)) != VBM_OK)
        return rc;
    if ((rc = temporal_seq_init(&s, m, seq, m->cfg.vbe_temporal, err)) != VBM_OK)
        return rc;
    scr = vbm_calloc((size_t)4 * m->Q * m->Q + 4 * m->Q, sizeof(double));
    if (scr == NULL || temporal_stats_alloc(&st, m->D, m->K) != 0) {
        free(scr);
        temporal_seq_free(&s);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory");
    }
    temporal_seq_data(&s, &m->ex);
    for (int i = 0; i < sweeps && rc == VBM_OK; i++)
        rc = temporal_seq_sweep(&m->ex, &s, i % 2, scr, err);
    if (rc == VBM_OK) {
        temporal_stats_add(&st, &m->ex, &s);
        out[0] = temporal_seq_fe(&m->ex, &s);
        out[1] = temporal_stats_fe(&m->ex, &st);
        temporal_seq_data(&s, &m2->ex);
        out[2] = temporal_seq_fe(&m2->ex, &s);
        out[3] = temporal_stats_fe(&m2->ex, &st);
    }
    temporal_stats_release(&st);
    free(scr);
    temporal_seq_free(&s);
    return rc;
}
