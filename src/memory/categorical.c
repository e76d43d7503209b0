/* categorical.c -- memory with categorical addresses w_t ~ Cat_K(1/K) over the
 * rows of M (Theorem 2): VB updates, ELBO terms, reads and samples. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory_impl.h"
#include "numerics/linalg.h"

typedef struct {
    int K, C;
    long T;
    codestat_t cs;
    const double *mu;
    double *theta;   /* T x K */
    double *P;       /* T x K: z_t . R_k */
    double *diagS;   /* K: |R_k|^2 + C U_kk */
    double *Q;       /* K x K */
    double *scratch; /* 2 K^2 + K C */
} cat_work;

static void c_work_free(void *work)
{
    cat_work *w = work;
    if (!w)
        return;
    codestat_free(&w->cs);
    free(w->theta);
    free(w->P);
    free(w->diagS);
    free(w->Q);
    free(w->scratch);
    free(w);
}

static vbm_status c_work_new(const vbm_memory *mem, const vbm_codes *codes, void **work,
                             vbm_error *err)
{
    cat_work *w = vbm_calloc(1, sizeof *w);
    if (!w)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    w->K = K;
    w->C = C;
    w->T = codes->T;
    w->mu = codes->mu;
    vbm_status st = codestat_init(&w->cs, codes, 0, C, err);
    if (st) {
        free(w);
        return st;
    }
    w->theta = vbm_calloc((size_t)codes->T * K, sizeof(double));
    w->P = vbm_calloc((size_t)codes->T * K, sizeof(double));
    w->diagS = vbm_calloc((size_t)K, sizeof(double));
    w->Q = vbm_calloc((size_t)K * K, sizeof(double));
    w->scratch = vbm_calloc(2 * (size_t)K * K + (size_t)K * C, sizeof(double));
    if (!w->theta || !w->P || !w->diagS || !w->Q || !w->scratch) {
        c_work_free(w);
        return vbm_fail(err, VBM_ENOMEM, NULL,
                        "out of memory for a categorical workspace (T=%ld, K=%d)", codes->T, K);
    }
    *work = w;
    return VBM_OK;
}

static vbm_status c_init(vbm_memory *mem, const vbm_codes *codes, const prior_t *prior, void *work,
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
    if (init == VBM_INIT_AUTO || init == VBM_INIT_RANDOM)
        init_random_means(mem, prior, rng);
    return VBM_OK;
}

/* theta_t = softmax(-diag(RR^T + CU) / (2 s2) + R z_t / s2), Eq. 123 with sigma_z^2. */
static vbm_status c_address(const vbm_memory *mem, const prior_t *prior, void *work, vbm_elbo *elbo,
                            vbm_error *err)
{
    cat_work *w = work;
    int K = w->K, C = w->C;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    vbm_elbo unused = {0};
    if (!elbo)
        elbo = &unused; /* the terms are by-products of the address step here */
    for (int k = 0; k < K; k++) {
        double r2 = 0.0;
        for (int c = 0; c < C; c++)
            r2 += mem->R[(size_t)k * C + c] * mem->R[(size_t)k * C + c];
        w->diagS[k] = r2 + C * mem->U[(size_t)k * K + k];
    }
    la_gemm(0, 1, (int)T, K, C, 1.0, w->mu, C, mem->R, C, 0.0, w->P, K);
    double loglik = 0.0, klw = 0.0;
    for (long t = 0; t < T; t++) {
        double *th = w->theta + (size_t)t * K;
        const double *p = w->P + (size_t)t * K;
        for (int k = 0; k < K; k++)
            th[k] = (p[k] - 0.5 * w->diagS[k]) / s2;
        softmax_inplace(K, th);
        double e = w->cs.znorm[t] + w->cs.vsum[t];
        for (int k = 0; k < K; k++)
            e += th[k] * (w->diagS[k] - 2.0 * p[k]);
        loglik += -0.5 * C * log(2.0 * VBM_PI * s2) - e / (2.0 * s2);
        klw += kl_uniform_cat(K, th);
    }
    elbo->loglik_codes += loglik + w->cs.entropy;
    elbo->kl_w += klw;
    double klm = kl_matrix_normal(K, C, mem->R, mem->U, prior->R0, prior->P0, prior->logdetU0[0],
                                  w->scratch);
    if (isnan(klm))
        return vbm_fail(err, VBM_ENUMERIC, NULL,
                        "posterior row covariance U is not positive definite");
    elbo->kl_M += klm;
    return VBM_OK;
}

/* R = (U0^{-1} + sum diag(theta_t)/s2)^{-1} (U0^{-1} R0 + sum theta_t z_t^T / s2), Eq. 126-127. */
static vbm_status c_update(vbm_memory *mem, const prior_t *prior, void *work, vbm_error *err)
{
    cat_work *w = work;
    int K = w->K, C = w->C;
    long T = w->T;
    double s2 = mem->cfg.sigma_z2;
    memcpy(w->Q, prior->P0, sizeof(double) * K * K);
    for (int k = 0; k < K; k++) {
        double n = 0.0;
        for (long t = 0; t < T; t++)
            n += w->theta[(size_t)t * K + k];
        w->Q[(size_t)k * K + k] += n / s2;
    }
    memcpy(mem->R, prior->P0R0, sizeof(double) * K * C);
    la_gemm(1, 0, K, C, (int)T, 1.0 / s2, w->theta, K, w->mu, C, 1.0, mem->R, C);
    if (la_chol(K, w->Q) != 0)
        return vbm_fail(err, VBM_ENUMERIC, NULL, "memory precision is not positive definite");
    la_chol_solve(K, C, w->Q, mem->R, C);
    memcpy(mem->U, w->Q, sizeof(double) * K * K);
    la_chol_inverse(K, mem->U);
    return VBM_OK;
}

static vbm_status c_addresses(const vbm_memory *mem, void *work, vbm_addresses *out, vbm_error *err)
{
    cat_work *w = work;
    (void)mem;
    vbm_status st = addresses_alloc(out, w->T, 1, 1, w->K, 0, err);
    if (st)
        return st;
    for (long t = 0; t < w->T; t++)
        out->s[t] = 1.0;
    memcpy(out->w_mu, w->theta, sizeof(double) * w->T * w->K);
    return VBM_OK;
}

static void c_draw_row(const vbm_memory *mem, int k, rng_t *rng, double *out)
{
    int K = mem->cfg.rows, C = mem->cfg.code_size;
    double sd = sqrt(mem->U[(size_t)k * K + k] + mem->cfg.sigma_z2);
    for (int c = 0; c < C; c++)
        out[c] = mem->R[(size_t)k * C + c] + sd * rng_normal(rng);
}

static vbm_status c_read_draw(const vbm_memory *mem, void *work, rng_t *rng, double *out_z,
                              vbm_error *err)
{
    cat_work *w = work;
    for (long t = 0; t < w->T; t++) {
        int k = (int)rng_categorical(rng, w->theta + (size_t)t * w->K, w->K);
        c_draw_row(mem, k, rng, out_z + (size_t)t * w->C);
    }
    (void)err;
    return VBM_OK;
}

static vbm_status c_sample(const vbm_memory *mem, long n, int cluster, rng_t *rng, double *out_z,
                           int *out_s, vbm_error *err)
{
    (void)cluster;
    (void)err;
    for (long i = 0; i < n; i++) {
        int k = (int)rng_below(rng, (uint64_t)mem->cfg.rows);
        c_draw_row(mem, k, rng, out_z + (size_t)i * mem->cfg.code_size);
        if (out_s)
            out_s[i] = 0;
    }
    return VBM_OK;
}

const model_ops categorical_ops = {c_work_new, c_work_free, c_init,      c_address,
                                   c_update,   c_addresses, c_read_draw, c_sample,
                                   NULL,       NULL,        NULL,        NULL};
