/* mixture_address.c -- the address step of one group of the mixture-based memory (Theorem 4):
 * q(w | s = h) of every cluster, the frame sweep and q(s), and the step's ELBO terms. */
#define _POSIX_C_SOURCE 200809L
#include "mixture_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"
#include "numerics/vexp.h"

/* The address step for cluster h comes in three parts, so that a loop over a
 * range of clusters can run each part for all of them before the next (the
 * K x K factorizations of different clusters are then independent work in
 * flight together): mixgroup_address_pre forms S_h = R_h R_h^T + cg U_h and the
 * precision A_h = I + S_h / s2 of q(w | s = h); mixgroup_address_factor factors it
 * (Sigma_w,h and its log-determinant); mixgroup_address_post does the rest: traces,
 * R_h mu_bh, W_h, the frame sweep (e_th, KL_w, the logits of q(s)) and the
 * cluster's KL terms when the ELBO is wanted. implicit and b_implicit say how
 * R_h and mu_bh are held (the fields of w, or the Gram update that calls these
 * before it sets them). */
LA_HOT void mixgroup_address_pre(const vbm_memory *mem, mixgroup_work *w, int h, int implicit)
{
    int K = w->K, cg = w->cg, gh = w->g * w->H + h;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    const double *R = BLK_R(mem, gh), *U = BLK_U(mem, gh);
    double *S = w->S + h * kk, *A = w->gsc + (size_t)h * mixgroup_gsc_len(K);
    if (implicit)
        memcpy(S, w->SR + h * kk, kk * sizeof(double));
    else
        la_gemm_sym(K, cg, 1.0, R, cg, R, cg, S, K);
    for (size_t i = 0; i < kk; i++)
        S[i] += cg * U[i];
    for (size_t i = 0; i < kk; i++)
        A[i] = S[i] / s2;
    for (int k = 0; k < K; k++)
        A[(size_t)k * K + k] += 1.0;
}

/* Returns 0, or 2 when the address precision is not positive definite. */
LA_HOT int mixgroup_address_factor(mixgroup_work *w, int h)
{
    int K = w->K;
    size_t kk = (size_t)K * K;
    double *A = w->gsc + (size_t)h * mixgroup_gsc_len(K), *Sw = w->Sw + h * kk;
    if (la_chol(K, A) != 0)
        return 2;
    w->cl[h].logdetSw = -la_chol_logdet(K, A);
    memcpy(Sw, A, kk * sizeof(double));
    la_chol_inverse(K, Sw);
    return 0;
}

/* Four doubles (GCC vector extensions: one AVX register, or two SSE2 ones, as the function's
 * target allows), and the same type for loads and stores at any double-aligned address. */
typedef double addr_v4 __attribute__((vector_size(32)));
typedef double addr_v4u __attribute__((vector_size(32), aligned(8)));

/* The frame sweep of one cluster h (see mixgroup_address_post): from P_h = R_h Z^T (K x T),
 * W_h = Sigma_w,h P_h / s2 - c_h 1^T into W, and per frame t
 *   wb_t = w_t . (P_t - R_h mu_bh), mm_t = |w_t|^2,
 *   E_t = |z_t|^2 + tr V_t + eh - zsc mu_bh . z_t - wb_t - s2 mm_t,
 *   LW_t = lwh + mm_t / 2, theta_t = -E_t / (2 s2) - LW_t. */
typedef struct {
    int K;
    long T;
    double s2, eh, lwh, zsc;
    const double *Sw;  /* K x K */
    const double *ck;  /* K: c_h / s2 = Sigma_w,h R_h mu_bh / s2 */
    const double *rmb; /* K: R_h mu_bh */
    const double *P, *zn, *vs, *zb;
    double *W, *E, *LW, *th;
    double *wb, *mm; /* T each: scratch of address_sweep_rows */
} addr_sweep;

/* The sweep for any K: W_h by one product, then a pass over the frames per row. */
static inline __attribute__((always_inline)) void address_sweep_rows(const addr_sweep *a)
{
    int K = a->K;
    long T = a->T;
    double s2 = a->s2, half_s2 = 0.5 / s2;
    la_gemm(0, 0, K, (int)T, K, 1.0 / s2, a->Sw, K, a->P, (int)T, 0.0, a->W, (int)T);
    double *restrict wb = a->wb, *restrict mm = a->mm;
    memset(wb, 0, sizeof(double) * T);
    memset(mm, 0, sizeof(double) * T);
    for (int k = 0; k < K; k++) {
        double *restrict wk = a->W + (size_t)k * T;
        const double *restrict pk = a->P + (size_t)k * T;
        double rk = a->rmb[k], ck = a->ck[k];
        for (long t = 0; t < T; t++) {
            double wv = wk[t] - ck;
            wk[t] = wv;
            wb[t] += wv * (pk[t] - rk);
            mm[t] += wv * wv;
        }
    }
    const double *restrict zb = a->zb, *restrict zn = a->zn, *restrict vs = a->vs;
    double *restrict E = a->E, *restrict LW = a->LW, *restrict th = a->th;
    for (long t = 0; t < T; t++) { /* independent frames: vector lanes */
        double e = zn[t] + vs[t] + a->eh - a->zsc * zb[t] - wb[t] - s2 * mm[t];
        double lw = a->lwh + 0.5 * mm[t];
        E[t] = e;
        LW[t] = lw;
        th[t] = -e * half_s2 - lw;
    }
}

/* The same for K <= 8 rows (inlined with K constant): four frames at a time, the frame's K
 * values of P_h and its sums in registers, every array read or written once. */
static inline __attribute__((always_inline)) void address_sweep_short(const addr_sweep *a, int K)
{
    long T = a->T, t = 0;
    double s2 = a->s2, half_s2 = 0.5 / s2, is2 = 1.0 / s2, eh = a->eh, lwh = a->lwh, zsc = a->zsc;
    const double *P = a->P, *Sw = a->Sw;
    double *W = a->W;
    for (; t + 4 <= T; t += 4) {
        addr_v4 p[8], wb = {0.0, 0.0, 0.0, 0.0}, mm = {0.0, 0.0, 0.0, 0.0};
        for (int j = 0; j < K; j++)
            p[j] = *(const addr_v4u *)(P + (size_t)j * T + t);
        for (int k = 0; k < K; k++) {
            addr_v4 acc = {0.0, 0.0, 0.0, 0.0};
            for (int j = 0; j < K; j++)
                acc += Sw[(size_t)k * K + j] * p[j];
            addr_v4 wv = is2 * acc - a->ck[k];
            *(addr_v4u *)(W + (size_t)k * T + t) = wv;
            wb += wv * (p[k] - a->rmb[k]);
            mm += wv * wv;
        }
        addr_v4 e = *(const addr_v4u *)(a->zn + t) + *(const addr_v4u *)(a->vs + t) + eh
                    - zsc * *(const addr_v4u *)(a->zb + t) - wb - s2 * mm;
        addr_v4 lw = lwh + 0.5 * mm;
        *(addr_v4u *)(a->E + t) = e;
        *(addr_v4u *)(a->LW + t) = lw;
        *(addr_v4u *)(a->th + t) = -e * half_s2 - lw;
    }
    for (; t < T; t++) {
        double wb = 0.0, mm = 0.0;
        for (int k = 0; k < K; k++) {
            double acc = 0.0;
            for (int j = 0; j < K; j++)
                acc += Sw[(size_t)k * K + j] * P[(size_t)j * T + t];
            double wv = is2 * acc - a->ck[k];
            W[(size_t)k * T + t] = wv;
            wb += wv * (P[(size_t)k * T + t] - a->rmb[k]);
            mm += wv * wv;
        }
        double e = a->zn[t] + a->vs[t] + eh - zsc * a->zb[t] - wb - s2 * mm;
        double lw = lwh + 0.5 * mm;
        a->E[t] = e;
        a->LW[t] = lw;
        a->th[t] = -e * half_s2 - lw;
    }
}

/* Returns 0, or 3 when the posterior row covariance is not positive definite. */
LA_HOT int mixgroup_address_post(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                 int h, int want_elbo, int worker, int implicit, int b_implicit)
{
    int K = w->K, cg = w->cg, g = w->g, gh = g * w->H + h;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    int shift = mem->cfg.shift;
    mixgroup_scratch sc = mixgroup_scratch_of(w, worker);
    const double *R = BLK_R(mem, gh), *U = BLK_U(mem, gh), *mb = BLK_B(mem, gh);
    const double *S = w->S + h * kk, *Sw = w->Sw + h * kk;
    double logdetSw = w->cl[h].logdetSw;
    double trSSw = la_dot((int)kk, S, Sw), trsw = 0.0; /* tr(S Sigma_w), both symmetric */
    for (int k = 0; k < K; k++)
        trsw += Sw[(size_t)k * K + k];
    if (shift && !b_implicit) {
        double bb = 0.0;
        for (int c = 0; c < cg; c++)
            bb += mb[c] * mb[c];
        w->cl[h].bb = bb;
    } else if (!shift) {
        w->cl[h].bb = 0.0;
    }              /* else |mu_bh|^2 was carried by the update */
    if (!implicit) /* else R_h mu_bh is carried by the Gram update */
        for (int k = 0; k < K; k++)
            w->Rmb[h * K + k] = la_dot(cg, R + (size_t)k * cg, mb);
    /* B_h = R_h (Z - mu_bh)^T = P_h - (R_h mu_bh) 1^T and W_h = Sigma_w,h B_h / s2,
     * formed as Sigma_w,h P_h / s2 - c_h 1^T with c_h = Sigma_w,h R_h mu_bh / s2,
     * so that B_h is never stored: the sweep below takes its columns from P_h. */
    double *Wh = w->W + (size_t)h * K * T, *Ph = w->P + (size_t)h * K * T;
    if (!implicit && w->Zt) { /* P_h = R_h Z^T and mu_bh . z_t here (see mixgroup_address) */
        la_gemm(0, 0, K, (int)T, cg, 1.0, R, cg, w->Zt, (int)T, 0.0, Ph, (int)T);
        if (shift)
            la_gemm(0, 0, 1, (int)T, cg, 1.0, mb, cg, w->Zt, (int)T, 0.0, w->zb + (size_t)h * T,
                    (int)T);
    }
    /* Sweep the frames: e_th, KL_w and the logits. With S_h W_h = B_h - s2 W_h
     * (Sigma_w^{-1} = I + S_h / s2):
     *   e_th = |z_t|^2 + tr V_t + |mu_bh|^2 + cg s2_bh + tr(S_h Sigma_w) - 2 mu_bh.z_t
     *          - 2 w_t.B_t + w_t.S_h w_t = ... - w_t.B_t - s2 |w_t|^2. */
    double s2b = b_implicit ? w->cl[h].s2b : mem->s2_b[gh];
    addr_sweep sw = {.K = K,
                     .T = T,
                     .s2 = s2,
                     .Sw = Sw,
                     .ck = sc.kw, /* kw is free until the KL terms below */
                     .rmb = w->Rmb + h * K,
                     .P = Ph,
                     .zn = w->cs.znorm,
                     .vs = w->cs.vsum,
                     .zb = shift ? w->zb + (size_t)h * T : w->cs.znorm, /* unread without */
                     .zsc = shift ? 2.0 : 0.0, /* the shift's term, 0 without one */
                     .eh = w->cl[h].bb + (shift ? cg * s2b : 0.0) + trSSw,
                     .lwh = 0.5 * (trsw - K - logdetSw),
                     .W = Wh,
                     .E = w->E + (size_t)h * T,
                     .LW = w->LW + (size_t)h * T,
                     .th = w->thetaT + (size_t)h * T,
                     .wb = sc.acc,
                     .mm = sc.acc + T};
    for (int k = 0; k < K; k++) {
        const double *swk = Sw + (size_t)k * K;
        double ck = 0.0;
        for (int j = 0; j < K; j++)
            ck += swk[j] * sw.rmb[j];
        sc.kw[k] = ck / s2;
    }
    switch (K) { /* the rows as constants: P_h's and W_h's vectors in registers */
    case 1: address_sweep_short(&sw, 1); break;
    case 2: address_sweep_short(&sw, 2); break;
    case 3: address_sweep_short(&sw, 3); break;
    case 4: address_sweep_short(&sw, 4); break;
    case 5: address_sweep_short(&sw, 5); break;
    case 6: address_sweep_short(&sw, 6); break;
    case 7: address_sweep_short(&sw, 7); break;
    case 8: address_sweep_short(&sw, 8); break;
    default: address_sweep_rows(&sw); break;
    }
    if (!want_elbo)
        return 0;
    double klm;
    if (implicit) { /* Eq. 254 from R R^T, <P0R0, R> and log det U = -log det Q */
        const double *P0 = prior->P0 + (size_t)gh * kk, *SR = w->SR + h * kk;
        double trPU = la_dot((int)kk, P0, U), trPS = la_dot((int)kk, P0, SR);
        klm = 0.5
              * (cg * trPU + trPS - 2.0 * w->cl[h].AR + w->cl[h].AR0 - (double)K * cg
                 + cg * w->cl[h].logdetQ + cg * prior->logdetU0[gh]);
    } else {
        klm = kl_matrix_normal(K, cg, R, U, prior->R0 + (size_t)gh * K * cg,
                               prior->P0 + (size_t)gh * kk, prior->logdetU0[gh], sc.kw);
    }
    if (isnan(klm))
        return 3;
    double klb = 0.0;
    if (shift && b_implicit) /* |mu_bh - mu_b0h|^2 from the carried products */
        klb = kl_iso_normal_d2(cg, w->cl[h].bb - 2.0 * w->cl[h].bm0 + w->cl[h].m0m0, s2b,
                               prior->s2_b0[gh]);
    else if (shift)
        klb = kl_iso_normal(cg, mb, s2b, prior->mu_b0 + (size_t)gh * cg, prior->s2_b0[gh]);
    w->cl[h].klm = klm;
    w->cl[h].klb = klb;
    return 0;
}

typedef struct {
    const vbm_memory *mem;
    const prior_t *prior;
    mixgroup_work *w;
    int want_elbo;
} addr_job;

/* The first failure recorded in hst by the last per-cluster loop, as an error. */
vbm_status mixgroup_cluster_status(const mixgroup_work *w, vbm_error *err)
{
    for (int h = 0; h < w->H; h++)
        if (w->cl[h].st == 1)
            return vbm_fail(err, VBM_ENUMERIC, NULL,
                            "memory precision of cluster %d is not positive definite", h);
        else if (w->cl[h].st == 2)
            return vbm_fail(err, VBM_ENUMERIC, NULL,
                            "address precision of cluster %d is not positive definite", h);
        else if (w->cl[h].st == 3)
            return vbm_fail(err, VBM_ENUMERIC, NULL,
                            "posterior row covariance of cluster %d is not positive definite", h);
    return VBM_OK;
}

static void address_run(const void *ctx, long b, long e, int worker)
{
    const addr_job *j = ctx;
    mixgroup_work *w = j->w;
    for (long h = b; h < e; h++)
        mixgroup_address_pre(j->mem, w, (int)h, w->implicit);
    for (long h = b; h < e; h++)
        w->cl[h].st = mixgroup_address_factor(w, (int)h);
    for (long h = b; h < e; h++)
        if (!w->cl[h].st)
            w->cl[h].st = mixgroup_address_post(j->mem, j->prior, w, (int)h, j->want_elbo, worker,
                                                w->implicit, w->b_implicit);
}

/* q(s_t) for the frames of chunks [b, e) (FRAME_CHUNK frames each): the
 * softmax of the logits (with the floor), and each chunk's sums of the ELBO
 * terms over its frames. The logits are cluster-major (thetaT), so the
 * softmax runs along rows: a frame's max and sum over clusters in cluster
 * order, as one frame at a time would, and the exponentials in vector lanes
 * (vexp_array), over all of thetaT at once when the range holds every frame. */
static void frames_run(const void *ctx, long b, long e, int worker)
{
    const addr_job *j = ctx;
    const mixgroup_work *w = j->w;
    int H = w->H, cg = w->cg;
    long T = w->T;
    double s2 = j->mem->cfg.sigma_z2, floor_ = j->mem->cfg.s_floor;
    double log2pis2 = log(2.0 * VBM_PI * s2);
    long t0 = b * FRAME_CHUNK, t1 = e * FRAME_CHUNK < T ? e * FRAME_CHUNK : T, n = t1 - t0;
    double *mx = mixgroup_scratch_of(w, worker).acc,
           *sum = mx + T; /* per frame: max and sum over clusters */
    for (long i = 0; i < n; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.0;
    }
    for (int h = 0; h < H; h++) {
        const double *x = w->thetaT + (size_t)h * T + t0;
        for (long i = 0; i < n; i++)
            mx[i] = x[i] > mx[i] ? x[i] : mx[i];
    }
    for (int h = 0; h < H; h++) {
        double *x = w->thetaT + (size_t)h * T + t0;
        for (long i = 0; i < n; i++)
            x[i] -= mx[i];
        if (n < T)
            vexp_array(n, x, x);
    }
    if (n == T)
        vexp_array((long)H * T, w->thetaT, w->thetaT);
    for (int h = 0; h < H; h++) {
        const double *x = w->thetaT + (size_t)h * T + t0;
        for (long i = 0; i < n; i++)
            sum[i] += x[i];
    }
    double fl = floor_ > 0.0 && H > 1 ? floor_ : 0.0, keep = 1.0 - fl, add = fl / H;
    for (int h = 0; h < H; h++) {
        double *x = w->thetaT + (size_t)h * T + t0;
        for (long i = 0; i < n; i++)
            x[i] /= sum[i];
        if (fl > 0.0)
            for (long i = 0; i < n; i++)
                x[i] = keep * x[i] + add;
    }
    for (long c = b; c < e; c++) {
        double loglik = 0.0, klw = 0.0, kls = 0.0;
        long c1 = (c + 1) * FRAME_CHUNK < T ? (c + 1) * FRAME_CHUNK : T;
        for (long t = c * FRAME_CHUNK; t < c1 && j->want_elbo; t++) {
            double klt = 0.0;
            for (int h = 0; h < H; h++) {
                double th = w->thetaT[(size_t)h * T + t];
                if (th == 0.0)
                    continue;
                loglik += th * (-0.5 * cg * log2pis2 - w->E[(size_t)h * T + t] / (2.0 * s2));
                klw += th * w->LW[(size_t)h * T + t];
                klt += th * log(H * th);
            }
            kls += klt;
        }
        w->fel[3 * c] = loglik;
        w->fel[3 * c + 1] = klw;
        w->fel[3 * c + 2] = kls;
    }
}

vbm_status mixgroup_address(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                            vbm_elbo *elbo, vbm_error *err)
{
    int H = w->H, K = w->K, cg = w->cg, C = w->cs.C, g = w->g;
    long T = w->T;
    const double *Z = w->cs.mu + w->cs.goff;
    vbm_status st = mixgroup_big_arrays(w, err);
    if (st)
        return st;
    /* P = [R_1; ...; R_H] Z^T and mu_bh . z_t (carried by the Gram update). On
     * the Gram path (T <= cg) this is the first step only: each cluster's share
     * is formed with the others of its loop, from Z^T (cg x T) formed here; on
     * the direct path, by one GEMM each over all clusters. */
    if (!w->implicit && w->gram) {
        st = mixgroup_gram_codes(w, err);
        if (st)
            return st;
    }
    if (!w->implicit && !w->Zt) {
        la_gemm(0, 1, H * K, (int)T, cg, 1.0, BLK_R(mem, g * H), cg, Z, C, 0.0, w->P, (int)T);
        if (mem->cfg.shift)
            la_gemm(0, 1, H, (int)T, cg, 1.0, BLK_B(mem, g * H), cg, Z, C, 0.0, w->zb, (int)T);
    }
    addr_job j = {mem, prior, w, elbo != NULL};
    if (w->addressed) /* the Gram update ran the per-cluster part with each cluster's update */
        w->addressed = 0;
    else
        team_for_shares(w->team, H,
                        (long)H * (K * (K + 4 + (w->implicit ? 0 : cg)) * T + CLUSTER_FIXED),
                        address_run, &j);
    st = mixgroup_cluster_status(w, err);
    if (st)
        return st;
    long chunks = (T + FRAME_CHUNK - 1) / FRAME_CHUNK;
    /* Each frame reads the logits of every cluster, which the per-cluster loops
     * wrote on all the team's threads: moving them between cores costs more than
     * the loop itself unless there are many frames and clusters. */
    team_for((long)H * T >= FRAMES_TEAM_MIN ? w->team : NULL, chunks, 0, (long)H * T * 8,
             frames_run, &j);
    if (!elbo)
        return VBM_OK;
    double loglik = 0.0, klw = 0.0, kls = 0.0;
    for (long c = 0; c < chunks; c++) {
        loglik += w->fel[3 * c];
        klw += w->fel[3 * c + 1];
        kls += w->fel[3 * c + 2];
    }
    elbo->loglik_codes += loglik + w->cs.entropy;
    elbo->kl_w += klw;
    elbo->kl_s += kls;
    for (int h = 0; h < H; h++) {
        elbo->kl_M += w->cl[h].klm;
        elbo->kl_b += w->cl[h].klb;
    }
    return VBM_OK;
}
