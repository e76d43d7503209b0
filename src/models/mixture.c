/* mixture.c -- the scalable mixture-based memory (Theorem 4): VB updates of
 * q(w | s), q(s), q(b_h), q(M_h) for one group of code columns, k-means++
 * seeding of the shifts (Sec. 3.2.1), its ELBO terms, reads and samples. */
#define _POSIX_C_SOURCE 200809L
#include "mixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"
#include "numerics/vexp.h"

#define BLK_R(mem, gh) ((mem)->R + (size_t)(gh) * (mem)->cfg.rows * (mem)->cg)
#define BLK_U(mem, gh) ((mem)->U + (size_t)(gh) * (mem)->cfg.rows * (mem)->cfg.rows)
#define BLK_B(mem, gh) ((mem)->mu_b + (size_t)(gh) * (mem)->cg)

/* H per-cluster records, zeroed, each on its own cache lines; NULL when out of memory. */
static mixcluster *cl_alloc(int H)
{
    void *p = NULL;
    if (H < 1 || posix_memalign(&p, 64, sizeof(mixcluster) * (size_t)H) != 0)
        return NULL;
    memset(p, 0, sizeof(mixcluster) * (size_t)H);
    return p;
}

/* Frames per item of the q(s) loop. Fixed, so that the ELBO's sum over frames
 * (per chunk, then over chunks in order) does not depend on the team. */
#define FRAME_CHUNK 16

/* The work of a cluster's K x K factorizations, inverses and solves, in the
 * units of team_for's estimate (values touched): latency-bound, so worth far
 * more than their flops. */
#define CLUSTER_FIXED 2000L
/* The q(s) loop runs on the team from this many logits (H T) on. */
#define FRAMES_TEAM_MIN 65536L

/* Doubles of one cluster's scratch (mixgroup_work.gsc): the address step's
 * precision A (K^2), then the Gram update's M2, YY, X, AW, Q, M1 (K^2 each) and
 * Amb, wzb, v, rhs (K each). They live from one phase of the cluster loops to
 * the next (see update_gram_run). */
static size_t gsc_len(int K)
{
    return 7 * (size_t)K * K + 4 * (size_t)K;
}

/* One thread's scratch set (see mixgroup_work.scr). */
typedef struct {
    double *kw;  /* 2 K^2 + K cg: kl_matrix_normal, the direct update's Q */
    double *acc; /* 2 T: per-frame accumulators of one cluster, or of the q(s) softmax */
    double *zx;  /* cg: a row of the shifts' write-back */
} scratch_t;

static size_t scratch_len(int K, int cg, long T)
{
    return 2 * (size_t)K * K + (size_t)K * cg + 2 * (size_t)T + (size_t)cg;
}

static scratch_t scratch_of(const mixgroup_work *w, int worker)
{
    size_t kk = (size_t)w->K * w->K;
    scratch_t s;
    s.kw = w->scr + (size_t)worker * w->scr_len;
    s.acc = s.kw + 2 * kk + (size_t)w->K * w->cg;
    s.zx = s.acc + 2 * (size_t)w->T;
    return s;
}

void mixgroup_work_free(mixgroup_work *w)
{
    codestat_free(&w->cs);
    free(w->P);
    free(w->W);
    free(w->Wt);
    free(w->thetaT);
    free(w->E);
    free(w->LW);
    free(w->S);
    free(w->Sw);
    free(w->Rmb);
    free(w->sw);
    free(w->zb);
    free(w->Y);
    free(w->scr);
    free(w->gsc);
    free(w->Zt);
    free(w->cl);
    free(w->fel);
    free(w->G);
    free(w->SR);
    free(w->LQ);
    free(w->Wtc);
    free(w->swc);
    free(w->AZ);
    free(w->AAt);
    free(w->zmu0);
    free(w->GT);
    free(w->bx);
    free(w->by);
    free(w->bZe);
    free(w->bAe);
    free(w->bAm0);
    free(w->bgx);
    free(w->bAmb);
    memset(w, 0, sizeof *w);
}

vbm_status mixgroup_set_team(mixgroup_work *w, team_t *team, vbm_error *err)
{
    int n = team_size(team);
    if (n > w->nscr) {
        double *scr = vbm_calloc((size_t)n * w->scr_len, sizeof(double));
        if (!scr)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the scratch of %d threads",
                            n);
        free(w->scr);
        w->scr = scr;
        w->nscr = n;
    }
    w->team = team;
    return VBM_OK;
}

void mixgroup_set_solver(mixgroup_work *w, int mode)
{
    if (mode == 1)
        w->gram = 0;
    else if (mode == 2)
        w->gram = w->T <= 4096;
    else
        w->gram = w->T <= w->cg;
}

/* Z^T (cg x T) and G = Z Z^T (T x T) of this group's code means, each formed
 * once per workspace (the first of k-means++, the first address step or the
 * first Gram update that needs them). VBM_ENOMEM on failure. */
static vbm_status gram_codes(mixgroup_work *w, vbm_error *err)
{
    int cg = w->cg, C = w->cs.C;
    long T = w->T;
    const double *Z = w->cs.mu + w->cs.goff;
    if (!w->Zt) {
        w->Zt = vbm_calloc((size_t)cg * T, sizeof(double));
        if (!w->Zt)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the codes' transpose (T=%ld)",
                            T);
        for (long t0 = 0; t0 < T;
             t0 += 8) /* 8 frames at a time: whole cache lines of Z^T written */
            for (int c = 0; c < cg; c++)
                for (long t = t0; t < T && t < t0 + 8; t++)
                    w->Zt[(size_t)c * T + t] = Z[(size_t)t * C + c];
    }
    if (!w->G) {
        w->G = vbm_calloc((size_t)T * T, sizeof(double));
        if (!w->G)
            return vbm_fail(err, VBM_ENOMEM, NULL,
                            "out of memory for the codes' Gram matrix (T=%ld)", T);
        la_gram((int)T, cg, Z, C, w->Zt, (int)T, w->G, (int)T);
    }
    return VBM_OK;
}

/* Allocate the Gram-path state and compute G = Z Z^T and the products of the
 * prior means with the codes, once per workspace. VBM_ENOMEM on failure. */
static vbm_status gram_prepare(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                               vbm_error *err)
{
    if (w->gram_ready)
        return VBM_OK;
    int H = w->H, K = w->K, cg = w->cg, C = w->cs.C, g = w->g;
    long T = w->T;
    size_t kk = (size_t)K * K, kc = (size_t)K * cg, hkt = (size_t)H * K * T;
    const double *Z = w->cs.mu + w->cs.goff;
    const double *A = prior->P0R0 + (size_t)g * H * kc, *mb0 = prior->mu_b0 + (size_t)g * H * cg;
    w->prior_mean = 0;
    for (size_t i = 0; i < (size_t)H * kc && !w->prior_mean; i++)
        w->prior_mean = A[i] != 0.0;
    w->shift_mean = 0;
    for (size_t i = 0; i < (size_t)H * cg && !w->shift_mean && mem->cfg.shift; i++)
        w->shift_mean = mb0[i] != 0.0;
    vbm_status st = gram_codes(w, err);
    if (st)
        return st;
    w->SR = vbm_calloc((size_t)H * kk, sizeof(double));
    w->LQ = vbm_calloc((size_t)H * kk, sizeof(double));
    w->Wtc = vbm_calloc(hkt, sizeof(double));
    w->swc = vbm_calloc((size_t)H * K, sizeof(double));
    w->GT = vbm_calloc(hkt, sizeof(double));
    if (w->prior_mean) {
        w->AZ = vbm_calloc(hkt, sizeof(double));
        w->AAt = vbm_calloc((size_t)H * kk, sizeof(double));
    }
    if (w->shift_mean)
        w->zmu0 = vbm_calloc((size_t)H * T, sizeof(double));
    int shift = mem->cfg.shift;
    if (shift) {
        w->bx = vbm_calloc((size_t)H * T, sizeof(double));
        w->by = vbm_calloc((size_t)H * K, sizeof(double));
        w->bZe = vbm_calloc((size_t)H * T, sizeof(double));
        w->bAe = vbm_calloc((size_t)H * K, sizeof(double));
        w->bAm0 = vbm_calloc((size_t)H * K, sizeof(double));
        w->bgx = vbm_calloc((size_t)H * T, sizeof(double));
        w->bAmb = vbm_calloc((size_t)H * K, sizeof(double));
    }
    if (!w->SR || !w->LQ || !w->Wtc || !w->swc || !w->GT || (w->prior_mean && (!w->AZ || !w->AAt))
        || (w->shift_mean && !w->zmu0)
        || (shift && (!w->bx || !w->by || !w->bZe || !w->bAe || !w->bAm0 || !w->bgx || !w->bAmb)))
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the Gram path (T=%ld)", T);
    if (w->prior_mean) {
        la_gemm(0, 1, H * K, (int)T, cg, 1.0, A, cg, Z, C, 0.0, w->AZ, (int)T);
        const double *R0 = prior->R0 + (size_t)g * H * kc;
        for (int h = 0; h < H; h++) {
            la_gemm_sym(K, cg, 1.0, A + h * kc, cg, A + h * kc, cg, w->AAt + h * kk, K);
            double a = 0.0;
            for (size_t i = 0; i < kc; i++)
                a += A[h * kc + i] * R0[h * kc + i];
            w->cl[h].AR0 = a;
        }
    }
    if (w->shift_mean)
        la_gemm(0, 1, H, (int)T, cg, 1.0, mb0, cg, Z, C, 0.0, w->zmu0, (int)T);
    w->gram_ready = 1;
    return VBM_OK;
}

vbm_status mixgroup_work_init(mixgroup_work *w, const vbm_memory *mem, const vbm_codes *codes,
                              int g, vbm_error *err)
{
    memset(w, 0, sizeof *w);
    int H = mem->cfg.clusters, K = mem->cfg.rows, cg = mem->cg;
    long T = codes->T;
    w->H = H;
    w->K = K;
    w->cg = cg;
    w->g = g;
    w->T = T;
    vbm_status st = codestat_init(&w->cs, codes, g * cg, cg, err);
    if (st)
        return st;
    size_t hkt = (size_t)H * K * T;
    w->P = vbm_calloc(hkt, sizeof(double));
    w->W = vbm_calloc(hkt, sizeof(double));
    w->Wt = vbm_calloc(hkt, sizeof(double));
    w->thetaT = vbm_calloc((size_t)T * H, sizeof(double));
    w->E = vbm_calloc((size_t)T * H, sizeof(double));
    w->LW = vbm_calloc((size_t)T * H, sizeof(double));
    w->S = vbm_calloc((size_t)H * K * K, sizeof(double));
    w->Sw = vbm_calloc((size_t)H * K * K, sizeof(double));
    w->Rmb = vbm_calloc((size_t)H * K, sizeof(double));
    w->sw = vbm_calloc((size_t)H * K, sizeof(double));
    w->zb = vbm_calloc((size_t)T * H, sizeof(double));
    w->nscr = 1;
    w->scr_len = scratch_len(K, cg, T);
    w->scr = vbm_calloc(w->scr_len, sizeof(double));
    w->gsc = vbm_calloc((size_t)H * gsc_len(K), sizeof(double));
    w->fel = vbm_calloc(3 * (size_t)((T + FRAME_CHUNK - 1) / FRAME_CHUNK), sizeof(double));
    w->cl = cl_alloc(H);
    if (!w->P || !w->W || !w->Wt || !w->thetaT || !w->E || !w->LW || !w->S || !w->Sw || !w->Rmb
        || !w->sw || !w->zb || !w->scr || !w->gsc || !w->cl || !w->fel) {
        mixgroup_work_free(w);
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for a mixture workspace (T=%ld, H=%d, K=%d)", T, H, K);
    }
    mixgroup_set_solver(w, 0);
    return VBM_OK;
}

vbm_status mixgroup_init(vbm_memory *mem, int g, const prior_t *prior, const vbm_codes *codes,
                         mixgroup_work *w, vbm_init init, rng_t *rng, vbm_error *err)
{
    int H = mem->cfg.clusters, K = mem->cfg.rows, cg = mem->cg, C = codes->C;
    long T = codes->T;
    if (init == VBM_INIT_CURRENT)
        return VBM_OK;
    int random = init == VBM_INIT_AUTO || init == VBM_INIT_RANDOM;
    for (int h = 0; h < H; h++) {
        int gh = g * H + h;
        if (!random) /* else init_random_means writes R = R0 + chol(U0) E */
            memcpy(BLK_R(mem, gh), prior->R0 + (size_t)gh * K * cg, sizeof(double) * K * cg);
        memcpy(BLK_U(mem, gh), prior->U0 + (size_t)gh * K * K, sizeof(double) * K * K);
        memcpy(BLK_B(mem, gh), prior->mu_b0 + (size_t)gh * cg, sizeof(double) * cg);
        mem->s2_b[gh] = prior->s2_b0[gh];
    }
    if (random) { /* this group's blocks only */
        prior_t view = *prior;
        view.GH = H;
        view.R0 += (size_t)g * H * K * cg;
        view.U0 += (size_t)g * H * K * K;
        vbm_memory shifted = *mem;
        shifted.R += (size_t)g * H * K * cg;
        init_random_means(&shifted, &view, rng);
    }
    if (init != VBM_INIT_KMEANSPP && init != VBM_INIT_AUTO)
        return VBM_OK;
    if (H > T)
        return vbm_fail(err, VBM_EINVAL, NULL,
                        "k-means++ seeding needs at least H = %d codes, got T = %ld", H, T);
    /* k-means++ over the code means of this group (Arthur & Vassilvitskii).
     * On the Gram path the squared distances come from G:
     * |z_t - z_p|^2 = G_tt + G_pp - 2 G_tp (at least 0; exactly 0 for t = p). */
    const double *G = NULL;
    if (w && w->gram && w->T == T) {
        vbm_status st = gram_codes(w, err);
        if (st)
            return st;
        G = w->G;
    }
    double *d2 = vbm_calloc((size_t)T, sizeof(double));
    if (!d2)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for k-means++");
    const double *Z = codes->mu + (size_t)g * cg;
    for (int h = 0; h < H; h++) {
        long pick = h == 0 ? (long)rng_below(rng, (uint64_t)T) : rng_categorical(rng, d2, T);
        const double *zc = Z + (size_t)pick * C;
        memcpy(BLK_B(mem, g * H + h), zc, sizeof(double) * cg);
        const double *gp = G ? G + (size_t)pick * T : NULL;
        for (long t = 0; t < T; t++) {
            double d;
            if (gp) {
                d = G[(size_t)t * T + t] + gp[pick] - 2.0 * gp[t];
                if (!(d > 0.0))
                    d = 0.0;
            } else {
                d = la_sqdist(cg, Z + (size_t)t * C, zc);
            }
            if (h == 0 || d < d2[t])
                d2[t] = d;
        }
    }
    free(d2);
    return VBM_OK;
}

/* The address step for cluster h comes in three parts, so that a loop over a
 * range of clusters can run each part for all of them before the next (the
 * K x K factorizations of different clusters are then independent work in
 * flight together): address_pre forms S_h = R_h R_h^T + cg U_h and the
 * precision A_h = I + S_h / s2 of q(w | s = h); address_factor factors it
 * (Sigma_w,h and its log-determinant); address_post does the rest: traces,
 * R_h mu_bh, W_h, the frame sweep (e_th, KL_w, the logits of q(s)) and the
 * cluster's KL terms when the ELBO is wanted. implicit and b_implicit say how
 * R_h and mu_bh are held (the fields of w, or the Gram update that calls these
 * before it sets them); Bbuf is HK x T scratch. */
LA_HOT static void address_pre(const vbm_memory *mem, mixgroup_work *w, int h, int implicit)
{
    int K = w->K, cg = w->cg, gh = w->g * w->H + h;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    const double *R = BLK_R(mem, gh), *U = BLK_U(mem, gh);
    double *S = w->S + h * kk, *A = w->gsc + (size_t)h * gsc_len(K);
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
LA_HOT static int address_factor(mixgroup_work *w, int h)
{
    int K = w->K;
    size_t kk = (size_t)K * K;
    double *A = w->gsc + (size_t)h * gsc_len(K), *Sw = w->Sw + h * kk;
    if (la_chol(K, A) != 0)
        return 2;
    w->cl[h].logdetSw = -la_chol_logdet(K, A);
    memcpy(Sw, A, kk * sizeof(double));
    la_chol_inverse(K, Sw);
    return 0;
}

/* Returns 0, or 3 when the posterior row covariance is not positive definite. */
LA_HOT static int address_post(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w, int h,
                               int want_elbo, int worker, int implicit, int b_implicit,
                               double *Bbuf)
{
    int K = w->K, cg = w->cg, g = w->g, gh = g * w->H + h;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    size_t kk = (size_t)K * K;
    int shift = mem->cfg.shift;
    scratch_t sc = scratch_of(w, worker);
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
        for (int k = 0; k < K; k++) {
            double v = 0.0;
            for (int c = 0; c < cg; c++)
                v += R[(size_t)k * cg + c] * mb[c];
            w->Rmb[h * K + k] = v;
        }
    /* B_h = R_h (Z - mu_bh)^T and W_h = Sigma_w,h B_h / s2. */
    double *Wh = w->W + (size_t)h * K * T, *Bh = Bbuf + (size_t)h * K * T,
           *Ph = w->P + (size_t)h * K * T;
    if (!implicit && w->Zt) { /* P_h = R_h Z^T and mu_bh . z_t here (see mixgroup_address) */
        la_gemm(0, 0, K, (int)T, cg, 1.0, R, cg, w->Zt, (int)T, 0.0, Ph, (int)T);
        if (shift)
            la_gemm(0, 0, 1, (int)T, cg, 1.0, mb, cg, w->Zt, (int)T, 0.0, w->zb + (size_t)h * T,
                    (int)T);
    }
    for (int k = 0; k < K; k++) {
        double rmb = w->Rmb[h * K + k];
        const double *pk = Ph + (size_t)k * T;
        double *bk = Bh + (size_t)k * T;
        for (long t = 0; t < T; t++)
            bk[t] = pk[t] - rmb;
    }
    la_gemm(0, 0, K, (int)T, K, 1.0 / s2, Sw, K, Bh, (int)T, 0.0, Wh, (int)T);
    /* Sweep the frames: e_th, KL_w and the logits. With S_h W_h = B_h - s2 W_h
     * (Sigma_w^{-1} = I + S_h / s2):
     *   e_th = |z_t|^2 + tr V_t + |mu_bh|^2 + cg s2_bh + tr(S_h Sigma_w) - 2 mu_bh.z_t
     *          - 2 w_t.B_t + w_t.S_h w_t = ... - w_t.B_t - s2 |w_t|^2. */
    double *wb = sc.acc, *mm = sc.acc + T, half_s2 = 0.5 / s2;
    memset(sc.acc, 0, sizeof(double) * 2 * T);
    for (int k = 0; k < K; k++) {
        const double *wk = Wh + (size_t)k * T, *bk = Bh + (size_t)k * T;
        for (long t = 0; t < T; t++) {
            wb[t] += wk[t] * bk[t];
            mm[t] += wk[t] * wk[t];
        }
    }
    double s2b = b_implicit ? w->cl[h].s2b : mem->s2_b[gh];
    double eh = w->cl[h].bb + (shift ? cg * s2b : 0.0) + trSSw;
    double lwh = 0.5 * (trsw - K - logdetSw);
    const double *zbh = w->zb + (size_t)h * T;
    double *Eh = w->E + (size_t)h * T, *LWh = w->LW + (size_t)h * T,
           *thh = w->thetaT + (size_t)h * T;
    for (long t = 0; t < T; t++) {
        double e =
            w->cs.znorm[t] + w->cs.vsum[t] + eh - 2.0 * (shift ? zbh[t] : 0.0) - wb[t] - s2 * mm[t];
        double lw = lwh + 0.5 * mm[t];
        Eh[t] = e;
        LWh[t] = lw;
        thh[t] = -e * half_s2 - lw;
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
static vbm_status cluster_status(const mixgroup_work *w, vbm_error *err)
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
        address_pre(j->mem, w, (int)h, w->implicit);
    for (long h = b; h < e; h++)
        w->cl[h].st = address_factor(w, (int)h);
    for (long h = b; h < e; h++)
        if (!w->cl[h].st)
            w->cl[h].st = address_post(j->mem, j->prior, w, (int)h, j->want_elbo, worker,
                                       w->implicit, w->b_implicit, w->Wt);
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
    double *mx = scratch_of(w, worker).acc,
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
    /* P = [R_1; ...; R_H] Z^T and mu_bh . z_t (carried by the Gram update). On
     * the Gram path (T <= cg) this is the first step only: each cluster's share
     * is formed with the others of its loop, from Z^T (cg x T) formed here; on
     * the direct path, by one GEMM each over all clusters. */
    if (!w->implicit && w->gram) {
        vbm_status st = gram_codes(w, err);
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
    vbm_status st = cluster_status(w, err);
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

static vbm_status mixgroup_update_gram(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                       vbm_error *err);
static void weigh_cluster(mixgroup_work *w, int h);

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
    if (!w->Y && !(w->Y = vbm_calloc((size_t)H * kc, sizeof(double))))
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for a mixture update (H=%d, K=%d, cg=%d)", H, K, cg);
    for (int h = 0; h < H; h++)
        weigh_cluster(w, h);
    if (mem->cfg.shift) {
        /* q(b_h): Eq. 198-199 with the current q(M_h). Y temporarily holds Theta^T Z. */
        double *sz = w->Y;
        la_gemm(0, 0, H, cg, (int)T, 1.0, w->thetaT, (int)T, Z, C, 0.0, sz, cg);
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
    /* q(M_h): Eq. 206-207. Y = Wt Z, one GEMM over all clusters. */
    la_gemm(0, 0, H * K, cg, (int)T, 1.0, w->Wt, (int)T, Z, C, 0.0, w->Y, cg);
    double *Q = scratch_of(w, 0).kw;
    for (int h = 0; h < H; h++) {
        int gh = g * H + h;
        double N = w->cl[h].N;
        la_gemm_sym(K, (int)T, 1.0 / s2, w->Wt + (size_t)h * K * T, (int)T,
                    w->W + (size_t)h * K * T, (int)T, Q, K);
        const double *P0 = prior->P0 + gh * kk, *Sw = w->Sw + h * kk;
        for (size_t i = 0; i < kk; i++)
            Q[i] += P0[i] + N * Sw[i] / s2;
        la_symmetrize_lower(K, Q); /* guard against rounding asymmetry */
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

/* Soft count N_h, Wt_h = W_h diag(theta_h) and sw_h = Wt_h 1 (both paths). */
LA_HOT static void weigh_cluster(mixgroup_work *w, int h)
{
    int K = w->K;
    long T = w->T;
    const double *Wh = w->W + (size_t)h * K * T, *th = w->thetaT + (size_t)h * T;
    double *Wth = w->Wt + (size_t)h * K * T;
    w->cl[h].N = la_sum((int)T, th);
    for (int k = 0; k < K; k++) {
        const double *wk = Wh + (size_t)k * T;
        double *vk = Wth + (size_t)k * T;
        for (long t = 0; t < T; t++)
            vk[t] = wk[t] * th[t];
        w->sw[h * K + k] = la_sum((int)T, vk);
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
 * over a range of clusters by update_gram_run (see address_pre for why):
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
    g.M2 = w->gsc + (size_t)h * gsc_len(w->K) + kk; /* after the address step's A */
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
 * address_factor (which 1: A_h -> log det Sigma_w,h and Sigma_w,h) for the
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
                w->cl[h].st = which ? address_factor(w, (int)h) : update_factor(mem, w, (int)h);
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
                F[n++] = which ? w->gsc + (size_t)h * gsc_len(K) : w->LQ + h * kk;
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
 * step (while their data is in this thread's cache; B_h goes to the old
 * Wtc_h, which nothing reads any more). On one thread each part runs for every
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
        weigh_cluster(w, (int)h);
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
            address_pre(mem, w, (int)h, 1);
        }
    factor_clusters(mem, w, b, e, 1);
    for (long h = b; h < e; h++)
        if (!w->cl[h].st)
            w->cl[h].st = address_post(mem, j->prior, w, (int)h, 1, worker, 1, shift, w->Wtc);
}

/* The update of mixgroup_update (Eq. 198-199, then 206-207) on the Gram path:
 * the same posterior, but R_h is left implicit (see mixgroup_work) and the
 * statistics of the new R_h (R Z^T, R R^T, R mu_b, <P0R0, R>) are computed
 * from G = Z Z^T, so no product with the T x cg codes is formed. One item of
 * the team per cluster. */
static vbm_status mixgroup_update_gram(vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
                                       vbm_error *err)
{
    vbm_status st = gram_prepare(mem, prior, w, err);
    if (st)
        return st;
    int H = w->H, K = w->K;
    long T = w->T;
    upd_job j = {mem, prior, w};
    team_for_shares(w->team, H, (long)H * (K * T * (T + 8) + CLUSTER_FIXED), update_gram_run, &j);
    st = cluster_status(w, err);
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
        double *zx = scratch_of(w, worker).zx;
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
            double *v = scratch_of(w, worker).kw;
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
    double *Yh = scratch_of(w, worker).kw; /* K cg */
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

void mixgroup_export(const mixgroup_work *w, int G, vbm_addresses *out)
{
    int H = w->H, K = w->K, g = w->g;
    long T = w->T;
    for (long t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            size_t idx = ((size_t)t * G + g) * H + h;
            out->s[idx] = w->thetaT[(size_t)h * T + t];
            for (int k = 0; k < K; k++)
                out->w_mu[idx * K + k] = w->W[((size_t)h * K + k) * T + t];
        }
    if (out->w_cov)
        memcpy(out->w_cov + (size_t)g * H * K * K, w->Sw, sizeof(double) * H * K * K);
}

vbm_status mixgroup_read_draw(const vbm_memory *mem, const mixgroup_work *w, rng_t *rng,
                              double *out_z, vbm_error *err)
{
    int H = w->H, K = w->K, cg = w->cg, g = w->g, C = w->cs.C;
    long T = w->T;
    /* Cholesky factors of every q(w | s = h) covariance, then K-vectors. */
    double *L = vbm_calloc((size_t)H * K * K + 2 * (size_t)K + (size_t)H, sizeof(double));
    if (!L)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a read");
    double *wvec = L + (size_t)H * K * K, *ev = wvec + K,
           *sh = ev + K; /* sh: q(s_t) of one frame */
    memcpy(L, w->Sw, sizeof(double) * H * K * K);
    for (int h = 0; h < H; h++)
        la_chol(K, L + (size_t)h * K * K); /* Sw_h is SPD by construction */
    for (long t = 0; t < T; t++) {
        for (int c = 0; c < H; c++)
            sh[c] = w->thetaT[(size_t)c * T + t];
        int h = (int)rng_categorical(rng, sh, H);
        int gh = g * H + h;
        const double *Lh = L + (size_t)h * K * K;
        for (int k = 0; k < K; k++)
            ev[k] = rng_normal(rng);
        for (int i = 0; i < K; i++) {
            double v = w->W[((size_t)h * K + i) * T + t];
            for (int j = 0; j <= i; j++)
                v += Lh[(size_t)i * K + j] * ev[j];
            wvec[i] = v;
        }
        draw_code(K, cg, BLK_R(mem, gh), BLK_U(mem, gh), BLK_B(mem, gh), mem->s2_b[gh],
                  mem->cfg.sigma_z2, wvec, rng, out_z + (size_t)t * C + (size_t)g * cg);
    }
    free(L);
    return VBM_OK;
}

vbm_status mixgroup_sample_one(const vbm_memory *mem, int g, int h, rng_t *rng, double *out,
                               vbm_error *err)
{
    int K = mem->cfg.rows, gh = g * mem->cfg.clusters + h;
    double *wvec = vbm_calloc((size_t)K, sizeof(double));
    if (!wvec)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a sample");
    for (int k = 0; k < K; k++)
        wvec[k] = rng_normal(rng);
    draw_code(K, mem->cg, BLK_R(mem, gh), BLK_U(mem, gh), BLK_B(mem, gh), mem->s2_b[gh],
              mem->cfg.sigma_z2, wvec, rng, out);
    free(wvec);
    return VBM_OK;
}

/* ---- the mixture model: a single group ---- */

static vbm_status mix_work_new(const vbm_memory *mem, const vbm_codes *codes, void **work,
                               vbm_error *err)
{
    mixgroup_work *w = vbm_calloc(1, sizeof *w);
    if (!w)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    vbm_status st = mixgroup_work_init(w, mem, codes, 0, err);
    if (st) {
        free(w);
        return st;
    }
    *work = w;
    return VBM_OK;
}

static void mix_work_free(void *work)
{
    if (!work)
        return;
    mixgroup_work_free(work);
    free(work);
}

static vbm_status mix_init(vbm_memory *mem, const vbm_codes *codes, const prior_t *prior,
                           void *work, vbm_init init, rng_t *rng, vbm_error *err)
{
    return mixgroup_init(mem, 0, prior, codes, work, init, rng, err);
}

static vbm_status mix_address(const vbm_memory *mem, const prior_t *prior, void *work,
                              vbm_elbo *elbo, vbm_error *err)
{
    return mixgroup_address(mem, prior, work, elbo, err);
}

static vbm_status mix_update(vbm_memory *mem, const prior_t *prior, void *work, vbm_error *err)
{
    return mixgroup_update(mem, prior, work, err);
}

static vbm_status mix_addresses(const vbm_memory *mem, void *work, vbm_addresses *out,
                                vbm_error *err)
{
    mixgroup_work *w = work;
    vbm_status st = addresses_alloc(out, w->T, 1, w->H, w->K, 1, err);
    if (st)
        return st;
    (void)mem;
    mixgroup_export(w, 1, out);
    return VBM_OK;
}

static vbm_status mix_read_draw(const vbm_memory *mem, void *work, rng_t *rng, double *out_z,
                                vbm_error *err)
{
    return mixgroup_read_draw(mem, work, rng, out_z, err);
}

static vbm_status mix_sample(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                             int *out_s, vbm_error *err)
{
    int H = mem->cfg.clusters, C = mem->cfg.code_size;
    for (long i = 0; i < n; i++) {
        int h = cluster >= 0 ? cluster : (int)rng_below(rng, (uint64_t)H);
        if (out_s)
            out_s[i] = h;
        vbm_status st = mixgroup_sample_one(mem, 0, h, rng, out_z + (size_t)i * C, err);
        if (st)
            return st;
    }
    return VBM_OK;
}

static void mix_set_solver(void *work, int mode)
{
    mixgroup_set_solver(work, mode);
}

static void mix_finish(vbm_memory *mem, const prior_t *prior, void *work)
{
    mixgroup_finish(mem, prior, work);
}

static vbm_status mix_set_team(void *work, team_t *team, vbm_error *err)
{
    return mixgroup_set_team(work, team, err);
}

const model_ops mixture_ops = {mix_work_new,   mix_work_free, mix_init,      mix_address,
                               mix_update,     mix_addresses, mix_read_draw, mix_sample,
                               mix_set_solver, mix_finish,    mix_set_team};
