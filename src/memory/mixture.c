/* mixture.c -- the scalable mixture-based memory (Theorem 4) for one group of code columns:
 * its workspace, k-means++ seeding of the shifts (Sec. 3.2.1), reads and samples, and the
 * single-group mixture model; the address step is in mixture_address.c, the update of
 * q(b_h), q(M_h) in mixture_update.c. */
#define _POSIX_C_SOURCE 200809L
#include "mixture_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"
#include "numerics/vexp.h"
#include "scratch.h"

/* H per-cluster records, zeroed, each on its own cache lines; NULL when out of memory. */
static mixcluster *cl_alloc(int H)
{
    void *p = NULL;
    if (H < 1 || posix_memalign(&p, 64, sizeof(mixcluster) * (size_t)H) != 0)
        return NULL;
    memset(p, 0, sizeof(mixcluster) * (size_t)H);
    return p;
}

/* Doubles of one cluster's scratch (mixgroup_work.gsc): the address step's
 * precision A (K^2), then the Gram update's M2, YY, X, AW, Q, M1 (K^2 each) and
 * Amb, wzb, v, rhs (K each). They live from one phase of the cluster loops to
 * the next (see update_gram_run). */
size_t mixgroup_gsc_len(int K)
{
    return 7 * (size_t)K * K + 4 * (size_t)K;
}

static size_t scratch_len(int K, int cg, long T)
{
    return 2 * (size_t)K * K + (size_t)K * cg + 2 * (size_t)T + (size_t)cg;
}

mixgroup_scratch mixgroup_scratch_of(const mixgroup_work *w, int worker)
{
    size_t kk = (size_t)w->K * w->K;
    mixgroup_scratch s;
    s.kw = w->scr + (size_t)worker * w->scr_len;
    s.acc = s.kw + 2 * kk + (size_t)w->K * w->cg;
    s.zx = s.acc + 2 * (size_t)w->T;
    return s;
}

void mixgroup_work_free(mixgroup_work *w)
{
    codestat_free(&w->cs);
    size_t hkt = (size_t)w->H * w->K * w->T;
    scratch_give(w->scratch, w->P, hkt);
    scratch_give(w->scratch, w->W, hkt + (size_t)w->H * w->T);
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

/* P and W, from w's scratch when it has one (see mixgroup_work). Written before
 * they are read: their contents when taken do not matter. VBM_ENOMEM on failure. */
vbm_status mixgroup_big_arrays(mixgroup_work *w, vbm_error *err)
{
    if (w->P && w->W)
        return VBM_OK;
    size_t hkt = (size_t)w->H * w->K * w->T;
    if (!w->P)
        w->P = scratch_take(w->scratch, hkt);
    /* W has H more rows of T: the direct update weighs W in place and copies q(s)
     * there, so that Wt Z and Theta^T Z are one product (see mixgroup_update). */
    if (!w->W)
        w->W = scratch_take(w->scratch, hkt + (size_t)w->H * w->T);
    if (!w->P || !w->W)
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for the address means (T=%ld, H=%d, K=%d)", w->T, w->H,
                        w->K);
    return VBM_OK;
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
vbm_status mixgroup_gram_codes(mixgroup_work *w, vbm_error *err)
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
vbm_status mixgroup_gram_prepare(const vbm_memory *mem, const prior_t *prior, mixgroup_work *w,
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
    vbm_status st = mixgroup_gram_codes(w, err);
    if (st)
        return st;
    w->SR = vbm_calloc((size_t)H * kk, sizeof(double));
    w->LQ = vbm_calloc((size_t)H * kk, sizeof(double));
    w->Wt = vbm_calloc(hkt, sizeof(double));
    w->Wtc = vbm_calloc(hkt, sizeof(double)); /* as Wt: the two swap */
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
    if (!w->SR || !w->LQ || !w->Wt || !w->Wtc || !w->swc || !w->GT
        || (w->prior_mean && (!w->AZ || !w->AAt)) || (w->shift_mean && !w->zmu0)
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
    w->gsc = vbm_calloc((size_t)H * mixgroup_gsc_len(K), sizeof(double));
    w->fel = vbm_calloc(3 * (size_t)((T + FRAME_CHUNK - 1) / FRAME_CHUNK), sizeof(double));
    w->cl = cl_alloc(H);
    if (!w->thetaT || !w->E || !w->LW || !w->S || !w->Sw || !w->Rmb || !w->sw || !w->zb || !w->scr
        || !w->gsc || !w->cl || !w->fel) {
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
        vbm_status st = mixgroup_gram_codes(w, err);
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

static void mix_set_scratch(void *work, vbm_scratch *scratch)
{
    mixgroup_work *w = work;
    w->scratch = scratch;
}

const model_ops mixture_ops = {mix_work_new,   mix_work_free, mix_init,      mix_address,
                               mix_update,     mix_addresses, mix_read_draw, mix_sample,
                               mix_set_solver, mix_finish,    mix_set_team,  mix_set_scratch};
