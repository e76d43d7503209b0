/* gaussian.c -- memory with Gaussian addresses w_t ~ N(0, I_K) (Theorem 1),
 * optionally mean-shifted z_t = M^T w_t + b + noise (Theorem 3): VB updates,
 * ELBO terms, reads and samples. */
#define _POSIX_C_SOURCE 200809L
#include "gaussian.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"

void gaussian_work_free(gaussian_work *w)
{
    codestat_free(&w->cs);
    free(w->W);
    free(w->Sw);
    free(w->S);
    free(w->Zhat);
    free(w->scratch);
    memset(w, 0, sizeof *w);
}

vbm_status gaussian_work_init(gaussian_work *w, const vbm_memory *mem, const vbm_codes *codes,
                              vbm_error *err)
{
    memset(w, 0, sizeof *w);
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    w->K = K;
    w->C = C;
    w->T = codes->T;
    w->mu = codes->mu;
    vbm_status st = codestat_init(&w->cs, codes, 0, C, err);
    if (st)
        return st;
    w->W = vbm_calloc((size_t)codes->T * K, sizeof(double));
    w->Sw = vbm_calloc((size_t)K * K, sizeof(double));
    w->S = vbm_calloc((size_t)K * K, sizeof(double));
    w->Zhat = vbm_calloc((size_t)codes->T * (C > K ? C : K), sizeof(double));
    w->scratch = vbm_calloc(2 * (size_t)K * K + (size_t)K * C, sizeof(double));
    if (!w->W || !w->Sw || !w->S || !w->Zhat || !w->scratch) {
        gaussian_work_free(w);
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for a Gaussian workspace (T=%ld, K=%d)", codes->T, K);
    }
    return VBM_OK;
}

vbm_status gaussian_elbo(const vbm_memory *mem, const prior_t *prior, gaussian_work *w,
                         vbm_elbo *elbo, vbm_error *err)
{
    int K = w->K, C = w->C, shift = mem->cfg.shift;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    /* Residuals z_t - b - R^T mu_w,t from Zhat = W R. */
    la_gemm(0, 0, (int)T, C, K, 1.0, w->W, K, mem->R, C, 0.0, w->Zhat, C);
    /* tr((R R^T + C U) Sw) */
    la_gemm_sym(K, C, 1.0, mem->R, C, mem->R, C, w->S, K);
    double trS = 0.0, trSw = 0.0;
    for (int i = 0; i < K; i++) {
        trSw += w->Sw[(size_t)i * K + i];
        for (int j = 0; j < K; j++)
            trS += (w->S[(size_t)i * K + j] + C * mem->U[(size_t)i * K + j])
                   * w->Sw[(size_t)j * K + i];
    }
    double loglik = 0.0, klw = 0.0;
    for (long t = 0; t < T; t++) {
        const double *z = w->mu + (size_t)t * C, *zh = w->Zhat + (size_t)t * C,
                     *m = w->W + (size_t)t * K;
        double r2 = 0.0;
        for (int c = 0; c < C; c++) {
            double r = z[c] - zh[c] - (shift ? mem->mu_b[c] : 0.0);
            r2 += r * r;
        }
        double uq = 0.0, mm = 0.0;
        for (int i = 0; i < K; i++) {
            mm += m[i] * m[i];
            for (int j = 0; j < K; j++)
                uq += m[i] * mem->U[(size_t)i * K + j] * m[j];
        }
        double e = r2 + C * uq + trS + w->cs.vsum[t] + (shift ? C * mem->s2_b[0] : 0.0);
        loglik += -0.5 * C * log(2.0 * VBM_PI * s2) - e / (2.0 * s2);
        klw += 0.5 * (trSw + mm - K - w->logdetSw);
    }
    elbo->loglik_codes += loglik + w->cs.entropy;
    elbo->kl_w += klw;
    double klm = kl_matrix_normal(K, C, mem->R, mem->U, prior->R0, prior->P0, prior->logdetU0[0],
                                  w->scratch);
    if (isnan(klm))
        return vbm_fail(err, VBM_ENUMERIC, NULL,
                        "posterior row covariance U is not positive definite");
    elbo->kl_M += klm;
    if (shift)
        elbo->kl_b += kl_iso_normal(C, mem->mu_b, mem->s2_b[0], prior->mu_b0, prior->s2_b0[0]);
    return VBM_OK;
}

static vbm_status g_work_new(const vbm_memory *mem, const vbm_codes *codes, void **work,
                             vbm_error *err)
{
    gaussian_work *w = vbm_calloc(1, sizeof *w);
    if (!w)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    vbm_status st = gaussian_work_init(w, mem, codes, err);
    if (st) {
        free(w);
        return st;
    }
    *work = w;
    return VBM_OK;
}

static void g_work_free(void *work)
{
    if (!work)
        return;
    gaussian_work_free(work);
    free(work);
}

static vbm_status g_init(vbm_memory *mem, const vbm_codes *codes, const prior_t *prior, void *work,
                         vbm_init init, rng_t *rng, vbm_error *err)
{
    (void)codes;
    (void)work;
    (void)err;
    if (init == VBM_INIT_CURRENT)
        return VBM_OK;
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    memcpy(mem->R, prior->R0, sizeof(double) * K * C);
    memcpy(mem->U, prior->U0, sizeof(double) * K * K);
    if (mem->cfg.shift) {
        memcpy(mem->mu_b, prior->mu_b0, sizeof(double) * C);
        mem->s2_b[0] = prior->s2_b0[0];
    }
    if (init == VBM_INIT_AUTO || init == VBM_INIT_RANDOM)
        init_random_means(mem, prior, rng);
    return VBM_OK;
}

/* q(w_t) = N((I + (RR^T + CU)/s2)^{-1} R (z_t - mu_b) / s2, (I + (RR^T + CU)/s2)^{-1}), Eq.
 * 174-175. */
static vbm_status g_address(const vbm_memory *mem, const prior_t *prior, void *work, vbm_elbo *elbo,
                            vbm_error *err)
{
    gaussian_work *w = work;
    int K = w->K, C = w->C;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    double *A = w->Sw;
    la_gemm_sym(K, C, 1.0 / s2, mem->R, C, mem->R, C, A, K);
    for (int i = 0; i < K; i++) {
        for (int j = 0; j < K; j++)
            A[(size_t)i * K + j] += C * mem->U[(size_t)i * K + j] / s2;
        A[(size_t)i * K + i] += 1.0;
    }
    if (la_chol(K, A) != 0)
        return vbm_fail(err, VBM_ENUMERIC, NULL, "address precision is not positive definite");
    w->logdetSw = -la_chol_logdet(K, A);
    /* Rows of W: solve A w_t = R (z_t - mu_b) / s2 for every frame: W^T = A^{-1} R (Z - 1 b^T)^T /
     * s2. */
    double *Bt = w->Zhat; /* K x T right-hand sides (scratch) */
    if (mem->cfg.shift)
        for (long t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                w->Zhat[(size_t)t * C + c] = w->mu[(size_t)t * C + c] - mem->mu_b[c];
    /* W = (Z - b) R^T / s2 : T x K */
    if (mem->cfg.shift)
        la_gemm(0, 1, (int)T, K, C, 1.0 / s2, w->Zhat, C, mem->R, C, 0.0, w->W, K);
    else
        la_gemm(0, 1, (int)T, K, C, 1.0 / s2, w->mu, C, mem->R, C, 0.0, w->W, K);
    /* transpose to K x T, solve, transpose back */
    for (long t = 0; t < T; t++)
        for (int k = 0; k < K; k++)
            Bt[(size_t)k * T + t] = w->W[(size_t)t * K + k];
    la_chol_solve(K, (int)T, A, Bt, (int)T);
    for (long t = 0; t < T; t++)
        for (int k = 0; k < K; k++)
            w->W[(size_t)t * K + k] = Bt[(size_t)k * T + t];
    la_chol_inverse(K, A); /* A now holds Sw */
    return elbo ? gaussian_elbo(mem, prior, w, elbo, err) : VBM_OK;
}

/* q(b) (Eq. 170-171) then q(M) (Eq. 178-179). */
static vbm_status g_update(vbm_memory *mem, const prior_t *prior, void *work, vbm_error *err)
{
    gaussian_work *w = work;
    int K = w->K, C = w->C;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    if (mem->cfg.shift) {
        double sb = 1.0 / (1.0 / prior->s2_b0[0] + (double)T / s2);
        double *wsum = w->scratch;
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (long t = 0; t < T; t++)
                s += w->W[(size_t)t * K + k];
            wsum[k] = s;
        }
        for (int c = 0; c < C; c++) {
            double zs = 0.0, rw = 0.0;
            for (long t = 0; t < T; t++)
                zs += w->mu[(size_t)t * C + c];
            for (int k = 0; k < K; k++)
                rw += mem->R[(size_t)k * C + c] * wsum[k];
            mem->mu_b[c] = sb * (prior->mu_b0[c] / prior->s2_b0[0] + (zs - rw) / s2);
        }
        mem->s2_b[0] = sb;
    }
    double *Q = w->S;
    la_gemm(1, 0, K, K, (int)T, 1.0 / s2, w->W, K, w->W, K, 0.0, Q, K);
    for (size_t i = 0; i < (size_t)K * K; i++)
        Q[i] += prior->P0[i] + T * w->Sw[i] / s2;
    la_symmetrize_lower(K, Q);
    const double *Zc = w->mu;
    if (mem->cfg.shift) {
        for (long t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                w->Zhat[(size_t)t * C + c] = w->mu[(size_t)t * C + c] - mem->mu_b[c];
        Zc = w->Zhat;
    }
    memcpy(mem->R, prior->P0R0, sizeof(double) * K * C);
    la_gemm(1, 0, K, C, (int)T, 1.0 / s2, w->W, K, Zc, C, 1.0, mem->R, C);
    if (la_chol(K, Q) != 0)
        return vbm_fail(err, VBM_ENUMERIC, NULL, "memory precision is not positive definite");
    la_chol_solve(K, C, Q, mem->R, C);
    memcpy(mem->U, Q, sizeof(double) * K * K);
    la_chol_inverse(K, mem->U);
    return VBM_OK;
}

static vbm_status g_addresses(const vbm_memory *mem, void *work, vbm_addresses *out, vbm_error *err)
{
    gaussian_work *w = work;
    (void)mem;
    vbm_status st = addresses_alloc(out, w->T, 1, 1, w->K, 1, err);
    if (st)
        return st;
    for (long t = 0; t < w->T; t++)
        out->s[t] = 1.0;
    memcpy(out->w_mu, w->W, sizeof(double) * w->T * w->K);
    memcpy(out->w_cov, w->Sw, sizeof(double) * w->K * w->K);
    return VBM_OK;
}

static vbm_status g_read_draw(const vbm_memory *mem, void *work, rng_t *rng, double *out_z,
                              vbm_error *err)
{
    gaussian_work *w = work;
    int K = w->K, C = w->C;
    double *L = w->scratch, *wv = w->scratch + (size_t)K * K, *e = wv + K;
    memcpy(L, w->Sw, sizeof(double) * K * K);
    la_chol(K, L);
    for (long t = 0; t < w->T; t++) {
        for (int k = 0; k < K; k++)
            e[k] = rng_normal(rng);
        for (int i = 0; i < K; i++) {
            double v = w->W[(size_t)t * K + i];
            for (int j = 0; j <= i; j++)
                v += L[(size_t)i * K + j] * e[j];
            wv[i] = v;
        }
        draw_code(K, C, mem->R, mem->U, mem->cfg.shift ? mem->mu_b : NULL,
                  mem->cfg.shift ? mem->s2_b[0] : 0.0, mem->cfg.sigma_z2, wv, rng,
                  out_z + (size_t)t * C);
    }
    (void)err;
    return VBM_OK;
}

static vbm_status g_sample(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                           int *out_s, vbm_error *err)
{
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    (void)cluster;
    double *wv = vbm_calloc((size_t)K, sizeof(double));
    if (!wv)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for a sample");
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < K; k++)
            wv[k] = rng_normal(rng);
        draw_code(K, C, mem->R, mem->U, mem->cfg.shift ? mem->mu_b : NULL,
                  mem->cfg.shift ? mem->s2_b[0] : 0.0, mem->cfg.sigma_z2, wv, rng,
                  out_z + (size_t)i * C);
        if (out_s)
            out_s[i] = 0;
    }
    free(wv);
    return VBM_OK;
}

const model_ops gaussian_ops = {g_work_new,  g_work_free, g_init, g_address, g_update, g_addresses,
                                g_read_draw, g_sample,    NULL,   NULL,      NULL,     NULL};
