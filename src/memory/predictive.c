/* predictive.c -- owns the memory's predictive distribution of one code, p(z | q(Omega)): its log
 * density (on the known dimensions of a code) and the completion of a code's unknown dimensions
 * from its known ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "numerics/linalg.h"
#include "vbmem/vbmem.h"

#define PRED_LOG_2PI 1.8378770664093454836

/* The Gaussian of one (group, cluster) block, or of one categorical row, restricted to the
 * n known columns idx[0..n-1] of a group: mean m_j = mu_b[idx[j]] (or R_k[idx[j]]) and
 * covariance Rk^T Rk + c I, with Rk the K x n columns of R (K = 0: isotropic). */
typedef struct {
    int K, n;
    const double *R; /* K x cg block of the posterior mean of M, or NULL (K = 0) */
    int cg;
    const double *mean; /* cg means of the block */
    double c;           /* isotropic variance: tr(U) + s2_b + sigma_z2 */
} pred_block;

/* Scratch of one block evaluation: A (K x K), its factor, r = Rk d (K), d (n). */
typedef struct {
    double *A, *r, *d;
} pred_work;

/* The log density of the known values x[idx[j]] of one block's Gaussian and, when w is not
 * NULL, the posterior mean of the block's row weights, w = (c I + Rk Rk^T)^{-1} Rk d (K
 * values): the completion of unknown column u is mean[u] + sum_k R[k][u] w[k]. Returns NAN
 * when the factorisation fails. */
static double pred_block_eval(const pred_block *b, const double *x, const int *idx, pred_work *wk,
                              double *w)
{
    int K = b->K, n = b->n;
    double quad = 0.0, logdet, rr = 0.0;

    for (int j = 0; j < n; j++) {
        wk->d[j] = x[idx[j]] - b->mean[idx[j]];
        quad += wk->d[j] * wk->d[j];
    }
    if (K == 0)
        return -0.5 * (quad / b->c + (double)n * (log(b->c) + PRED_LOG_2PI));
    for (int k = 0; k < K; k++) {
        const double *Rk = b->R + (size_t)k * (size_t)b->cg;
        double s = 0.0;

        for (int j = 0; j < n; j++)
            s += Rk[idx[j]] * wk->d[j];
        wk->r[k] = s;
        for (int l = 0; l <= k; l++) {
            const double *Rl = b->R + (size_t)l * (size_t)b->cg;
            double a = 0.0;

            for (int j = 0; j < n; j++)
                a += Rk[idx[j]] * Rl[idx[j]];
            wk->A[(size_t)k * K + l] = a + (k == l ? b->c : 0.0);
        }
    }
    if (la_chol(K, wk->A) != 0)
        return NAN;
    logdet = la_chol_logdet(K, wk->A) + (double)(n - K) * log(b->c);
    if (w != NULL) {
        memcpy(w, wk->r, (size_t)K * sizeof *w);
        if (la_chol_solve(K, 1, wk->A, w, 1) != 0)
            return NAN;
        for (int k = 0; k < K; k++)
            rr += wk->r[k] * w[k];
    } else {
        /* r^T A^{-1} r by the forward substitution L y = r: |y|^2 */
        for (int k = 0; k < K; k++) {
            double s = wk->r[k];

            for (int l = 0; l < k; l++)
                s -= wk->A[(size_t)k * K + l] * wk->r[l];
            wk->r[k] = s / wk->A[(size_t)k * K + k];
            rr += wk->r[k] * wk->r[k];
        }
    }
    return -0.5 * ((quad - rr) / b->c + logdet + (double)n * PRED_LOG_2PI);
}

/* The block of (group g, component h) of mem: a cluster's Gaussian (every kind but the
 * categorical) or row h's isotropic Gaussian (categorical). */
static void pred_block_of(const vbm_memory *mem, int g, int h, pred_block *b)
{
    const vbm_config *c = &mem->cfg;
    int K = c->rows, cg = mem->cg;

    b->cg = cg;
    if (c->kind == VBM_CATEGORICAL) {
        b->K = 0;
        b->R = NULL;
        b->mean = mem->R + (size_t)h * (size_t)cg;
        b->c = mem->U[(size_t)h * K + h] + c->sigma_z2;
        return;
    }
    size_t gh = (size_t)g * (size_t)c->clusters + (size_t)h;
    const double *U = mem->U + gh * (size_t)K * (size_t)K;
    double tr = 0.0;

    for (int k = 0; k < K; k++)
        tr += U[(size_t)k * K + k];
    b->K = K;
    b->R = mem->R + gh * (size_t)K * (size_t)cg;
    b->mean = mem->mu_b + gh * (size_t)cg;
    b->c = tr + (c->shift ? mem->s2_b[gh] : 0.0) + c->sigma_z2;
}

/* Components per group: clusters, or the categorical model's K rows. */
static int pred_components(const vbm_memory *mem)
{
    return mem->cfg.kind == VBM_CATEGORICAL ? mem->cfg.rows : mem->cfg.clusters;
}

/* Check the arguments shared by both entry points. */
static vbm_status pred_check(const vbm_memory *mem, const vbm_codes *codes, const void *out,
                             vbm_error *err)
{
    vbm_status st;

    if (mem == NULL || codes == NULL || out == NULL)
        return vbm_fail(err, VBM_EINVAL, NULL, "predictive: NULL argument");
    st = vbm_codes_check(mem, codes, err);
    return st;
}

/* Evaluate every frame of codes: per group, each component's log density on the frame's
 * known columns of that group; the frame's log density (out_lp, may be NULL) and, when
 * out_z is not NULL, the completion of its unknown columns from the most probable
 * component of each group (the mean of the mixture of components when the group has no
 * known column). */
static vbm_status pred_run(const vbm_memory *mem, const vbm_codes *codes, const unsigned char *mask,
                           double *out_lp, double *out_z, vbm_error *err)
{
    int G = mem->cfg.groups, H = pred_components(mem), C = mem->cfg.code_size, cg = mem->cg;
    int K = mem->cfg.kind == VBM_CATEGORICAL ? 0 : mem->cfg.rows, Kw = K > 0 ? K : 1;
    double *lp = vbm_calloc((size_t)H, sizeof(double));
    double *wall = vbm_calloc((size_t)H * (size_t)Kw, sizeof(double));
    int *idx = vbm_calloc((size_t)cg, sizeof(int));
    pred_work wk = {vbm_calloc((size_t)Kw * (size_t)Kw, sizeof(double)),
                    vbm_calloc((size_t)Kw, sizeof(double)), vbm_calloc((size_t)cg, sizeof(double))};
    vbm_status st = VBM_OK;
    pred_block b;

    if (lp == NULL || wall == NULL || idx == NULL || wk.A == NULL || wk.r == NULL || wk.d == NULL)
        st = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for the predictive of %ld codes",
                      codes->T);
    for (long t = 0; st == VBM_OK && t < codes->T; t++) {
        const double *x = codes->mu + (size_t)t * (size_t)C;
        double total = 0.0;

        if (out_z != NULL)
            memcpy(out_z + (size_t)t * (size_t)C, x, (size_t)C * sizeof(double));
        for (int g = 0; st == VBM_OK && g < G; g++) {
            const unsigned char *mk =
                mask != NULL ? mask + (size_t)t * (size_t)C + (size_t)g * cg : NULL;
            int n = 0, best = 0;
            double mx = -HUGE_VAL, s = 0.0;

            for (int j = 0; j < cg; j++)
                if (mk == NULL || mk[j] != 0)
                    idx[n++] = j;
            for (int h = 0; h < H; h++) {
                pred_block_of(mem, g, h, &b);
                b.n = n;
                lp[h] = pred_block_eval(&b, x + (size_t)g * cg, idx, &wk,
                                        K > 0 ? wall + (size_t)h * K : NULL);
                if (!isfinite(lp[h])) {
                    st = vbm_fail(err, VBM_ENUMERIC, NULL,
                                  "the predictive of cluster %d is not positive definite", h);
                    break;
                }
                lp[h] -= log((double)H); /* p(s = h) = 1 / H */
                if (lp[h] > mx) {
                    mx = lp[h];
                    best = h;
                }
            }
            if (st != VBM_OK)
                break;
            for (int h = 0; h < H; h++)
                s += exp(lp[h] - mx);
            total += mx + log(s);
            if (out_z == NULL || n == cg)
                continue;
            double *zg = out_z + (size_t)t * (size_t)C + (size_t)g * cg;

            for (int j = 0; j < cg; j++) {
                if (mk != NULL && mk[j] != 0)
                    continue;
                if (n == 0) { /* no evidence: the mixture's mean */
                    double v = 0.0;

                    for (int h = 0; h < H; h++) {
                        pred_block_of(mem, g, h, &b);
                        v += b.mean[j] / (double)H;
                    }
                    zg[j] = v;
                    continue;
                }
                pred_block_of(mem, g, best, &b);
                double v = b.mean[j];

                for (int k = 0; k < K; k++)
                    v += b.R[(size_t)k * cg + j] * wall[(size_t)best * K + k];
                zg[j] = v;
            }
        }
        if (st == VBM_OK && out_lp != NULL)
            out_lp[t] = total;
    }
    free(lp);
    free(wall);
    free(idx);
    free(wk.A);
    free(wk.r);
    free(wk.d);
    return st;
}

vbm_status vbm_predictive_logpdf(const vbm_memory *mem, const vbm_codes *codes,
                                 const unsigned char *mask, double *out, vbm_error *err)
{
    vbm_status st = pred_check(mem, codes, out, err);

    if (st != VBM_OK)
        return st;
    return pred_run(mem, codes, mask, out, NULL, err);
}

vbm_status vbm_predictive_complete(const vbm_memory *mem, const vbm_codes *codes,
                                   const unsigned char *mask, double *out_z, vbm_error *err)
{
    vbm_status st = pred_check(mem, codes, out_z, err);

    if (st != VBM_OK)
        return st;
    return pred_run(mem, codes, mask, NULL, out_z, err);
}
