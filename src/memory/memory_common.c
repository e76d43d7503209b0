/* memory_common.c -- helpers shared by every memory model: the prior view of a
 * VB run, code statistics, KL divergences, softmax, per-sample code draws. */
#define _POSIX_C_SOURCE 200809L
#include "memory_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/linalg.h"

void *vbm_calloc(size_t n, size_t size)
{
    if (n == 0)
        n = 1;
    if (size == 0)
        size = 1;
    if (n > (size_t)VBM_MAX_ELEMENTS * 8 / size)
        return NULL;
    return calloc(n, size);
}

void prior_free(prior_t *p)
{
    free(p->R0);
    free(p->U0);
    free(p->P0);
    free(p->P0R0);
    free(p->logdetU0);
    free(p->mu_b0);
    free(p->s2_b0);
    memset(p, 0, sizeof *p);
}

static vbm_status prior_alloc(prior_t *p, int GH, int K, int cg, vbm_error *err)
{
    memset(p, 0, sizeof *p);
    p->GH = GH;
    p->K = K;
    p->cg = cg;
    size_t kc = (size_t)K * cg, kk = (size_t)K * K;
    p->R0 = vbm_calloc((size_t)GH * kc, sizeof(double));
    p->U0 = vbm_calloc((size_t)GH * kk, sizeof(double));
    p->P0 = vbm_calloc((size_t)GH * kk, sizeof(double));
    p->P0R0 = vbm_calloc((size_t)GH * kc, sizeof(double));
    p->logdetU0 = vbm_calloc((size_t)GH, sizeof(double));
    p->mu_b0 = vbm_calloc((size_t)GH * cg, sizeof(double));
    p->s2_b0 = vbm_calloc((size_t)GH, sizeof(double));
    if (!p->R0 || !p->U0 || !p->P0 || !p->P0R0 || !p->logdetU0 || !p->mu_b0 || !p->s2_b0) {
        prior_free(p);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory building the prior");
    }
    return VBM_OK;
}

/* Factor every U0 block and derive P0, P0R0 and log det U0. When `per_group`
 * is H > 0 the blocks of one group are identical (base prior): the first block
 * of each group is factored and copied to the others. */
static vbm_status prior_factor(prior_t *p, int per_group, vbm_error *err)
{
    size_t kc = (size_t)p->K * p->cg, kk = (size_t)p->K * p->K;
    for (int gh = 0; gh < p->GH; gh++) {
        if (per_group > 0 && gh % per_group != 0) {
            int src = gh - gh % per_group;
            memcpy(p->P0 + gh * kk, p->P0 + src * kk, kk * sizeof(double));
            memcpy(p->P0R0 + gh * kc, p->P0R0 + src * kc, kc * sizeof(double));
            p->logdetU0[gh] = p->logdetU0[src];
            continue;
        }
        double *L = p->P0 + gh * kk;
        memcpy(L, p->U0 + gh * kk, kk * sizeof(double));
        if (la_chol(p->K, L) != 0) {
            prior_free(p);
            return vbm_fail(err, VBM_ENUMERIC, NULL,
                            "prior row covariance of block %d is not positive definite", gh);
        }
        p->logdetU0[gh] = la_chol_logdet(p->K, L);
        int zero = 1; /* a zero prior mean (the default) gives P0R0 = 0: no solve */
        for (size_t i = 0; i < kc && zero; i++)
            zero = p->R0[gh * kc + i] == 0.0;
        if (!zero) {
            memcpy(p->P0R0 + gh * kc, p->R0 + gh * kc, kc * sizeof(double));
            la_chol_solve(p->K, p->cg, L, p->P0R0 + gh * kc, p->cg);
        } /* else P0R0 stays as prior_alloc zeroed it */
        la_chol_inverse(p->K, L);
    }
    return VBM_OK;
}

vbm_status prior_from_base(const vbm_memory *mem, prior_t *p, vbm_error *err)
{
    const vbm_config *c = &mem->cfg;
    int G = c->groups, H = c->clusters, K = c->rows, cg = mem->cg;
    vbm_status st = prior_alloc(p, G * H, K, cg, err);
    if (st)
        return st;
    size_t kc = (size_t)K * cg, kk = (size_t)K * K;
    for (int g = 0; g < G; g++)
        for (int h = 0; h < H; h++) {
            int gh = g * H + h;
            for (int k = 0; k < K; k++)
                memcpy(p->R0 + gh * kc + (size_t)k * cg,
                       mem->R0 + (size_t)k * c->code_size + (size_t)g * cg, cg * sizeof(double));
            memcpy(p->U0 + gh * kk, mem->U0, kk * sizeof(double));
            memcpy(p->mu_b0 + (size_t)gh * cg, mem->mu_b0 + (size_t)g * cg, cg * sizeof(double));
            p->s2_b0[gh] = c->sigma2_b0;
        }
    return prior_factor(p, H, err);
}

vbm_status prior_from_posterior(const vbm_memory *mem, prior_t *p, vbm_error *err)
{
    const vbm_config *c = &mem->cfg;
    int GH = c->groups * c->clusters, K = c->rows, cg = mem->cg;
    vbm_status st = prior_alloc(p, GH, K, cg, err);
    if (st)
        return st;
    memcpy(p->R0, mem->R, (size_t)GH * K * cg * sizeof(double));
    memcpy(p->U0, mem->U, (size_t)GH * K * K * sizeof(double));
    memcpy(p->mu_b0, mem->mu_b, (size_t)GH * cg * sizeof(double));
    for (int gh = 0; gh < GH; gh++)
        p->s2_b0[gh] = c->shift ? mem->s2_b[gh] : c->sigma2_b0;
    return prior_factor(p, 0, err);
}

vbm_status codestat_init(codestat_t *cs, const vbm_codes *codes, int goff, int cg, vbm_error *err)
{
    memset(cs, 0, sizeof *cs);
    cs->T = codes->T;
    cs->C = codes->C;
    cs->goff = goff;
    cs->cg = cg;
    cs->mu = codes->mu;
    cs->znorm = vbm_calloc((size_t)codes->T, sizeof(double));
    cs->vsum = vbm_calloc((size_t)codes->T, sizeof(double));
    if (!cs->znorm || !cs->vsum) {
        codestat_free(cs);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for code statistics");
    }
    const double log2pie = log(2.0 * VBM_PI) + 1.0;
    for (long t = 0; t < codes->T; t++) {
        const double *z = codes->mu + (size_t)t * codes->C + goff;
        double n = la_dot(cg, z, z), v = 0.0;
        if (codes->s2) {
            const double *s = codes->s2 + (size_t)t * codes->C + goff;
            v = la_sum(cg, s);
            for (int d = 0; d < cg; d++)
                if (s[d] > 0.0)
                    cs->entropy += 0.5 * (log2pie + log(s[d]));
        }
        cs->znorm[t] = n;
        cs->vsum[t] = v;
    }
    return VBM_OK;
}

void codestat_free(codestat_t *cs)
{
    free(cs->znorm);
    free(cs->vsum);
    cs->znorm = cs->vsum = NULL;
}

double kl_matrix_normal(int K, int cg, const double *R, const double *U, const double *R0,
                        const double *P0, double logdetU0, double *work)
{
    double *L = work, *PU = work + (size_t)K * K, *D = work + 2 * (size_t)K * K;
    memcpy(L, U, sizeof(double) * (size_t)K * K);
    if (la_chol(K, L) != 0)
        return NAN;
    double logdetU = la_chol_logdet(K, L);
    double trPU = 0.0;
    for (size_t i = 0; i < (size_t)K * K; i++)
        trPU += P0[i] * U[i]; /* both symmetric */
    for (size_t i = 0; i < (size_t)K * cg; i++)
        D[i] = R[i] - R0[i];
    /* tr(D^T P0 D) = sum_ij P0_ij (D D^T)_ij, with D D^T from one GEMM */
    la_gemm_sym(K, cg, 1.0, D, cg, D, cg, PU, K);
    double quad = 0.0;
    for (size_t i = 0; i < (size_t)K * K; i++)
        quad += P0[i] * PU[i];
    return 0.5 * (cg * trPU + quad - (double)K * cg - cg * logdetU + cg * logdetU0);
}

double kl_iso_normal(int n, const double *mu, double s2, const double *mu0, double s20)
{
    double d2 = 0.0;
    for (int i = 0; i < n; i++)
        d2 += (mu[i] - mu0[i]) * (mu[i] - mu0[i]);
    return kl_iso_normal_d2(n, d2, s2, s20);
}

double kl_iso_normal_d2(int n, double d2, double s2, double s20)
{
    return 0.5 * (n * s2 / s20 + d2 / s20 - n - n * log(s2 / s20));
}

double kl_std_normal(int K, const double *mu, int mu_stride, const double *S, double logdetS)
{
    double tr = 0.0, m2 = 0.0;
    for (int k = 0; k < K; k++) {
        tr += S[(size_t)k * K + k];
        m2 += mu[(size_t)k * mu_stride] * mu[(size_t)k * mu_stride];
    }
    return 0.5 * (tr + m2 - K - logdetS);
}

double kl_uniform_cat(int n, const double *theta)
{
    double kl = 0.0;
    for (int i = 0; i < n; i++)
        if (theta[i] > 0.0)
            kl += theta[i] * log(n * theta[i]);
    return kl;
}

void softmax_inplace(int n, double *x)
{
    double m = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (int i = 0; i < n; i++) {
        x[i] = exp(x[i] - m);
        s += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= s;
}

void draw_code(int K, int cg, const double *R, const double *U, const double *mu_b, double s2_b,
               double s2, const double *w, rng_t *rng, double *out_z)
{
    double q = 0.0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++)
            q += w[i] * U[(size_t)i * K + j] * w[j];
    if (q < 0.0)
        q = 0.0;
    double sd = sqrt(q + s2_b + s2);
    for (int c = 0; c < cg; c++) {
        double m = mu_b ? mu_b[c] : 0.0;
        for (int k = 0; k < K; k++)
            m += R[(size_t)k * cg + c] * w[k];
        out_z[c] = m + sd * rng_normal(rng);
    }
}

vbm_status addresses_alloc(vbm_addresses *a, long T, int G, int H, int K, int with_cov,
                           vbm_error *err)
{
    memset(a, 0, sizeof *a);
    a->T = T;
    a->G = G;
    a->H = H;
    a->K = K;
    size_t tgh = (size_t)T * G * H;
    a->s = vbm_calloc(tgh, sizeof(double));
    a->w_mu = vbm_calloc(tgh * K, sizeof(double));
    if (with_cov)
        a->w_cov = vbm_calloc((size_t)G * H * K * K, sizeof(double));
    if (!a->s || !a->w_mu || (with_cov && !a->w_cov)) {
        vbm_addresses_free(a);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory for %ld addresses", T);
    }
    return VBM_OK;
}

void vbm_addresses_free(vbm_addresses *addr)
{
    if (!addr)
        return;
    free(addr->s);
    free(addr->w_mu);
    free(addr->w_cov);
    memset(addr, 0, sizeof *addr);
}

LA_HOT void init_random_means(vbm_memory *mem, const prior_t *prior, rng_t *rng)
{
    int K = prior->K, cg = prior->cg;
    size_t kk = (size_t)K * K, kc = (size_t)K * cg;
    double *L = vbm_calloc(kk, sizeof(double)), *E = vbm_calloc(kc, sizeof(double));
    if (!L || !E) { /* R = R0: a valid (if symmetric) start */
        memcpy(mem->R, prior->R0, (size_t)prior->GH * kc * sizeof(double));
        free(L);
        free(E);
        return;
    }
    for (int gh = 0; gh < prior->GH; gh++) {
        memcpy(L, prior->U0 + gh * kk, kk * sizeof(double));
        la_chol(K, L); /* U0 was factored successfully when the prior was built */
        rng_normal_fill(rng, E, (long)kc);
        double *R = mem->R + gh * kc;
        for (int i = 0; i < K; i++) { /* row i of R0 + L E, as contiguous row sweeps */
            double *restrict r = R + (size_t)i * cg;
            memcpy(r, prior->R0 + gh * kc + (size_t)i * cg, sizeof(double) * cg);
            for (int j = 0; j <= i; j++) {
                double l = L[(size_t)i * K + j];
                const double *restrict e = E + (size_t)j * cg;
                for (int c = 0; c < cg; c++)
                    r[c] += l * e[c];
            }
        }
    }
    free(L);
    free(E);
}
