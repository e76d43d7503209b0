/* mixture_update.c -- the update step of one group of the mixture-based memory (Theorem 4):
 * q(b_h) and q(M_h) of every cluster, directly or on the Gram path (R_h and mu_bh implicit),
 * and their write-back into the memory. */
#define _POSIX_C_SOURCE 200809L
#include "mixture_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"
#include "numerics/vexp.h"

static vbm_status mixgroup_update_gram(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                       vbm_error *err);
static void weigh_cluster(mixgroup_work *w, int h, double *out);

LA_HOT vbm_status mixgroup_update(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                  vbm_error *err)
{
    if (w->gram)
        return mixgroup_update_gram(mem, prior, w, err);
    int H = w->H, K = w->K, cg = w->cg, C = w->cs.C, g = w->g;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K, kc = (size_t)K * cg;
    const double *Z = w->cs.mu + w->cs.goff;
    size_t ylen = (size_t)H * (kc + cg);
    if (!w->Y && !(w->Y = vbm_calloc(ylen, sizeof(double))))
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for a mixture update (H=%d, K=%d, cg=%d)", H, K, cg);
    /* Each cluster's Q_h = Wt_h W_h^T / s2 + P0 + N_h Sw_h / s2 (factored below), from W_h
     * and q(s = h) without forming Wt_h = W_h diag(theta_h); then Wt_h in place of W_h
     * while it is still in cache (W_h is not read again before the next address step
     * writes it), so the update's product reads W, and no HK x T buffer of its own is
     * written. Q_h lives in the cluster's scratch (its Gram-path slot M2, unused on this
     * path). */
    for (int h = 0; h < H; h++) {
        double *Wh = w->W + (size_t)h * K * T;
        int gh = g * H + h;
        double *Q = w->gsc + (size_t)h * mixgroup_gsc_len(K) + kk;
        la_gemm_sym_diag(K, (int)T, 1.0 / s2, Wh, (int)T, w->thetaT + (size_t)h * T, Q, K);
        weigh_cluster(w, h, Wh);
        double N = w->cl[h].N;
        const double *P0 = prior->P0 + gh * kk, *Sw = w->Sw + h * kk;
        for (size_t i = 0; i < kk; i++)
            Q[i] += P0[i] + N * Sw[i] / s2;
        la_symmetrize_lower(K, Q); /* guard against rounding asymmetry */
    }
    /* Y = Wt Z and (with a shift) Theta^T Z below it, as one product over all
     * clusters: [Wt; Theta^T] is W, weighed, with q(s) copied into its last H rows. */
    int rows = H * K;
    if (mem->cfg.shift) {
        memcpy(w->W + (size_t)H * K * T, w->thetaT, sizeof(double) * (size_t)H * T);
        rows += H;
    }
    la_gemm(0, 0, rows, cg, (int)T, 1.0, w->W, (int)T, Z, C, 0.0, w->Y, cg);
    if (mem->cfg.shift) {
        /* q(b_h): Eq. 198-199 with the current q(M_h). */
        const double *sz = w->Y + (size_t)H * kc;
        for (int h = 0; h < H; h++) {
            int gh = g * H + h;
            double prec = 1.0 / prior->s2_b0[gh] + w->cl[h].N / s2;
            double sb = 1.0 / prec;
            const double *R = BLK_R(mem, gh), *mb0 = prior->mu_b0 + (size_t)gh * cg;
            double *mb = BLK_B(mem, gh);
            for (int c = 0; c < cg; c++) {
                double rw = 0.0;
                for (int k = 0; k < K; k++)
                    rw += R[(size_t)k * cg + c] * w->sw[h * K + k];
                mb[c] = sb * (mb0[c] / prior->s2_b0[gh] + (sz[(size_t)h * cg + c] - rw) / s2);
            }
            mem->s2_b[gh] = sb;
        }
    }
    /* q(M_h): Eq. 206-207. */
    for (int h = 0; h < H; h++) {
        int gh = g * H + h;
        double *Q = w->gsc + (size_t)h * mixgroup_gsc_len(K) + kk;
        double *R = BLK_R(mem, gh), *U = BLK_U(mem, gh);
        const double *mb = BLK_B(mem, gh), *Yh = w->Y + (size_t)h * kc,
                     *P0R0 = prior->P0R0 + gh * kc;
        for (int k = 0; k < K; k++) {
            double sw = w->sw[h * K + k];
            for (int c = 0; c < cg; c++)
                R[(size_t)k * cg + c] =
                    P0R0[(size_t)k * cg + c]
                    + (Yh[(size_t)k * cg + c] - (mem->cfg.shift ? sw * mb[c] : 0.0)) / s2;
        }
        if (la_chol(K, Q) != 0)
            return vbm_fail(err, VBM_ENUMERIC, NULL,
                            "memory precision of cluster %d is not positive definite", h);
        la_chol_solve(K, cg, Q, R, cg);
        memcpy(U, Q, kk * sizeof(double));
        la_chol_inverse(K, U);
    }
    return VBM_OK;
}

/* Soft count N_h, Wt_h = W_h diag(theta_h) into out (K x T; W_h itself: in place) and
 * sw_h = Wt_h 1 (both paths). */
LA_HOT static void weigh_cluster(mixgroup_work *w, int h, double *out)
{
    int K = w->K;
    long T = w->T;
    const double *Wh = w->W + (size_t)h * K * T, *th = w->thetaT + (size_t)h * T;
    w->cl[h].N = la_sum((int)T, th);
    for (int k = 0; k < K; k++) {
        const double *restrict tr = th;
        const double *src = Wh + (size_t)k * T; /* vk itself when weighed in place */
        double *vk = out + (size_t)k * T;
        /* the products and their sum in one pass, with la_sum's four partial
         * sums (terms t mod 4, the last T mod 4 in the first): its bits */
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        long t = 0;
        for (; t + 4 <= T; t += 4) {
            double v0 = src[t] * tr[t], v1 = src[t + 1] * tr[t + 1], v2 = src[t + 2] * tr[t + 2],
                   v3 = src[t + 3] * tr[t + 3];
            vk[t] = v0;
            vk[t + 1] = v1;
            vk[t + 2] = v2;
            vk[t + 3] = v3;
            s0 += v0;
            s1 += v1;
            s2 += v2;
            s3 += v3;
        }
        for (; t < T; t++) {
            vk[t] = src[t] * tr[t];
            s0 += vk[t];
        }
        w->sw[h * K + k] = (s0 + s1) + (s2 + s3);
    }
}

/* q(b_h) (Eq. 198-199) in the first Gram update, where R_h is still explicit:
 *   mu_bh <- sb (mu_b0h / s2_b0 + (Z^T theta_h - R_h^T sw_h) / s2),
 * which starts the implicit representation (see mixgroup_work) with
 * e_h = R_h^T sw_h (stored in the memory's mu_bh), beta_h = -sb / s2,
 * alpha_h = sb / s2_b0, x_h = sb theta_h / s2 and y_h = 0. Z e_h = P_h^T sw_h
 * comes from P_h = R_h Z^T of the address step. */
LA_HOT static void shift_begin_cluster(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                       int h)
{
    int H = w->H, K = w->K, cg = w->cg, g = w->g, gh = g * H + h;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    size_t kc = (size_t)K * cg;
    const double *R = BLK_R(mem, gh), *swh = w->sw + h * K, *Ph = w->P + (size_t)h * K * T;
    const double *m0 = prior->mu_b0 + (size_t)gh * cg, *A = prior->P0R0 + (size_t)gh * kc;
    double *e = BLK_B(mem, gh), *ze = w->bZe + (size_t)h * T;
    memset(e, 0, sizeof(double) * cg);
    memset(ze, 0, sizeof(double) * T);
    for (int k = 0; k < K; k++) {
        const double *rk = R + (size_t)k * cg, *pk = Ph + (size_t)k * T;
        for (int c = 0; c < cg; c++)
            e[c] += swh[k] * rk[c];
        for (long t = 0; t < T; t++)
            ze[t] += swh[k] * pk[t];
    }
    double ee = 0.0, em0 = 0.0, m0m0 = 0.0;
    for (int c = 0; c < cg; c++) {
        ee += e[c] * e[c];
        em0 += e[c] * m0[c];
        m0m0 += m0[c] * m0[c];
    }
    w->cl[h].ee = ee;
    w->cl[h].em0 = em0;
    w->cl[h].m0m0 = m0m0;
    for (int k = 0; k < K && w->prior_mean; k++) {
        double ae = 0.0, am = 0.0;
        for (int c = 0; c < cg; c++) {
            ae += A[(size_t)k * cg + c] * e[c];
            am += A[(size_t)k * cg + c] * m0[c];
        }
        w->bAe[h * K + k] = ae;
        w->bAm0[h * K + k] = am;
    }
    double s20 = prior->s2_b0[gh];
    double sb = 1.0 / (1.0 / s20 + w->cl[h].N / s2);
    const double *th = w->thetaT + (size_t)h * T;
    double *x = w->bx + (size_t)h * T;
    for (long t = 0; t < T; t++)
        x[t] = sb / s2 * th[t];
    memset(w->by + (size_t)h * K, 0, sizeof(double) * K);
    w->cl[h].beta = -sb / s2;
    w->cl[h].alpha = sb / s20;
    w->cl[h].s2b = sb;
}

/* q(b_h) (Eq. 198-199) in the later Gram updates, R_h implicit. With v_h =
 * Q_h^{-1} sw_h (Q_h of the last update: the caller solves for it), u_h =
 * theta_h - Wtc_h^T v_h / s2 and c_h = swc_h . v_h / s2,
 *   Z^T theta_h - R_h^T sw_h = Z^T u_h - P0R0_h^T v_h + mu_bh c_h,
 * so mu_bh <- sb (mu_b0h / s2_b0 + that / s2) only moves the coefficients of
 * the implicit representation. */
LA_HOT static void shift_step_cluster(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                      int h, const double *v)
{
    int K = w->K, gh = w->g * w->H + h;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    double c = 0.0;
    for (int k = 0; k < K; k++)
        c += w->swc[h * K + k] * v[k];
    double s20 = prior->s2_b0[gh];
    double sb = 1.0 / (1.0 / s20 + w->cl[h].N / s2);
    double f = sb / s2, gam = f * c / s2;
    double *x = w->bx + (size_t)h * T, *y = w->by + (size_t)h * K;
    const double *th = w->thetaT + (size_t)h * T;
    for (long t = 0; t < T; t++)
        x[t] = gam * x[t] + f * th[t];
    for (int k = 0; k < K; k++) {
        const double *wk = w->Wtc + ((size_t)h * K + k) * T;
        double a = f * v[k] / s2;
        for (long t = 0; t < T; t++)
            x[t] -= a * wk[t];
        y[k] = gam * y[k] - f * v[k];
    }
    w->cl[h].beta *= gam;
    w->cl[h].alpha = sb / s20 + gam * w->cl[h].alpha;
    w->cl[h].s2b = sb;
}

/* The statistics of cluster h's implicit shift that the steps need: Z mu_bh,
 * P0R0_h mu_bh, |mu_bh|^2 and mu_bh . mu_b0h, from G x_h and the products kept
 * since the representation began. */
LA_HOT static void shift_stats_cluster(mixgroup_work *w, int h)
{
    int K = w->K;
    long T = w->T;
    size_t kk = (size_t)K * K;
    const double *x = w->bx + (size_t)h * T, *y = w->by + (size_t)h * K;
    double *gx = w->bgx + (size_t)h * T;
    la_gemm(0, 0, 1, (int)T, (int)T, 1.0, x, (int)T, w->G, (int)T, 0.0, gx,
            (int)T); /* G symmetric */
    double beta = w->cl[h].beta, alpha = w->cl[h].alpha;
    const double *ze = w->bZe + (size_t)h * T,
                 *zm0 = w->shift_mean ? w->zmu0 + (size_t)h * T : NULL;
    double *zb = w->zb + (size_t)h * T, *amb = w->bAmb + (size_t)h * K;
    double ee = w->cl[h].ee, em0 = w->cl[h].em0, m0m0 = w->cl[h].m0m0;
    double emb = beta * ee + alpha * em0 + la_dot((int)T, ze, x), m0mb = beta * em0 + alpha * m0m0;
    for (long t = 0; t < T; t++)
        zb[t] = beta * ze[t] + gx[t];
    if (zm0) {
        for (long t = 0; t < T; t++)
            zb[t] += alpha * zm0[t];
        m0mb += la_dot((int)T, zm0, x);
    }
    double xzb = 0.0, yamb = 0.0;
    if (w->prior_mean) {
        const double *AZh = w->AZ + (size_t)h * K * T, *AAt = w->AAt + h * kk;
        const double *ae = w->bAe + h * K, *am0 = w->bAm0 + h * K;
        for (int k = 0; k < K; k++) {
            const double *azk = AZh + (size_t)k * T;
            double a = beta * ae[k] + alpha * am0[k] + la_dot((int)T, azk, x);
            for (long t = 0; t < T; t++)
                zb[t] += azk[t] * y[k];
            for (int j = 0; j < K; j++)
                a += AAt[k * K + j] * y[j];
            amb[k] = a;
            emb += ae[k] * y[k];
            m0mb += am0[k] * y[k];
            yamb += y[k] * a;
        }
    }
    xzb = la_dot((int)T, x, zb);
    w->cl[h].bb = beta * emb + alpha * m0mb + xzb + yamb;
    w->cl[h].bm0 = m0mb;
}

/* The Gram update of cluster h (see mixgroup_update_gram), in parts run in turn
 * over a range of clusters by update_gram_run (see mixgroup_address_pre for why):
 * update_pre forms Q_h (into LQ_h) after the q(b_h) step; update_factor factors
 * it and forms U_h; update_mid forms R_h Z^T (P_h) and Ytil Ytil^T (YY) and the
 * right-hand side of R_h mu_bh; update_post_part and update_solve solve for
 * R R^T and R mu_b and finish. Their scratch is the cluster's (gsc). */
typedef struct {
    double *M2, *YY, *X, *AW, *Q, *M1, *Amb, *wzb, *v, *rhs;
} gram_scratch;

static gram_scratch gram_scratch_of(const mixgroup_work *w, int h)
{
    size_t kk = (size_t)w->K * w->K;
    gram_scratch g;
    g.M2 = w->gsc + (size_t)h * mixgroup_gsc_len(w->K) + kk; /* after the address step's A */
    g.YY = g.M2 + kk;
    g.X = g.YY + kk;
    g.AW = g.X + kk;
    g.Q = g.AW + kk;
    g.M1 = g.Q + kk;
    g.Amb = g.M1 + kk;
    g.wzb = g.Amb + w->K;
    g.v = g.wzb + w->K;
    g.rhs = g.v + w->K;
    return g;
}

LA_HOT static void update_pre(vbm_memory *mem, const prior_t *prior, mixgroup_work *w, int h)
{
    int K = w->K, gh = w->g * w->H + h, shift = mem->cfg.shift;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    gram_scratch g = gram_scratch_of(w, h);
    if (shift) { /* q(b_h), kept implicit from the first update on */
        if (w->implicit)
            shift_step_cluster(mem, prior, w, h, g.v);
        else
            shift_begin_cluster(mem, prior, w, h);
        shift_stats_cluster(w, h);
    }
    /* q(M_h): Q_h = Wt_h W_h^T / s2 + P0 + N_h Sw_h / s2; R_h = Q_h^{-1} Ytil_h with
     * Ytil_h = A_h + (Wt_h Z - sw_h mu_bh^T) / s2, kept implicit. */
    double N = w->cl[h].N;
    const double *Wth = w->Wt + (size_t)h * K * T;
    la_gemm(0, 0, K, (int)T, (int)T, 1.0, Wth, (int)T, w->G, (int)T, 0.0, w->GT + (size_t)h * K * T,
            (int)T); /* Wt_h G */
    const double *P0 = prior->P0 + gh * kk, *Sw = w->Sw + h * kk;
    double *LQ = w->LQ + h * kk;
    la_gemm_sym(K, (int)T, 1.0 / s2, Wth, (int)T, w->W + (size_t)h * K * T, (int)T, LQ, K);
    for (size_t i = 0; i < kk; i++)
        LQ[i] += P0[i] + N * Sw[i] / s2;
    la_symmetrize_lower(K, LQ);
}

/* Returns 0, or 1 when the memory precision is not positive definite. */
LA_HOT static int update_factor(vbm_memory *mem, mixgroup_work *w, int h)
{
    int K = w->K, gh = w->g * w->H + h;
    size_t kk = (size_t)K * K;
    double *LQ = w->LQ + h * kk, *U = BLK_U(mem, gh);
    if (la_chol(K, LQ) != 0)
        return 1;
    w->cl[h].logdetQ = la_chol_logdet(K, LQ);
    memcpy(U, LQ, kk * sizeof(double));
    la_chol_inverse(K, U);
    return 0;
}

LA_HOT static void update_mid(vbm_memory *mem, mixgroup_work *w, int h)
{
    int K = w->K, shift = mem->cfg.shift;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    gram_scratch g = gram_scratch_of(w, h);
    const double *Wth = w->Wt + (size_t)h * K * T, *GTh = w->GT + (size_t)h * K * T;
    const double *swh = w->sw + h * K, *zb = w->zb + (size_t)h * T;
    double bb = shift ? w->cl[h].bb : 0.0; /* |mu_bh|^2, from shift_stats_cluster */
    for (int k = 0; k < K; k++) {
        g.Amb[k] = w->prior_mean && shift ? w->bAmb[h * K + k] : 0.0;
        g.wzb[k] = shift ? la_dot((int)T, Wth + (size_t)k * T, zb) : 0.0;
    }
    /* P_h = Q^{-1} (A Z^T + (Wt G - sw (Z mu_b)^T) / s2) */
    double *Ph = w->P + (size_t)h * K * T, is2 = 1.0 / s2;
    for (int k = 0; k < K; k++) {
        const double *gk = GTh + (size_t)k * T,
                     *azk = w->prior_mean ? w->AZ + ((size_t)h * K + k) * T : NULL;
        double *pk = Ph + (size_t)k * T, sk = shift ? swh[k] : 0.0;
        for (long t = 0; t < T; t++)
            pk[t] = (gk[t] - sk * zb[t]) * is2;
        if (azk)
            for (long t = 0; t < T; t++)
                pk[t] += azk[t];
    }
    la_chol_solve(K, (int)T, w->LQ + h * kk, Ph, (int)T);
    /* Ytil Ytil^T, then (update_post) R R^T = Q^{-1} Ytil Ytil^T Q^{-1} */
    la_gemm_sym(K, (int)T, 1.0, GTh, (int)T, Wth, (int)T, g.M2, K); /* Wt G Wt^T */
    if (w->prior_mean)
        la_gemm(0, 1, K, K, (int)T, 1.0, w->AZ + (size_t)h * K * T, (int)T, Wth, (int)T, 0.0, g.AW,
                K);
    const double *AAt = w->prior_mean ? w->AAt + h * kk : NULL;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            double y =
                (g.M2[i * K + j] - g.wzb[i] * swh[j] - swh[i] * g.wzb[j] + bb * swh[i] * swh[j])
                / (s2 * s2);
            if (w->prior_mean)
                y += AAt[i * K + j]
                     + (g.AW[i * K + j] + g.AW[j * K + i] - g.Amb[i] * swh[j] - swh[i] * g.Amb[j])
                           / s2;
            g.YY[i * K + j] = y;
        }
    for (int i = 0; i < K; i++)
        for (int j = 0; j < i; j++)
            g.YY[i * K + j] = g.YY[j * K + i] = 0.5 * (g.YY[i * K + j] + g.YY[j * K + i]);
    /* R mu_b = Q^{-1} (A mu_b + (Wt Z mu_b - sw |mu_b|^2) / s2) */
    for (int k = 0; k < K; k++)
        g.rhs[k] = g.Amb[k] + (g.wzb[k] - swh[k] * bb) / s2;
}

/* update_post's Q^{-1} solves: which 0 is X = Q^{-1} YY (X holding YY), 1 is
 * SR = Q^{-1} X^T (SR holding X^T), 2 is R mu_b = Q^{-1} rhs; 3 is the shift
 * step's v = Q^{-1} sw (v holding sw; Q of the last update). */
static void update_solve(mixgroup_work *w, int h, int which)
{
    int K = w->K;
    size_t kk = (size_t)K * K;
    gram_scratch g = gram_scratch_of(w, h);
    const double *LQ = w->LQ + h * kk;
    if (which == 0)
        la_chol_solve(K, K, LQ, g.X, K);
    else if (which == 1)
        la_chol_solve(K, K, LQ, w->SR + h * kk, K);
    else
        la_chol_solve(K, 1, LQ, which == 2 ? g.rhs : g.v, 1);
}

/* The parts of update_post between its solves (part 0 before the first). */
LA_HOT static void update_post_part(vbm_memory *mem, mixgroup_work *w, int h, int part)
{
    int K = w->K, gh = w->g * w->H + h;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    gram_scratch g = gram_scratch_of(w, h);
    double *SR = w->SR + h * kk;
    if (part == 0) {
        memcpy(g.X, g.YY, kk * sizeof(double)); /* then Q^{-1} YY */
    } else if (part == 1) {
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                SR[i * K + j] = g.X[j * K + i]; /* then Q^{-1} YY Q^{-1} */
    } else if (part == 2) {
        for (int i = 0; i < K; i++)
            for (int j = 0; j < i; j++)
                SR[i * K + j] = SR[j * K + i] = 0.5 * (SR[i * K + j] + SR[j * K + i]);
    } else {
        const double *U = BLK_U(mem, gh), *swh = w->sw + h * K;
        memcpy(w->Rmb + h * K, g.rhs, sizeof(double) * K);
        /* <A, R> = tr(U (Ytil A^T)^T), Ytil A^T = A A^T + (AW^T - sw (A mu_b)^T) / s2 */
        double ar = 0.0;
        if (w->prior_mean) {
            const double *AAt = w->AAt + h * kk;
            for (int i = 0; i < K; i++)
                for (int j = 0; j < K; j++)
                    g.M1[i * K + j] = AAt[i * K + j] + (g.AW[j * K + i] - swh[i] * g.Amb[j]) / s2;
            for (size_t i = 0; i < kk; i++)
                ar += U[i] * g.M1[i];
        }
        w->cl[h].AR = ar;
        memcpy(w->swc + h * K, swh, sizeof(double) * K);
    }
}

typedef struct {
    vbm_memory *mem;
    const prior_t *prior;
    mixgroup_work *w;
} upd_job;

/* update_solve (which) for the clusters of [b, e) that have not failed, four at
 * a time in vector lanes (la_chol_solve4: the same bits as one at a time). */
static void solve_clusters(mixgroup_work *w, long b, long e, int which)
{
    int K = w->K;
    size_t kk = (size_t)K * K;
    if (K > 16 || e - b < 2) { /* beyond the lanes code, or one cluster: one at a time */
        for (long h = b; h < e; h++)
            if (!w->cl[h].st)
                update_solve(w, (int)h, which);
        return;
    }
    double padL[16 * 16], padB[4][16 * 16];
    memset(padL, 0, sizeof(double) * kk);
    for (int k = 0; k < K; k++)
        padL[(size_t)k * K + k] = 1.0;
    for (long h = b; h < e;) {
        double *L[4], *B[4];
        int n = 0;
        for (; h < e && n < 4; h++)
            if (!w->cl[h].st) {
                gram_scratch g = gram_scratch_of(w, (int)h);
                L[n] = w->LQ + h * kk;
                B[n++] = which == 0 ? g.X : which == 1 ? w->SR + h * kk : which == 2 ? g.rhs : g.v;
            }
        if (n == 0)
            break;
        for (int l = n; l < 4; l++) {
            L[l] = padL;
            B[l] = padB[l];
            memset(padB[l], 0, sizeof(double) * kk);
        }
        if (which >= 2)
            la_chol_solve4(K, 1, L, B, 1);
        else
            la_chol_solve4(K, K, L, B, K);
    }
}

/* update_factor (which 0: Q_h in LQ_h -> its factor, log det Q_h and U_h) or
 * mixgroup_address_factor (which 1: A_h -> log det Sigma_w,h and Sigma_w,h) for the
 * clusters of [b, e) that have not failed, four at a time in vector lanes
 * (la_chol4, la_chol_inverse4: the same bits as one at a time). Sets st of the
 * clusters whose matrix is not positive definite. */
static void factor_clusters(vbm_memory *mem, mixgroup_work *w, long b, long e, int which)
{
    int K = w->K;
    size_t kk = (size_t)K * K;
    if (K > 16 || e - b < 2) { /* beyond the lanes code, or one cluster: one at a time */
        for (long h = b; h < e; h++)
            if (!w->cl[h].st)
                w->cl[h].st =
                    which ? mixgroup_address_factor(w, (int)h) : update_factor(mem, w, (int)h);
        return;
    }
    double pad[4][16 * 16]; /* identity matrices for the lanes no cluster fills */
    for (long h = b; h < e;) {
        double *F[4], *I[4];
        long hs[4];
        int n = 0;
        for (; h < e && n < 4; h++)
            if (!w->cl[h].st) {
                hs[n] = h;
                F[n++] = which ? w->gsc + (size_t)h * mixgroup_gsc_len(K) : w->LQ + h * kk;
            }
        if (n == 0)
            break;
        for (int l = n; l < 4; l++) {
            memset(pad[l], 0, sizeof(double) * kk);
            for (int k = 0; k < K; k++)
                pad[l][(size_t)k * K + k] = 1.0;
            F[l] = pad[l];
        }
        int bad = la_chol4(K, F);
        for (int l = 0; l < 4; l++) {
            I[l] = F[l]; /* lanes without a result get inverted in place, unused */
            if (l >= n)
                continue;
            long c = hs[l];
            if (bad >> l & 1) {
                w->cl[c].st = which ? 2 : 1;
                continue;
            }
            double *out = which ? w->Sw + c * kk : BLK_U(mem, w->g * w->H + c);
            if (which)
                w->cl[c].logdetSw = -la_chol_logdet(K, F[l]);
            else
                w->cl[c].logdetQ = la_chol_logdet(K, F[l]);
            memcpy(out, F[l], kk * sizeof(double));
            I[l] = out;
        }
        if (n > 0 && bad != (1 << n) - 1)
            la_chol_inverse4(K, I);
    }
}

/* The Gram update of clusters [b, e), then their share of the next address
 * step (while their data is in this thread's cache). On one thread each part runs for every
 * cluster of the range before the next part, so that the K x K factorizations
 * and solves of different clusters, each a chain of dependent operations,
 * overlap (4.6 % faster at the paper's configuration). On a team each thread
 * takes its clusters one at a time: with every thread in the same phase at
 * once, the split fit measured 10 % slower on the two vCPUs of the benchmark
 * machine. The arithmetic is the same either way. */
static void update_gram_run(const void *ctx, long b, long e, int worker)
{
    const upd_job *j = ctx;
    vbm_memory *mem = j->mem;
    mixgroup_work *w = j->w;
    int shift = mem->cfg.shift;
    if (team_size(w->team) > 1 && e - b > 1) { /* on a team: one cluster at a time (see above) */
        for (long h = b; h < e; h++)
            update_gram_run(ctx, h, h + 1, worker);
        return;
    }
    int step = shift && w->implicit; /* the shift step needs Q_h^{-1} sw_h first */
    for (long h = b; h < e; h++) {
        w->cl[h].st = 0;
        weigh_cluster(w, (int)h, w->Wt + (size_t)h * w->K * w->T);
        if (step)
            memcpy(gram_scratch_of(w, (int)h).v, w->sw + h * w->K, sizeof(double) * w->K);
    }
    if (step)
        solve_clusters(w, b, e, 3);
    for (long h = b; h < e; h++)
        update_pre(mem, j->prior, w, (int)h);
    factor_clusters(mem, w, b, e, 0);
    for (long h = b; h < e; h++)
        if (!w->cl[h].st)
            update_mid(mem, w, (int)h);
    for (int part = 0; part < 3; part++) {
        for (long h = b; h < e; h++)
            if (!w->cl[h].st)
                update_post_part(mem, w, (int)h, part);
        solve_clusters(w, b, e, part);
    }
    for (long h = b; h < e; h++)
        if (!w->cl[h].st) {
            update_post_part(mem, w, (int)h, 3);
            mixgroup_address_pre(mem, w, (int)h, 1);
        }
    factor_clusters(mem, w, b, e, 1);
    for (long h = b; h < e; h++)
        if (!w->cl[h].st)
            w->cl[h].st = mixgroup_address_post(mem, j->prior, w, (int)h, 1, worker, 1, shift);
}

/* The update of mixgroup_update (Eq. 198-199, then 206-207) on the Gram path:
 * the same posterior, but R_h is left implicit (see mixgroup_work) and the
 * statistics of the new R_h (R Z^T, R R^T, R mu_b, <P0R0, R>) are computed
 * from G = Z Z^T, so no product with the T x cg codes is formed. One item of
 * the team per cluster. */
static vbm_status mixgroup_update_gram(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                       vbm_error *err)
{
    vbm_status st = mixgroup_gram_prepare(mem, prior, w, err);
    if (st)
        return st;
    int H = w->H, K = w->K;
    long T = w->T;
    upd_job j = {mem, prior, w};
    team_for_shares(w->team, H, (long)H * (K * T * (T + 8) + CLUSTER_FIXED), update_gram_run, &j);
    st = mixgroup_cluster_status(w, err);
    if (st)
        return st;
    w->addressed = 1;
    if (mem->cfg.shift) {
        w->b_implicit = 1;
        for (int h = 0; h < H; h++)
            mem->s2_b[w->g * H + h] = w->cl[h].s2b;
    }
    double *wt = w->Wt; /* this update's Wt is kept as Wtc; the old Wtc buffer becomes scratch */
    w->Wt = w->Wtc;
    w->Wtc = wt;
    w->implicit = 1;
    return VBM_OK;
}

/* Write cluster h's implicit shift, then its implicit R_h, back into the memory. */
LA_HOT static void finish_cluster(vbm_memory *mem, const prior_t *prior, mixgroup_work *w, int h,
                                  int worker)
{
    int K = w->K, cg = w->cg, C = w->cs.C, gh = w->g * w->H + h;
    long T = w->T;
    double is2 = 1.0 / mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K, kc = (size_t)K * cg;
    const double *Z = w->cs.mu + w->cs.goff, *A = prior->P0R0 + (size_t)gh * kc;
    double *mb = BLK_B(mem, gh);
    if (w->b_implicit) {
        double beta = w->cl[h].beta, alpha = w->cl[h].alpha;
        const double *m0 = prior->mu_b0 + (size_t)gh * cg, *y = w->by + (size_t)h * K;
        double *zx = mixgroup_scratch_of(w, worker).zx;
        la_gemm(0, 0, 1, cg, (int)T, 1.0, w->bx + (size_t)h * T, (int)T, Z, C, 0.0, zx, cg);
        for (int c = 0; c < cg; c++) {
            double v = beta * mb[c] + alpha * m0[c] + zx[c];
            if (w->prior_mean)
                for (int k = 0; k < K; k++)
                    v += A[(size_t)k * cg + c] * y[k];
            mb[c] = v;
        }
    }
    if (!w->implicit)
        return;
    double *R = BLK_R(mem, gh), *Wc = w->Wtc + (size_t)h * K * T;
    if (!w->prior_mean) {
        /* R_h = Q^{-1} (Wtc_h Z - sw_h mu_bh^T) / s2 = (Q^{-1} Wtc_h / s2) Z - (Q^{-1} sw_h / s2)
         * mu_bh^T:
         * the solve on T columns rather than cg (Wtc_h is not read after the fit). */
        la_chol_solve(K, (int)T, w->LQ + h * kk, Wc, (int)T);
        la_gemm(0, 0, K, cg, (int)T, is2, Wc, (int)T, Z, C, 0.0, R, cg);
        if (mem->cfg.shift) {
            double *v = mixgroup_scratch_of(w, worker).kw;
            memcpy(v, w->swc + h * K, sizeof(double) * K);
            la_chol_solve(K, 1, w->LQ + h * kk, v, 1);
            for (int k = 0; k < K; k++) {
                double a = v[k] * is2;
                for (int c = 0; c < cg; c++)
                    R[(size_t)k * cg + c] -= a * mb[c];
            }
        }
        return;
    }
    double *Yh = mixgroup_scratch_of(w, worker).kw; /* K cg */
    la_gemm(0, 0, K, cg, (int)T, 1.0, Wc, (int)T, Z, C, 0.0, Yh, cg);
    for (int k = 0; k < K; k++) {
        double sw = w->swc[h * K + k];
        for (int c = 0; c < cg; c++)
            R[(size_t)k * cg + c] =
                A[(size_t)k * cg + c]
                + (Yh[(size_t)k * cg + c] - (mem->cfg.shift ? sw * mb[c] : 0.0)) * is2;
    }
    la_chol_solve(K, cg, w->LQ + h * kk, R, cg);
}

static void finish_run(const void *ctx, long b, long e, int worker)
{
    const upd_job *j = ctx;
    for (long h = b; h < e; h++)
        finish_cluster(j->mem, j->prior, j->w, (int)h, worker);
}

void mixgroup_finish(vbm_memory *mem, const prior_t *prior, mixgroup_work *w)
{
    if (!w->implicit && !w->b_implicit)
        return;
    upd_job j = {mem, prior, w};
    team_for_shares(w->team, w->H, (long)w->H * (w->K + 1) * w->T * w->cg, finish_run, &j);
    w->b_implicit = 0;
    w->implicit = 0;
}
