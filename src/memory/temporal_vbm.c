/* temporal_vbm.c -- owns the VBM of the temporal memory (sec. 5), its ARD step (sec. 6), the
 * rescaling step, and the sufficient statistics of q(B, A) they read. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "memory/temporal.h"
#include "numerics/linalg.h"

/* ---- VBM (sec. 5) and ARD (sec. 6) ---- */

/* Allocate the arrays of st (zeroed); 0, or -1 out of memory (st then owns nothing). */
int temporal_stats_alloc(tstats *st, int D, int K)
{
    memset(st, 0, sizeof *st);
    st->Saa = vbm_calloc((size_t)K, sizeof(double));
    st->Scr = vbm_calloc((size_t)K, sizeof(double));
    st->Spr = vbm_calloc((size_t)K, sizeof(double));
    st->R = vbm_calloc((size_t)K * K, sizeof(double));
    st->r = vbm_calloc((size_t)D * K, sizeof(double));
    st->yy = vbm_calloc((size_t)D, sizeof(double));
    if (!st->Saa || !st->Scr || !st->Spr || !st->R || !st->r || !st->yy) {
        free(st->Saa);
        free(st->Scr);
        free(st->Spr);
        free(st->R);
        free(st->r);
        free(st->yy);
        memset(st, 0, sizeof *st);
        return -1;
    }
    return 0;
}

void temporal_stats_release(tstats *st)
{
    free(st->Saa);
    free(st->Scr);
    free(st->Spr);
    free(st->R);
    free(st->r);
    free(st->yy);
    memset(st, 0, sizeof *st);
}

/* dst <- a + b (a NULL: dst <- b); the arrays are dst's own. */
void temporal_stats_sum(tstats *dst, const tstats *a, const tstats *b, int D, int K)
{
    for (int i = 0; i < 4; i++)
        dst->N[i] = (a ? a->N[i] : 0.0) + b->N[i];
    for (int k = 0; k < K; k++) {
        dst->Saa[k] = (a ? a->Saa[k] : 0.0) + b->Saa[k];
        dst->Scr[k] = (a ? a->Scr[k] : 0.0) + b->Scr[k];
        dst->Spr[k] = (a ? a->Spr[k] : 0.0) + b->Spr[k];
    }
    for (int i = 0; i < K * K; i++)
        dst->R[i] = (a ? a->R[i] : 0.0) + b->R[i];
    for (int i = 0; i < D * K; i++)
        dst->r[i] = (a ? a->r[i] : 0.0) + b->r[i];
    for (int i = 0; i < D; i++)
        dst->yy[i] = (a ? a->yy[i] : 0.0) + b->yy[i];
    dst->ntr = (a ? a->ntr : 0.0) + b->ntr;
    dst->nfr = (a ? a->nfr : 0.0) + b->nfr;
}

void temporal_stats_add(tstats *st, const temporal_exp *e, const tseq *s)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;

    for (long t = 1; t < T; t++)
        for (int p = 0; p < P; p++) {
            double r0 = s->q0[(t - 1) * P + p], r1 = s->q1[(t - 1) * P + p];
            double q0 = s->q0[t * P + p], q1 = s->q1[t * P + p];
            if (s->temporal) { /* pair marginals of the chain */
                const double *xi = s->xi + ((size_t)t * P + p) * 4;
                for (int i = 0; i < 4; i++)
                    st->N[i] += xi[i];
                continue;
            }
            st->N[0] += r0 * q0;
            st->N[1] += r0 * q1;
            st->N[2] += r1 * q0;
            st->N[3] += r1 * q1;
        }
    for (long t = 1; t < T; t++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            st->Saa[k] += s->eaa[i];
            st->Scr[k] += s->ea[i] * s->ea[i - K];
            if (s->temporal)
                st->Scr[k] += s->C[((size_t)t * P + k / Q) * Q * Q + (k % Q) * Q + k % Q];
            st->Spr[k] += s->eaa[i - K];
        }
    st->ntr += (double)(T - 1);
    for (long t = 0; t < T; t++) {
        const double *x = s->ex + (size_t)t * K;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                if (i / Q != j / Q)
                    st->R[i * K + j] += x[i] * x[j];
        for (int p = 0; p < P; p++) {
            const double *S = s->S1 + ((size_t)t * P + p) * Q * Q, *mu = s->mu1 + t * K + p * Q;
            double q1 = s->q1[t * P + p];
            if (s->temporal) { /* <x x^T> = q(b = 1) <a a^T> */
                S = s->V + ((size_t)t * P + p) * Q * Q;
                mu = s->ea + t * K + p * Q;
            }
            for (int a = 0; a < Q; a++)
                for (int b = 0; b < Q; b++)
                    st->R[(p * Q + a) * K + p * Q + b] += q1 * (S[a * Q + b] + mu[a] * mu[b]);
        }
    }
    la_gemm(1, 0, D, K, (int)T, 1.0, s->y, D, s->ex, K, 1.0, st->r, K);
    for (long t = 0; t < T; t++)
        for (int k = 0; k < D; k++)
            st->yy[k] += s->y[(size_t)t * D + k] * s->y[(size_t)t * D + k];
    st->nfr += (double)T;
}

/* q(T), q(Lambda), q(W), q(rho) <- their optima given q(B, A) (eq. 59, 63-66, 70-78 with the
 * row-joint q(W) described at the top), in that order. work holds K^2 + K doubles. */
vbm_status temporal_vbm_step(vbm_temporal *m, const tstats *st, double *work, vbm_error *err)
{
    const vbm_temporal_config *c = &m->cfg;
    int D = m->D, K = m->K;
    double *J = work, *v = work + (size_t)K * K;

    m->ut[0] = c->u_T[0][0] + st->N[0];
    m->ut[1] = c->u_T[0][1] + st->N[1];
    m->ut[2] = c->u_T[1][0] + st->N[2];
    m->ut[3] = c->u_T[1][1] + st->N[3];
    for (int k = 0; k < K; k++) {
        m->lam[4 * k + 0] = c->lam_eta + 0.5 * st->ntr;
        m->lam[4 * k + 1] = c->lam_f - 0.5 * st->Saa[k];
        m->lam[4 * k + 2] = c->lam_g + st->Scr[k];
        m->lam[4 * k + 3] = c->lam_h - 0.5 * st->Spr[k];
    }
    for (int k = 0; k < D; k++) {
        double rho = m->rd[k] / m->re[k], *S = m->Sw + (size_t)k * K * K,
               *w = m->mw + (size_t)k * K;
        for (int i = 0; i < K * K; i++)
            J[i] = rho * st->R[i];
        for (int i = 0; i < K; i++) {
            J[i * K + i] += m->gamma[i];
            v[i] = rho * st->r[(size_t)k * K + i];
        }
        if (la_chol(K, J) != 0)
            return vbm_fail(err, VBM_ENUMERIC, "",
                            "the precision of q(w_%d) is not positive definite", k);
        m->ldJw[k] = la_chol_logdet(K, J);
        la_chol_solve(K, 1, J, v, 1);
        memcpy(w, v, sizeof(double) * K);
        memcpy(S, J, sizeof(double) * K * K);
        la_chol_inverse(K, S);
    }
    for (int k = 0; k < D; k++) {
        const double *S = m->Sw + (size_t)k * K * K, *w = m->mw + (size_t)k * K;
        const double *r = st->r + (size_t)k * K;
        double q = st->yy[k];
        for (int i = 0; i < K; i++) {
            q -= 2.0 * w[i] * r[i];
            for (int j = 0; j < K; j++)
                q += (S[i * K + j] + w[i] * w[j]) * st->R[i * K + j];
        }
        m->rd[k] = c->rho_d + 0.5 * st->nfr;
        m->re[k] = c->rho_e + 0.5 * (q > 0 ? q : 0.0);
    }
    return VBM_OK;
}

/* gamma <- its maximiser (eq. 82-83), capped at gamma_max. */
void temporal_ard_step(vbm_temporal *m)
{
    int D = m->D, K = m->K;

    for (int i = 0; i < K; i++) {
        double s = 0.0, g;
        for (int k = 0; k < D; k++)
            s += m->Sw[(size_t)k * K * K + i * K + i]
                 + m->mw[(size_t)k * K + i] * m->mw[(size_t)k * K + i];
        g = s > 0 ? D / s : m->cfg.gamma_max;
        m->gamma[i] = g < m->cfg.gamma_max ? g : m->cfg.gamma_max;
    }
}

/* Parameter expansion (an addition to the seed's VB-EM): for each attribute k, the exact
 * maximiser over s > 0 of the free energy of the joint rescaling a_{.,k} -> s a_{.,k} (in q(B, A)
 * of every sequence) and W_{.,k} -> W_{.,k} / s (in q(W)), which leaves the likelihood term
 * unchanged. With N frames in all, A = sum over frames of the AR(1) quadratic form of a_k and
 * B = gamma_k sum_d <w_dk^2>, F(s) = (N - D) log s - A s^2 / 2 - B / (2 s^2) + const, concave in
 * log s, maximised at s^2 = ((N - D) + sqrt((N - D)^2 + 4 A B)) / (2 A). Moves along the scale
 * ridge between W and A that the alternating updates climb slowly. Needs m->ex fresh; leaves
 * it stale (the caller refreshes). */
void temporal_rescale_step(vbm_temporal *m, tseq *ss, int nseq)
{
    const temporal_exp *e = &m->ex;
    int D = m->D, K = m->K, P = m->P, Q = m->Q;

    for (int k = 0; k < K; k++) {
        double A = 0.0, B = 0.0, N = 0.0, u, s, c;
        int p = k / Q, q = k % Q;
        for (int d = 0; d < D; d++)
            B += m->Sw[(size_t)d * K * K + k * K + k]
                 + m->mw[(size_t)d * K + k] * m->mw[(size_t)d * K + k];
        B *= m->gamma[k];
        for (int i = 0; i < nseq; i++) {
            const tseq *sq = &ss[i];
            A += sq->eaa[k] / e->sigma_a2;
            for (long t = 1; t < sq->T; t++) {
                size_t j = (size_t)t * K + k;
                double cr = sq->ea[j] * sq->ea[j - K];
                if (sq->temporal)
                    cr += sq->C[((size_t)t * P + p) * Q * Q + q * Q + q];
                A += e->einv[k] * sq->eaa[j] - 2.0 * e->elam[k] * cr + e->elam2[k] * sq->eaa[j - K];
            }
            N += (double)sq->T;
        }
        if (!(A > 0.0 && B > 0.0 && isfinite(A) && isfinite(B)))
            continue;
        u = ((N - D) + sqrt((N - D) * (N - D) + 4.0 * A * B)) / (2.0 * A);
        s = sqrt(u);
        if (!(isfinite(s) && s > 0.0))
            continue;
        c = 1.0 / s;
        for (int i = 0; i < nseq; i++) {
            tseq *sq = &ss[i];
            if (sq->temporal) {
                for (long t = 0; t < sq->T; t++) {
                    size_t j = (size_t)t * K + k;
                    double *V = sq->V + ((size_t)t * P + p) * Q * Q;
                    double *Cc = sq->C + ((size_t)t * P + p) * Q * Q;
                    sq->ex[j] *= s;
                    sq->ea[j] *= s;
                    sq->eaa[j] *= u;
                    for (int r = 0; r < Q; r++) {
                        V[q * Q + r] *= s;
                        V[r * Q + q] *= s;
                        Cc[q * Q + r] *= s;
                        Cc[r * Q + q] *= s;
                    }
                }
                sq->lda[p] -= 2.0 * (double)sq->T * log(s);
                continue;
            }
            for (long t = 0; t < sq->T; t++) {
                size_t j = (size_t)t * K + k;
                double *S = sq->S1 + ((size_t)t * P + p) * Q * Q;
                sq->mu1[j] *= s;
                sq->mu2[j] *= s;
                sq->s2[j] *= u;
                sq->ex[j] *= s;
                sq->ea[j] *= s;
                sq->eaa[j] *= u;
                for (int r = 0; r < Q; r++) {
                    S[q * Q + r] *= s;
                    S[r * Q + q] *= s;
                }
                sq->ld1[t * P + p] -= 2.0 * log(s);
            }
        }
        for (int d = 0; d < D; d++) {
            double *S = m->Sw + (size_t)d * K * K;
            m->mw[(size_t)d * K + k] *= c;
            for (int r = 0; r < K; r++) {
                S[k * K + r] *= c;
                S[r * K + k] *= c;
            }
            m->ldJw[d] += 2.0 * log(s);
        }
    }
}
