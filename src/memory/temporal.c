/* temporal.c -- owns the temporal memory (vbm_temporal): its configuration, allocation, the
 * expectations of q(Theta) the VBE reads, and its posterior means. The identity/attribute model of
 * sequences of seed 003 (Berkes, Turner, Sahani) is fitted by VB-EM with the factorisation of
 * eq. 18 (VBE eq. 24-51 in temporal_vbe.c, VBM eq. 53-78 and ARD eq. 82-83 in temporal_vbm.c,
 * free energy sec. 7 in temporal_free.c; write, append and infer in temporal_fit.c, continuation
 * and sampling in temporal_predict.c, the window start in temporal_start.c).
 *
 * Where these files depart from the seed's text, they do so to keep the free energy an exact
 * objective that each update maximises (so that it never decreases):
 *  - q(W) is Gaussian per row w_k (all P*Q weights of output k jointly), not per element:
 *    the seed's per-element Q(w_kpq) (eq. 70-72) is the special case with the off-diagonal
 *    covariances forced to zero; the row posterior is its exact optimum in one step. The VBE
 *    then uses <W_i^T diag(rho) W_p> (which carries those covariances) where eq. 40 writes
 *    <W_i>^T <diag(rho)> <W_p>.
 *  - the update of e'_k (eq. 78) keeps the term tr(Cov(w_k) R) that eq. 75 drops: under
 *    Q(W) Q(rho) it does not depend on rho_k, and without it the update is not the optimum.
 *  - the lambda prior of eq. 13 is represented on a fixed grid of lambda_grid nodes on
 *    (-1, 1) (uniform quadrature weights): q(lambda) keeps the conjugate form (eq. 63-66)
 *    and every expectation, normaliser and KL of it is exact for that discretised prior.
 *  - eq. 104's <a_t^2 a_{t-1}> is read as <a_t> <a_{t-1}> (the cross term of the AR(1) log
 *    density under the eq. 18 factorisation). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory_impl.h"
#include "memory/temporal.h"
#include "numerics/linalg.h"
#include "numerics/special.h"

/* ---- configuration ---- */

void vbm_temporal_config_default(int code_size, int components, vbm_temporal_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->code_size = code_size;
    cfg->components = components;
    cfg->attributes = 1;
    cfg->pi0 = 0.5;
    cfg->u_T[0][0] = cfg->u_T[0][1] = cfg->u_T[1][0] = cfg->u_T[1][1] = 1.0;
    cfg->sigma_a2 = 1.0;
    cfg->lam_eta = 0.5;
    cfg->lam_f = -0.5;
    cfg->lam_g = 0.0;
    cfg->lam_h = -0.5;
    cfg->lambda_grid = 399;
    cfg->rho_d = 1e-3;
    cfg->rho_e = 1e-3;
    cfg->gamma0 = 1.0;
    cfg->gamma_max = 1e8;
    cfg->vbe_temporal = 0;
}

static int pos_finite(double x)
{
    return isfinite(x) && x > 0.0;
}

vbm_status vbm_temporal_config_check(const vbm_temporal_config *c, vbm_error *err)
{
    if (c == NULL)
        return vbm_fail(err, VBM_EINVAL, "config", "is NULL");
    if (c->code_size < 1 || c->code_size > VBM_MAX_CODE_SIZE)
        return vbm_fail(err, VBM_EINVAL, "code_size", "%d is not in [1, %d]", c->code_size,
                        VBM_MAX_CODE_SIZE);
    if (c->components < 1 || c->components > 64)
        return vbm_fail(err, VBM_EINVAL, "components", "%d is not in [1, 64]", c->components);
    if (c->attributes < 1 || c->attributes > 16)
        return vbm_fail(err, VBM_EINVAL, "attributes", "%d is not in [1, 16]", c->attributes);
    if (c->components * c->attributes > 256)
        return vbm_fail(err, VBM_EINVAL, "attributes", "components * attributes = %d > 256",
                        c->components * c->attributes);
    if (!(isfinite(c->pi0) && c->pi0 > 0.0 && c->pi0 < 1.0))
        return vbm_fail(err, VBM_EINVAL, "pi0", "%g is not in (0, 1)", c->pi0);
    for (int m = 0; m < 2; m++)
        for (int n = 0; n < 2; n++)
            if (!pos_finite(c->u_T[m][n])) {
                char f[32];
                snprintf(f, sizeof f, "u_T[%d][%d]", m, n);
                return vbm_fail(err, VBM_EINVAL, f, "%g is not a positive finite number",
                                c->u_T[m][n]);
            }
    if (!pos_finite(c->sigma_a2))
        return vbm_fail(err, VBM_EINVAL, "sigma_a2", "%g is not a positive finite number",
                        c->sigma_a2);
    if (!isfinite(c->lam_eta))
        return vbm_fail(err, VBM_EINVAL, "lam_eta", "is not finite");
    if (!isfinite(c->lam_f))
        return vbm_fail(err, VBM_EINVAL, "lam_f", "is not finite");
    if (!isfinite(c->lam_g))
        return vbm_fail(err, VBM_EINVAL, "lam_g", "is not finite");
    if (!isfinite(c->lam_h))
        return vbm_fail(err, VBM_EINVAL, "lam_h", "is not finite");
    if (c->lambda_grid < 16 || c->lambda_grid > 100000)
        return vbm_fail(err, VBM_EINVAL, "lambda_grid", "%d is not in [16, 100000]",
                        c->lambda_grid);
    if (!pos_finite(c->rho_d))
        return vbm_fail(err, VBM_EINVAL, "rho_d", "%g is not a positive finite number", c->rho_d);
    if (!pos_finite(c->rho_e))
        return vbm_fail(err, VBM_EINVAL, "rho_e", "%g is not a positive finite number", c->rho_e);
    if (!pos_finite(c->gamma0))
        return vbm_fail(err, VBM_EINVAL, "gamma0", "%g is not a positive finite number", c->gamma0);
    if (c->vbe_temporal != 0 && c->vbe_temporal != 1)
        return vbm_fail(err, VBM_EINVAL, "vbe_temporal", "%d is not 0 or 1", c->vbe_temporal);
    if (!(isfinite(c->gamma_max) && c->gamma_max >= c->gamma0))
        return vbm_fail(err, VBM_EINVAL, "gamma_max", "%g is not finite and >= gamma0",
                        c->gamma_max);
    return VBM_OK;
}

/* ---- the memory ---- */

void vbm_temporal_free(vbm_temporal *m)
{
    if (m == NULL)
        return;
    free(m->mw);
    free(m->Sw);
    free(m->ldJw);
    free(m->gamma);
    free(m->rd);
    free(m->re);
    free(m->lam);
    free(m->grid);
    free(m->phi);
    free(m->post);
    free(m->ex.einv);
    free(m->ex.elam);
    free(m->ex.elam2);
    free(m->ex.elog);
    free(m->ex.lmean);
    free(m->ex.kl_lam);
    free(m->ex.rho);
    free(m->ex.elogrho);
    free(m->ex.Wr);
    free(m->ex.M);
    free(m->acc.Saa);
    free(m->acc.Scr);
    free(m->acc.Spr);
    free(m->acc.R);
    free(m->acc.r);
    free(m->acc.yy);
    free(m);
}

/* q(Theta) <- the prior (q(W) means zero, covariances diag(1 / gamma0)). */
static void temporal_reset(vbm_temporal *m)
{
    const vbm_temporal_config *c = &m->cfg;
    int D = m->D, K = m->K;

    memset(m->mw, 0, sizeof(double) * D * K);
    memset(m->Sw, 0, sizeof(double) * D * K * K);
    for (int k = 0; k < D; k++) {
        for (int i = 0; i < K; i++)
            m->Sw[(size_t)k * K * K + i * K + i] = 1.0 / c->gamma0;
        m->ldJw[k] = K * log(c->gamma0);
    }
    for (int i = 0; i < K; i++) {
        m->gamma[i] = c->gamma0;
        m->lam[4 * i + 0] = c->lam_eta;
        m->lam[4 * i + 1] = c->lam_f;
        m->lam[4 * i + 2] = c->lam_g;
        m->lam[4 * i + 3] = c->lam_h;
    }
    for (int k = 0; k < D; k++) {
        m->rd[k] = c->rho_d;
        m->re[k] = c->rho_e;
    }
    m->ut[0] = c->u_T[0][0];
    m->ut[1] = c->u_T[0][1];
    m->ut[2] = c->u_T[1][0];
    m->ut[3] = c->u_T[1][1];
    m->fitted = 0;
    memset(m->acc.N, 0, sizeof m->acc.N);
    memset(m->acc.Saa, 0, sizeof(double) * K);
    memset(m->acc.Scr, 0, sizeof(double) * K);
    memset(m->acc.Spr, 0, sizeof(double) * K);
    memset(m->acc.R, 0, sizeof(double) * K * K);
    memset(m->acc.r, 0, sizeof(double) * D * K);
    memset(m->acc.yy, 0, sizeof(double) * D);
    m->acc.ntr = m->acc.nfr = 0.0;
    m->fe_const = 0.0;
    m->nseq = 0;
    m->last_fe = NAN;
}

vbm_status vbm_temporal_create(const vbm_temporal_config *cfg, vbm_temporal **out, vbm_error *err)
{
    vbm_status st = vbm_temporal_config_check(cfg, err);
    vbm_temporal *m;
    size_t D, K, G;

    if (out == NULL)
        return vbm_fail(err, VBM_EINVAL, "out", "is NULL");
    *out = NULL;
    if (st != VBM_OK)
        return st;
    m = vbm_calloc(1, sizeof *m);
    if (m == NULL)
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory");
    m->cfg = *cfg;
    m->D = cfg->code_size;
    m->P = cfg->components;
    m->Q = cfg->attributes;
    m->K = m->P * m->Q;
    m->G = cfg->lambda_grid;
    D = (size_t)m->D;
    K = (size_t)m->K;
    G = (size_t)m->G;
    m->mw = vbm_calloc(D * K, sizeof(double));
    m->Sw = vbm_calloc(D * K * K, sizeof(double));
    m->ldJw = vbm_calloc(D, sizeof(double));
    m->gamma = vbm_calloc(K, sizeof(double));
    m->rd = vbm_calloc(D, sizeof(double));
    m->re = vbm_calloc(D, sizeof(double));
    m->lam = vbm_calloc(4 * K, sizeof(double));
    m->grid = vbm_calloc(G, sizeof(double));
    m->phi = vbm_calloc(4 * G, sizeof(double));
    m->post = vbm_calloc(G, sizeof(double));
    m->ex.einv = vbm_calloc(K, sizeof(double));
    m->ex.elam = vbm_calloc(K, sizeof(double));
    m->ex.elam2 = vbm_calloc(K, sizeof(double));
    m->ex.elog = vbm_calloc(K, sizeof(double));
    m->ex.lmean = vbm_calloc(K, sizeof(double));
    m->ex.kl_lam = vbm_calloc(K, sizeof(double));
    m->ex.rho = vbm_calloc(D, sizeof(double));
    m->ex.elogrho = vbm_calloc(D, sizeof(double));
    m->ex.Wr = vbm_calloc(D * K, sizeof(double));
    m->ex.M = vbm_calloc(K * K, sizeof(double));
    m->acc.Saa = vbm_calloc(K, sizeof(double));
    m->acc.Scr = vbm_calloc(K, sizeof(double));
    m->acc.Spr = vbm_calloc(K, sizeof(double));
    m->acc.R = vbm_calloc(K * K, sizeof(double));
    m->acc.r = vbm_calloc(D * K, sizeof(double));
    m->acc.yy = vbm_calloc(D, sizeof(double));
    if (!m->acc.Saa || !m->acc.Scr || !m->acc.Spr || !m->acc.R || !m->acc.r || !m->acc.yy) {
        vbm_temporal_free(m);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory for a temporal memory");
    }
    if (!m->mw || !m->Sw || !m->ldJw || !m->gamma || !m->rd || !m->re || !m->lam || !m->grid
        || !m->phi || !m->post || !m->ex.einv || !m->ex.elam || !m->ex.elam2 || !m->ex.elog
        || !m->ex.lmean || !m->ex.kl_lam || !m->ex.rho || !m->ex.elogrho || !m->ex.Wr || !m->ex.M) {
        vbm_temporal_free(m);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory for a temporal memory");
    }
    for (size_t i = 0; i < G; i++) {
        double l = -1.0 + (2.0 * (double)i + 1.0) / (double)G, om = (1.0 - l) * (1.0 + l);
        m->grid[i] = l;
        m->phi[4 * i + 0] = -log(om);
        m->phi[4 * i + 1] = 1.0 / om;
        m->phi[4 * i + 2] = l / om;
        m->phi[4 * i + 3] = l * l / om;
    }
    m->ex.D = m->D;
    m->ex.P = m->P;
    m->ex.Q = m->Q;
    m->ex.K = m->K;
    m->ex.sigma_a2 = cfg->sigma_a2;
    m->ex.logpi[0] = log1p(-cfg->pi0);
    m->ex.logpi[1] = log(cfg->pi0);
    temporal_reset(m);
    temporal_refresh(m);
    *out = m;
    return VBM_OK;
}

/* log of the normaliser of the grid distribution with natural parameters th (eta, f, g, h);
 * with post != NULL also its probabilities. */
double temporal_lam_lognorm(const vbm_temporal *m, const double *th, double *post)
{
    double mx = -INFINITY, s = 0.0;

    for (int i = 0; i < m->G; i++) {
        const double *ph = m->phi + 4 * i;
        double v = th[0] * ph[0] + th[1] * ph[1] + th[2] * ph[2] + th[3] * ph[3];
        if (post)
            post[i] = v;
        if (v > mx)
            mx = v;
    }
    for (int i = 0; i < m->G; i++) {
        const double *ph = m->phi + 4 * i;
        double v = post ? post[i] : th[0] * ph[0] + th[1] * ph[1] + th[2] * ph[2] + th[3] * ph[3];
        double e = exp(v - mx);
        if (post)
            post[i] = e;
        s += e;
    }
    if (post)
        for (int i = 0; i < m->G; i++)
            post[i] /= s;
    return mx + log(s);
}

void temporal_refresh(vbm_temporal *m)
{
    temporal_exp *e = &m->ex;
    int D = m->D, K = m->K, G = m->G;
    double prior[4] = {m->cfg.lam_eta, m->cfg.lam_f, m->cfg.lam_g, m->cfg.lam_h};
    double lz0 = temporal_lam_lognorm(m, prior, NULL);
    double *post = m->post;

    for (int r = 0; r < 2; r++) {
        double ds = special_digamma(m->ut[2 * r] + m->ut[2 * r + 1]);
        e->elogT[2 * r] = special_digamma(m->ut[2 * r]) - ds;
        e->elogT[2 * r + 1] = special_digamma(m->ut[2 * r + 1]) - ds;
    }
    for (int k = 0; k < K; k++) {
        const double *th = m->lam + 4 * k;
        double s[4] = {0, 0, 0, 0}, lm = 0.0, lz;
        lz = temporal_lam_lognorm(m, th, post);
        for (int i = 0; i < G; i++) {
            const double *ph = m->phi + 4 * i;
            s[0] += post[i] * ph[0];
            s[1] += post[i] * ph[1];
            s[2] += post[i] * ph[2];
            s[3] += post[i] * ph[3];
            lm += post[i] * m->grid[i];
        }
        e->elog[k] = -s[0];
        e->einv[k] = s[1];
        e->elam[k] = s[2];
        e->elam2[k] = s[3];
        e->lmean[k] = lm;
        e->kl_lam[k] = (th[0] - prior[0]) * s[0] + (th[1] - prior[1]) * s[1]
                       + (th[2] - prior[2]) * s[2] + (th[3] - prior[3]) * s[3] - lz + lz0;
    }
    memset(e->M, 0, sizeof(double) * K * K);
    for (int k = 0; k < D; k++) {
        const double *w = m->mw + (size_t)k * K, *S = m->Sw + (size_t)k * K * K;
        double rho = m->rd[k] / m->re[k];
        e->rho[k] = rho;
        e->elogrho[k] = special_digamma(m->rd[k]) - log(m->re[k]);
        for (int i = 0; i < K; i++) {
            e->Wr[(size_t)k * K + i] = rho * w[i];
            for (int j = 0; j < K; j++)
                e->M[i * K + j] += rho * (S[i * K + j] + w[i] * w[j]);
        }
    }
}

void vbm_temporal_posterior(const vbm_temporal *m, double *W, double *gamma, double *T,
                            double *lambda, double *rho)
{
    if (m == NULL)
        return;
    if (W)
        memcpy(W, m->mw, sizeof(double) * m->D * m->K);
    if (gamma)
        memcpy(gamma, m->gamma, sizeof(double) * m->K);
    if (T)
        for (int r = 0; r < 2; r++) {
            double s = m->ut[2 * r] + m->ut[2 * r + 1];
            T[2 * r] = m->ut[2 * r] / s;
            T[2 * r + 1] = m->ut[2 * r + 1] / s;
        }
    if (lambda)
        memcpy(lambda, m->ex.lmean, sizeof(double) * m->K);
    if (rho)
        memcpy(rho, m->ex.rho, sizeof(double) * m->D);
}
