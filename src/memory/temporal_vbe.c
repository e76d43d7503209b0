/* temporal_vbe.c -- owns the VBE of the temporal memory: q(B, A) of one sequence under eq. 18
 * (one factor per frame and identity, eq. 24-51) and under eq. 19 (a chain per identity). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "memory/temporal.h"
#include "numerics/linalg.h"

/* ---- q(B, A) of one sequence (eq. 18: one factor per (t, p)) ---- */

void temporal_seq_free(tseq *s)
{
    free(s->q1);
    free(s->q0);
    free(s->mu1);
    free(s->S1);
    free(s->ld1);
    free(s->mu2);
    free(s->s2);
    free(s->ex);
    free(s->ea);
    free(s->eaa);
    free(s->wry);
    free(s->V);
    free(s->C);
    free(s->xi);
    free(s->Hb);
    free(s->lda);
    free(s->Dn);
    free(s->z);
    free(s->fb);
    memset(s, 0, sizeof *s);
}

/* Allocate q(B, A) of a sequence at q(b) = 1/2, a = 0 (mu2 = 0, s2 = sigma_a2). */
vbm_status temporal_seq_init(tseq *s, const vbm_temporal *m, const vbm_sequence *seq, int temporal,
                             vbm_error *err)
{
    size_t T = (size_t)seq->T, P = (size_t)m->P, K = (size_t)m->K, Q = (size_t)m->Q;

    memset(s, 0, sizeof *s);
    s->T = seq->T;
    s->y = seq->y;
    s->q1 = vbm_calloc(T * P, sizeof(double));
    s->q0 = vbm_calloc(T * P, sizeof(double));
    s->mu1 = vbm_calloc(T * K, sizeof(double));
    s->S1 = vbm_calloc(T * P * Q * Q, sizeof(double));
    s->ld1 = vbm_calloc(T * P, sizeof(double));
    s->mu2 = vbm_calloc(T * K, sizeof(double));
    s->s2 = vbm_calloc(T * K, sizeof(double));
    s->ex = vbm_calloc(T * K, sizeof(double));
    s->ea = vbm_calloc(T * K, sizeof(double));
    s->eaa = vbm_calloc(T * K, sizeof(double));
    s->wry = vbm_calloc(T * K, sizeof(double));
    if (!s->q1 || !s->q0 || !s->mu1 || !s->S1 || !s->ld1 || !s->mu2 || !s->s2 || !s->ex || !s->ea
        || !s->eaa || !s->wry) {
        temporal_seq_free(s);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory for %ld frames", seq->T);
    }
    s->temporal = temporal;
    if (s->temporal) {
        s->V = vbm_calloc(T * P * Q * Q, sizeof(double));
        s->C = vbm_calloc(T * P * Q * Q, sizeof(double));
        s->xi = vbm_calloc(T * P * 4, sizeof(double));
        s->Hb = vbm_calloc(P, sizeof(double));
        s->lda = vbm_calloc(P, sizeof(double));
        s->Dn = vbm_calloc(T * Q * Q, sizeof(double));
        s->z = vbm_calloc(T * Q, sizeof(double));
        s->fb = vbm_calloc(6 * T, sizeof(double));
        if (!s->V || !s->C || !s->xi || !s->Hb || !s->lda || !s->Dn || !s->z || !s->fb) {
            temporal_seq_free(s);
            return vbm_fail(err, VBM_ENOMEM, "", "out of memory for %ld frames", seq->T);
        }
        for (size_t i = 0; i < T * P * 4; i++)
            s->xi[i] = 0.25;
    }
    for (size_t i = 0; i < T * P; i++)
        s->q1[i] = s->q0[i] = 0.5;
    for (size_t i = 0; i < T * K; i++) {
        s->s2[i] = m->cfg.sigma_a2;
        s->eaa[i] = 0.5 * m->cfg.sigma_a2;
    }
    return VBM_OK;
}

/* wry <- Y <Wr>: the data term of the VBE under the current q(W) q(rho). */
void temporal_seq_data(tseq *s, const temporal_exp *e)
{
    la_gemm(0, 0, (int)s->T, e->K, e->D, 1.0, s->y, e->D, e->Wr, e->K, 0.0, s->wry, e->K);
}

/* The Gaussian of a_{t,p} given b_{t,p} = 1 (eq. 39-40, with <W_p^T diag(rho) W_i> = M[p, i]):
 * from the diagonal precision J2 and linear term h2 of the AR terms, the linear term h1 and the
 * precision J (Q x Q, factorised in place: its Cholesky factor), its log-determinant *ld, the
 * mean mu, and S the covariance (Q x Q). Returns non-zero when J is not positive definite. */
static int site_given_on(const temporal_exp *e, const tseq *s, long t, int p, const double *J2,
                         const double *h2, double *h1, double *J, double *ld, double *mu, double *S)
{
    int Q = e->Q, K = e->K;
    const double *ext = s->ex + (size_t)t * K, *M = e->M;

    for (int q = 0; q < Q; q++) {
        int k = p * Q + q;
        double v = h2[q] + s->wry[t * K + k];
        for (int i = 0; i < K; i++)
            if (i / Q != p)
                v -= M[k * K + i] * ext[i];
        h1[q] = v;
        for (int r = 0; r < Q; r++)
            J[q * Q + r] = M[k * K + p * Q + r] + (q == r ? J2[q] : 0.0);
    }
    if (la_chol(Q, J) != 0)
        return 1;
    *ld = la_chol_logdet(Q, J);
    memcpy(mu, h1, sizeof(double) * Q);
    la_chol_solve(Q, 1, J, mu, 1);
    memcpy(S, J, sizeof(double) * Q * Q);
    la_chol_inverse(Q, S);
    return 0;
}

/* The optimal q_{t,p}(b, a) given every other factor and q(Theta) (eq. 24-51). scr holds
 * 3 Q^2 + 4 Q doubles. Returns 0, or non-zero when Sigma_{t,p}^{-1} is not positive
 * definite. */
static int site_update(const temporal_exp *e, tseq *s, long t, int p, double *scr)
{
    int Q = e->Q, K = e->K, P = e->P;
    long T = s->T;
    double *J = scr, *h1 = J + Q * Q, *J2 = h1 + Q, *h2 = J2 + Q, *mu = h2 + Q;
    double *S = s->S1 + ((size_t)t * P + p) * Q * Q;
    double L[2], logc, logit, ld, q1, q0;

    /* Q^1 (eq. 24-26), in logs */
    for (int b = 0; b < 2; b++) {
        if (t == 0)
            L[b] = e->logpi[b];
        else
            L[b] = s->q0[(t - 1) * P + p] * e->elogT[b] + s->q1[(t - 1) * P + p] * e->elogT[2 + b];
        if (t < T - 1)
            L[b] += s->q0[(t + 1) * P + p] * e->elogT[2 * b]
                    + s->q1[(t + 1) * P + p] * e->elogT[2 * b + 1];
    }
    /* Q^2 (eq. 28-33): diagonal precision J2, linear term h2 */
    for (int q = 0; q < Q; q++) {
        int k = p * Q + q;
        J2[q] = (t == 0 ? 1.0 / e->sigma_a2 : e->einv[k]) + (t < T - 1 ? e->elam2[k] : 0.0);
        h2[q] = (t > 0 ? e->elam[k] * s->ea[(t - 1) * K + k] : 0.0)
                + (t < T - 1 ? e->elam[k] * s->ea[(t + 1) * K + k] : 0.0);
    }
    /* b = 1 */
    if (site_given_on(e, s, t, p, J2, h2, h1, J, &ld, mu, S) != 0)
        return 1;
    /* log C' (eq. 41) */
    logc = -0.5 * ld;
    for (int q = 0; q < Q; q++)
        logc += 0.5 * log(J2[q]) + 0.5 * h1[q] * mu[q] - 0.5 * h2[q] * h2[q] / J2[q];
    logit = L[1] - L[0] + logc;
    /* eq. 45-46 */
    if (logit >= 0) {
        double z = exp(-logit);
        q1 = 1.0 / (1.0 + z);
        q0 = z / (1.0 + z);
    } else {
        double z = exp(logit);
        q1 = z / (1.0 + z);
        q0 = 1.0 / (1.0 + z);
    }
    s->q1[t * P + p] = q1;
    s->q0[t * P + p] = q0;
    s->ld1[t * P + p] = ld;
    for (int q = 0; q < Q; q++) {
        size_t k = (size_t)t * K + p * Q + q;
        double m2 = h2[q] / J2[q], v2 = 1.0 / J2[q];
        s->mu1[k] = mu[q];
        s->mu2[k] = m2;
        s->s2[k] = v2;
        s->ex[k] = q1 * mu[q];                                                 /* eq. 48 */
        s->ea[k] = q1 * mu[q] + q0 * m2;                                       /* eq. 47 */
        s->eaa[k] = q1 * (S[q * Q + q] + mu[q] * mu[q]) + q0 * (v2 + m2 * m2); /* eq. 51 */
    }
    return 0;
}

/* ---- q(B, A) of one sequence under eq. 19: q(b_{1:T,p}) q(a_{1:T,p}) per identity ---- */

/* r_t = <W_p>^T diag(rho) y_t - sum_{i not in p} M[p, i] <x_{t,i}> for attribute q of p. */
static double chain_r(const temporal_exp *e, const tseq *s, long t, int p, int q)
{
    int Q = e->Q, K = e->K, k = p * Q + q;
    double v = s->wry[t * K + k];
    const double *x = s->ex + (size_t)t * K;

    for (int i = 0; i < K; i++)
        if (i / Q != p)
            v -= e->M[k * K + i] * x[i];
    return v;
}

/* The forward-backward algorithm, in logs, on the binary chain b_{1:T} of identity p with
 * log-potentials u[2 t + n] for b_t = n and pr[t * pr_step + 2 m + n] for b_{t-1} = m, b_t = n
 * (t >= 1; pr_step 0: the same four at every t). al and be are 2 T scratch doubles each. Sets
 * q0, q1 and xi of identity p in s; returns the chain's entropy, log Z - <log-potentials>. */
static double chain_fb(long T, int P, int p, const double *u, const double *pr, size_t pr_step,
                       double *al, double *be, tseq *s)
{
    double lz, Epot = 0.0;

    for (long t = 0; t < T; t++)
        for (int n = 0; n < 2; n++) {
            if (t == 0) {
                al[n] = u[n];
            } else {
                const double *w = pr + (size_t)t * pr_step;
                double a0 = al[2 * (t - 1)] + w[n], a1 = al[2 * (t - 1) + 1] + w[2 + n];
                double mx = fmax(a0, a1);
                al[2 * t + n] = mx + log(exp(a0 - mx) + exp(a1 - mx)) + u[2 * t + n];
            }
        }
    for (long t = T - 1; t >= 0; t--)
        for (int mm = 0; mm < 2; mm++) {
            if (t == T - 1) {
                be[2 * t + mm] = 0.0;
            } else {
                const double *w = pr + (size_t)(t + 1) * pr_step;
                double b0 = w[2 * mm] + u[2 * (t + 1)] + be[2 * (t + 1)];
                double b1 = w[2 * mm + 1] + u[2 * (t + 1) + 1] + be[2 * (t + 1) + 1];
                double mx = fmax(b0, b1);
                be[2 * t + mm] = mx + log(exp(b0 - mx) + exp(b1 - mx));
            }
        }
    {
        double a0 = al[2 * (T - 1)], a1 = al[2 * (T - 1) + 1], mx = fmax(a0, a1);
        lz = mx + log(exp(a0 - mx) + exp(a1 - mx));
    }
    for (long t = 0; t < T; t++) {
        double q1 = exp(al[2 * t + 1] + be[2 * t + 1] - lz), q0 = exp(al[2 * t] + be[2 * t] - lz);
        double sum = q0 + q1;
        q0 /= sum;
        q1 /= sum;
        s->q0[t * P + p] = q0;
        s->q1[t * P + p] = q1;
        Epot += q0 * u[2 * t] + q1 * u[2 * t + 1];
        if (t > 0) {
            const double *w = pr + (size_t)t * pr_step;
            double *xi = s->xi + ((size_t)t * P + p) * 4, tot = 0.0;
            for (int i = 0; i < 4; i++) {
                xi[i] =
                    exp(al[2 * (t - 1) + i / 2] + w[i] + u[2 * t + i % 2] + be[2 * t + i % 2] - lz);
                tot += xi[i];
            }
            for (int i = 0; i < 4; i++) {
                xi[i] /= tot;
                Epot += xi[i] * w[i];
            }
        }
    }
    return lz - Epot;
}

/* q(b_{1:T,p}) <- its optimum given q(a_{1:T,p}), the other identities and q(Theta): the
 * forward-backward algorithm (chain_fb) on log-potentials psi_t = <a_t>^T r_t - tr(M_pp <a_t
 * a_t^T>) / 2 for b_t = 1, log pi at t = 1 and <log T> between frames. u, al and be are 2 T
 * scratch doubles each. */
static void chain_b(const temporal_exp *e, tseq *s, int p, double *u, double *al, double *be)
{
    int P = e->P, Q = e->Q, K = e->K;
    long T = s->T;

    for (long t = 0; t < T; t++) {
        const double *V = s->V + ((size_t)t * P + p) * Q * Q, *m = s->ea + (size_t)t * K + p * Q;
        double v = 0.0;
        for (int q = 0; q < Q; q++) {
            v += m[q] * chain_r(e, s, t, p, q);
            for (int r = 0; r < Q; r++)
                v -= 0.5 * e->M[(p * Q + q) * K + p * Q + r] * (V[q * Q + r] + m[q] * m[r]);
        }
        u[2 * t] = t == 0 ? e->logpi[0] : 0.0;
        u[2 * t + 1] = t == 0 ? e->logpi[1] + v : v;
    }
    s->Hb[p] = chain_fb(T, P, p, u, e->elogT, 0, al, be, s);
    for (long t = 0; t < T; t++)
        for (int q = 0; q < Q; q++)
            s->ex[(size_t)t * K + p * Q + q] = s->q1[t * P + p] * s->ea[(size_t)t * K + p * Q + q];
}

/* q(a_{1:T,p}) <- its optimum given q(b_{1:T,p}), the other identities and q(Theta): a Gaussian
 * chain with block-tridiagonal precision (node blocks J_t = the AR(1) terms + q(b_t = 1) M_pp,
 * off-diagonal blocks -diag(<lambda / (1 - lambda^2)>)), solved by its block LDL^T factorisation
 * (the information-form Kalman filter) and the backward (RTS) recursion for the marginal and
 * lag-one covariances. work holds 4 Q^2 doubles. Returns non-zero when a block is not positive
 * definite. */
static int chain_a(const temporal_exp *e, tseq *s, int p, double *work)
{
    int P = e->P, Q = e->Q, K = e->K;
    long T = s->T;
    double *J = work, *A = J + Q * Q, *Bm = A + Q * Q, *tmp = Bm + Q * Q, ld = 0.0;

    /* forward: D_t = J_t - B D_{t-1}^{-1} B, z_t = h_t - B D_{t-1}^{-1} z_{t-1}; keep D_t^{-1} */
    for (long t = 0; t < T; t++) {
        double *Di = s->Dn + (size_t)t * Q * Q, *z = s->z + (size_t)t * Q, q1 = s->q1[t * P + p];
        for (int q = 0; q < Q; q++) {
            int k = p * Q + q;
            for (int r = 0; r < Q; r++)
                J[q * Q + r] = q1 * e->M[k * K + p * Q + r];
            J[q * Q + q] +=
                (t == 0 ? 1.0 / e->sigma_a2 : e->einv[k]) + (t < T - 1 ? e->elam2[k] : 0.0);
            z[q] = q1 * chain_r(e, s, t, p, q);
            if (t > 0) {
                const double *Dp = s->Dn + (size_t)(t - 1) * Q * Q,
                             *zp = s->z + (size_t)(t - 1) * Q;
                double lq = e->elam[k];
                for (int r = 0; r < Q; r++) {
                    double lr = e->elam[p * Q + r];
                    J[q * Q + r] -= lq * Dp[q * Q + r] * lr;
                    z[q] += lq * Dp[q * Q + r] * zp[r];
                }
            }
        }
        memcpy(Di, J, sizeof(double) * Q * Q);
        if (la_chol(Q, Di) != 0)
            return 1;
        ld += la_chol_logdet(Q, Di);
        la_chol_inverse(Q, Di);
    }
    s->lda[p] = ld;
    /* backward: means, marginal covariances Sigma_t, lag-one Sigma_{t+1,t} */
    for (long t = T - 1; t >= 0; t--) {
        const double *Di = s->Dn + (size_t)t * Q * Q, *z = s->z + (size_t)t * Q;
        double *m = s->ea + (size_t)t * K + p * Q, *V = s->V + ((size_t)t * P + p) * Q * Q;
        if (t == T - 1) {
            for (int q = 0; q < Q; q++) {
                double v = 0.0;
                for (int r = 0; r < Q; r++)
                    v += Di[q * Q + r] * z[r];
                m[q] = v;
            }
            memcpy(V, Di, sizeof(double) * Q * Q);
        } else {
            const double *mn = s->ea + (size_t)(t + 1) * K + p * Q;
            const double *Vn = s->V + ((size_t)(t + 1) * P + p) * Q * Q;
            double *Cn = s->C + ((size_t)(t + 1) * P + p) * Q * Q;
            /* m_t = D_t^{-1} (z_t - B^T m_{t+1}), B = -diag(elam) */
            for (int q = 0; q < Q; q++)
                tmp[q] = z[q] + e->elam[p * Q + q] * mn[q];
            for (int q = 0; q < Q; q++) {
                double v = 0.0;
                for (int r = 0; r < Q; r++)
                    v += Di[q * Q + r] * tmp[r];
                m[q] = v;
            }
            /* with B = -diag(elam) and A = diag(elam) D_t^{-1}:
             * Sigma_{t+1,t} = -Sigma_{t+1} B D_t^{-1} = Sigma_{t+1} A */
            for (int q = 0; q < Q; q++)
                for (int r = 0; r < Q; r++)
                    A[q * Q + r] = e->elam[p * Q + q] * Di[q * Q + r];
            for (int q = 0; q < Q; q++)
                for (int r = 0; r < Q; r++) {
                    double v = 0.0;
                    for (int u = 0; u < Q; u++)
                        v += Vn[q * Q + u] * A[u * Q + r];
                    Cn[q * Q + r] = v;
                }
            /* Sigma_t = D_t^{-1} + A^T Sigma_{t+1} A */
            for (int q = 0; q < Q; q++)
                for (int r = 0; r < Q; r++) {
                    double v = 0.0;
                    for (int u = 0; u < Q; u++)
                        v += A[u * Q + q] * Cn[u * Q + r];
                    Bm[q * Q + r] = v;
                }
            for (int q = 0; q < Q; q++)
                for (int r = 0; r < Q; r++)
                    V[q * Q + r] = Di[q * Q + r] + 0.5 * (Bm[q * Q + r] + Bm[r * Q + q]);
        }
    }
    for (long t = 0; t < T; t++)
        for (int q = 0; q < Q; q++) {
            size_t k = (size_t)t * K + p * Q + q;
            double v = s->V[((size_t)t * P + p) * Q * Q + q * Q + q];
            s->eaa[k] = v + s->ea[k] * s->ea[k];
            s->ex[k] = s->q1[t * P + p] * s->ea[k];
        }
    return 0;
}

/* ---- the structured form of eq. 18 (inference): q(b_{1:T,p}) prod_t q(a_{t,p} | b_{t,p}) ---- */

vbm_status temporal_seq_bchain(tseq *s, int P, vbm_error *err)
{
    size_t T = (size_t)s->T;
    double *xi, *Hb, *fb;

    if (s->temporal)
        return vbm_fail(err, VBM_EINVAL, "", "the structured form is one of eq. 18");
    if (s->bchain)
        return VBM_OK;
    xi = vbm_calloc(T * P * 4, sizeof(double));
    Hb = vbm_calloc((size_t)P, sizeof(double));
    fb = vbm_calloc(10 * T, sizeof(double));
    if (!xi || !Hb || !fb) {
        free(xi);
        free(Hb);
        free(fb);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory for %ld frames", s->T);
    }
    for (size_t t = 0; t < T; t++)
        for (int p = 0; p < P; p++) {
            double q0 = s->q0[t * P + p], q1 = s->q1[t * P + p];
            Hb[p] -= (q0 > 0 ? q0 * log(q0) : 0.0) + (q1 > 0 ? q1 * log(q1) : 0.0);
        }
    for (size_t t = 1; t < T; t++)
        for (int p = 0; p < P; p++) {
            double r0 = s->q0[(t - 1) * P + p], r1 = s->q1[(t - 1) * P + p];
            double q0 = s->q0[t * P + p], q1 = s->q1[t * P + p];
            double *x = xi + (t * P + p) * 4;
            x[0] = r0 * q0;
            x[1] = r0 * q1;
            x[2] = r1 * q0;
            x[3] = r1 * q1;
        }
    free(s->xi);
    free(s->Hb);
    free(s->fb);
    s->xi = xi;
    s->Hb = Hb;
    s->fb = fb;
    s->bchain = 1;
    return VBM_OK;
}

/* The mean of a_{t,p} (attribute q) given b_{t,p} = b: mu1 or mu2. */
static double bc_mean(const tseq *s, int K, long t, int k, int b)
{
    return b ? s->mu1[(size_t)t * K + k] : s->mu2[(size_t)t * K + k];
}

/* q(a_{t,p} | b_{t,p} = b) for b = 0, 1 <- their optima given q(b_{1:T,p}) and every other
 * factor: as site_update, but the AR(1) neighbours enter through their means given b_{t,p}
 * (from the pair marginals) rather than their marginal means. scr holds 3 Q^2 + 4 Q doubles.
 * Returns non-zero when Sigma_{t,p}^{-1} is not positive definite. */
static int bc_site_a(const temporal_exp *e, tseq *s, long t, int p, double *scr)
{
    int Q = e->Q, K = e->K, P = e->P;
    long T = s->T;
    double *J = scr, *h1 = J + Q * Q, *J2 = h1 + Q, *h2 = J2 + Q, *mu = h2 + Q;
    double *S = s->S1 + ((size_t)t * P + p) * Q * Q;

    for (int b = 1; b >= 0; b--) {
        double qb = b ? s->q1[t * P + p] : s->q0[t * P + p], wp[2] = {0, 0}, wn[2] = {0, 0};
        if (t > 0) {
            const double *x = s->xi + ((size_t)t * P + p) * 4;
            if (qb > 1e-300) {
                wp[0] = x[b] / qb;
                wp[1] = x[2 + b] / qb;
            } else {
                wp[0] = s->q0[(t - 1) * P + p];
                wp[1] = s->q1[(t - 1) * P + p];
            }
        }
        if (t < T - 1) {
            const double *x = s->xi + ((size_t)(t + 1) * P + p) * 4;
            if (qb > 1e-300) {
                wn[0] = x[2 * b] / qb;
                wn[1] = x[2 * b + 1] / qb;
            } else {
                wn[0] = s->q0[(t + 1) * P + p];
                wn[1] = s->q1[(t + 1) * P + p];
            }
        }
        for (int q = 0; q < Q; q++) {
            int k = p * Q + q;
            double v = 0.0;
            J2[q] = (t == 0 ? 1.0 / e->sigma_a2 : e->einv[k]) + (t < T - 1 ? e->elam2[k] : 0.0);
            if (t > 0)
                v += wp[0] * bc_mean(s, K, t - 1, k, 0) + wp[1] * bc_mean(s, K, t - 1, k, 1);
            if (t < T - 1)
                v += wn[0] * bc_mean(s, K, t + 1, k, 0) + wn[1] * bc_mean(s, K, t + 1, k, 1);
            h2[q] = e->elam[k] * v;
        }
        if (b == 0) {
            for (int q = 0; q < Q; q++) {
                size_t k = (size_t)t * K + p * Q + q;
                s->mu2[k] = h2[q] / J2[q];
                s->s2[k] = 1.0 / J2[q];
            }
            continue;
        }
        if (site_given_on(e, s, t, p, J2, h2, h1, J, &s->ld1[t * P + p], mu, S) != 0)
            return 1;
        for (int q = 0; q < Q; q++) {
            size_t k = (size_t)t * K + p * Q + q;
            s->mu1[k] = mu[q];
            s->ex[k] = s->q1[t * P + p] * mu[q];
        }
    }
    return 0;
}

/* The terms of the free energy in a_{t,p} given b_{t,p} = b (its AR(1) self terms, for b = 1 the
 * data, the entropy of q(a_{t,p} | b)), the unary potential of the chain over b_{.,p}. */
static double bc_unary(const temporal_exp *e, const tseq *s, long t, int p, int b)
{
    int Q = e->Q, K = e->K, P = e->P;
    long T = s->T;
    double u = 0.5 * Q * (TEMPORAL_LOG2PI + 1.0);

    for (int q = 0; q < Q; q++) {
        int k = p * Q + q;
        size_t j = (size_t)t * K + k;
        double J2 = (t == 0 ? 1.0 / e->sigma_a2 : e->einv[k]) + (t < T - 1 ? e->elam2[k] : 0.0);
        double m2 = b ? s->S1[((size_t)t * P + p) * Q * Q + q * Q + q] + s->mu1[j] * s->mu1[j]
                      : s->s2[j] + s->mu2[j] * s->mu2[j];
        u -= 0.5 * J2 * m2;
        if (!b)
            u += 0.5 * log(s->s2[j]);
    }
    if (b) {
        const double *S = s->S1 + ((size_t)t * P + p) * Q * Q, *mu = s->mu1 + (size_t)t * K + p * Q;
        const double *x = s->ex + (size_t)t * K;
        u -= 0.5 * s->ld1[t * P + p];
        for (int q = 0; q < Q; q++) {
            int k = p * Q + q;
            double r = s->wry[t * K + k];
            for (int i = 0; i < K; i++)
                if (i / Q != p)
                    r -= e->M[k * K + i] * x[i];
            u += mu[q] * r;
            for (int rr = 0; rr < Q; rr++)
                u -= 0.5 * e->M[k * K + p * Q + rr] * (S[q * Q + rr] + mu[q] * mu[rr]);
        }
    }
    if (t == 0)
        u += e->logpi[b];
    return u;
}

/* The pair potential of the chain over b_{.,p} between b_{t-1} = m and b_t = n (t >= 1):
 * <log T_{m,n}> + the AR(1) cross term of the means given them. */
static double bc_pair(const temporal_exp *e, const tseq *s, long t, int p, int mm, int n)
{
    int Q = e->Q, K = e->K;
    double v = e->elogT[2 * mm + n];

    for (int q = 0; q < Q; q++) {
        int k = p * Q + q;
        v += e->elam[k] * bc_mean(s, K, t - 1, k, mm) * bc_mean(s, K, t, k, n);
    }
    return v;
}

/* q(b_{1:T,p}) <- its optimum given the q(a_{t,p} | b) and every other factor: forward-backward
 * in logs; sets q0, q1, xi, Hb[p] and the moments ex, ea, eaa of identity p. */
static void bc_chain(const temporal_exp *e, tseq *s, int p)
{
    int P = e->P, Q = e->Q, K = e->K;
    long T = s->T;
    double *u = s->fb, *pr = u + 2 * T, *al = pr + 4 * T, *be = al + 2 * T;

    for (long t = 0; t < T; t++) {
        u[2 * t] = bc_unary(e, s, t, p, 0);
        u[2 * t + 1] = bc_unary(e, s, t, p, 1);
        if (t > 0)
            for (int i = 0; i < 4; i++)
                pr[4 * t + i] = bc_pair(e, s, t, p, i / 2, i % 2);
    }
    s->Hb[p] = chain_fb(T, P, p, u, pr, 4, al, be, s);
    for (long t = 0; t < T; t++) {
        double q1 = s->q1[t * P + p], q0 = s->q0[t * P + p];
        for (int q = 0; q < Q; q++) {
            size_t k = (size_t)t * K + p * Q + q;
            double v1 = s->S1[((size_t)t * P + p) * Q * Q + q * Q + q];
            s->ex[k] = q1 * s->mu1[k];
            s->ea[k] = q1 * s->mu1[k] + q0 * s->mu2[k];
            s->eaa[k] = q1 * (v1 + s->mu1[k] * s->mu1[k]) + q0 * (s->s2[k] + s->mu2[k] * s->mu2[k]);
        }
    }
}

/* One VBE sweep over t = 1..T (t = T..1 when backward is non-zero: alternating the direction
 * carries evidence both ways along the chain in two sweeps), p = 1..P. */
vbm_status temporal_seq_sweep(const temporal_exp *e, tseq *s, int backward, double *scr,
                              vbm_error *err)
{
    if (s->temporal) {
        /* per identity (in the order of p0, pdir): q(b_{1:T,p}), then q(a_{1:T,p}) */
        for (int j = 0; j < e->P; j++) {
            int p = (s->p0 + (s->pdir ? e->P - j : j)) % e->P;
            chain_b(e, s, p, s->fb, s->fb + 2 * s->T, s->fb + 4 * s->T);
            if (chain_a(e, s, p, scr) != 0)
                return vbm_fail(err, VBM_ENUMERIC, "",
                                "the precision of a_{.,%d} is not positive definite", p);
        }
        return VBM_OK;
    }
    if (s->bchain) {
        /* per identity: q(a_{t,p} | b) along the frames, then q(b_{1:T,p}) */
        for (int j = 0; j < e->P; j++) {
            int p = (s->p0 + (s->pdir ? e->P - j : j)) % e->P;
            for (long i = 0; i < s->T; i++) {
                long t = backward ? s->T - 1 - i : i;
                if (bc_site_a(e, s, t, p, scr) != 0)
                    return vbm_fail(err, VBM_ENUMERIC, "",
                                    "the precision of a_{%ld,%d} is not positive definite", t, p);
            }
            bc_chain(e, s, p);
        }
        return VBM_OK;
    }
    for (long i = 0; i < s->T; i++)
        for (int j = 0; j < e->P; j++) {
            long t = backward ? s->T - 1 - i : i;
            int p = (s->p0 + (s->pdir ? e->P - j : j)) % e->P;
            if (site_update(e, s, t, p, scr) != 0)
                return vbm_fail(err, VBM_ENUMERIC, "",
                                "the precision of a_{%ld,%d} is not positive definite", t, p);
        }
    return VBM_OK;
}
