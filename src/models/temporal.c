/* temporal.c -- owns the temporal memory (vbm_temporal): the identity/attribute model of
 * sequences of seed 003 (Berkes, Turner, Sahani), fitted by VB-EM with the factorisation of
 * eq. 18 (VBE eq. 24-51, VBM eq. 53-78, ARD eq. 82-83, free energy sec. 7).
 *
 * Where this file departs from the seed's text, it does so to keep the free energy an exact
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
#include "models/temporal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "numerics/linalg.h"
#include "numerics/rng.h"

#include <lapacke.h>

#define TM_LOG2PI 1.83787706640934548356

/* ---- special functions (own, so that no libm global such as signgam is touched) ---- */

/* digamma(x) for x > 0: recurrence up to x >= 6, then the asymptotic series. */
static double tm_digamma(double x)
{
    double r = 0.0, f;

    while (x < 6.0) {
        r -= 1.0 / x;
        x += 1.0;
    }
    f = 1.0 / (x * x);
    return r + log(x) - 0.5 / x
           - f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

/* log Gamma(x) for x > 0: recurrence up to x >= 7, then Stirling's series. */
static double tm_lgamma(double x)
{
    double r = 0.0, f;

    while (x < 7.0) {
        r -= log(x);
        x += 1.0;
    }
    f = 1.0 / (x * x);
    return r + (x - 0.5) * log(x) - x + 0.5 * TM_LOG2PI
           + (1.0 / x) * (1.0 / 12 - f * (1.0 / 360 - f * (1.0 / 1260 - f / 1680)));
}

/* KL(Gamma(a1, b1) || Gamma(a0, b0)), shape/rate. */
static double kl_gamma(double a1, double b1, double a0, double b0)
{
    return (a1 - a0) * tm_digamma(a1) - tm_lgamma(a1) + tm_lgamma(a0) + a0 * (log(b1) - log(b0))
           + a1 * (b0 - b1) / b1;
}

/* KL(Beta(u1) || Beta(u0)) for pairs u1, u0. */
static double kl_beta(const double *u1, const double *u0)
{
    double s1 = u1[0] + u1[1], s0 = u0[0] + u0[1];
    double lb1 = tm_lgamma(u1[0]) + tm_lgamma(u1[1]) - tm_lgamma(s1);
    double lb0 = tm_lgamma(u0[0]) + tm_lgamma(u0[1]) - tm_lgamma(s0);
    double ds = tm_digamma(s1);

    return lb0 - lb1 + (u1[0] - u0[0]) * (tm_digamma(u1[0]) - ds)
           + (u1[1] - u0[1]) * (tm_digamma(u1[1]) - ds);
}

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
static double lam_lognorm(const vbm_temporal *m, const double *th, double *post)
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
    double lz0 = lam_lognorm(m, prior, NULL);
    double *post = m->post;

    for (int r = 0; r < 2; r++) {
        double ds = tm_digamma(m->ut[2 * r] + m->ut[2 * r + 1]);
        e->elogT[2 * r] = tm_digamma(m->ut[2 * r]) - ds;
        e->elogT[2 * r + 1] = tm_digamma(m->ut[2 * r + 1]) - ds;
    }
    for (int k = 0; k < K; k++) {
        const double *th = m->lam + 4 * k;
        double s[4] = {0, 0, 0, 0}, lm = 0.0, lz;
        lz = lam_lognorm(m, th, post);
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
        e->elogrho[k] = tm_digamma(m->rd[k]) - log(m->re[k]);
        for (int i = 0; i < K; i++) {
            e->Wr[(size_t)k * K + i] = rho * w[i];
            for (int j = 0; j < K; j++)
                e->M[i * K + j] += rho * (S[i * K + j] + w[i] * w[j]);
        }
    }
}

/* ---- q(B, A) of one sequence (eq. 18: one factor per (t, p)) ---- */

typedef struct {
    long T;
    const double *y; /* T x D */
    double *q1, *q0; /* [T x P] q(b_{t,p} = 1), q(b_{t,p} = 0) */
    double *mu1;     /* [T x K] mean of a_{t,p} when b = 1 (eq. 40) */
    double *S1;      /* [T x P][Q x Q] its covariance (eq. 39) */
    double *ld1;     /* [T x P] log det Sigma_{t,p}^{-1} */
    double *mu2;     /* [T x K] mean of a_{t,p} when b = 0 (eq. 28-33) */
    double *s2;      /* [T x K] its (diagonal) variance */
    double *ex;      /* [T x K] <a b> (eq. 48) */
    double *ea;      /* [T x K] <a> (eq. 47) */
    double *eaa;     /* [T x K] <a^2> per attribute (diagonal of eq. 51) */
    double *wry;     /* [T x K] <W>^T <diag(rho)> y_t */
    /* eq. 19 (temporal) factorisation only */
    int temporal;
    double *V;   /* [T x P][Q x Q] Cov(a_{t,p}) under q(a_{1:T,p}) */
    double *C;   /* [T x P][Q x Q] Cov(a_{t,p}, a_{t-1,p}) (t >= 1) */
    double *xi;  /* [T x P][4] q(b_{t-1,p} = m, b_{t,p} = n) at [2 m + n] (t >= 1) */
    double *Hb;  /* [P] entropy of q(b_{1:T,p}) */
    double *lda; /* [P] log det of the precision of q(a_{1:T,p}) */
    double *Dn;  /* [T][Q x Q] scratch of the smoother */
    double *z;   /* [T x Q] scratch of the smoother */
    double *fb;  /* [5 T] scratch of forward-backward */
    int p0;      /* sweeps visit the identities (of a frame, eq. 18) from p0 on, cyclically, */
    int pdir;    /* upwards (0) or downwards (1) */
} tseq;

static void tseq_free(tseq *s)
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
static vbm_status tseq_init(tseq *s, const vbm_temporal *m, const vbm_sequence *seq, vbm_error *err)
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
        tseq_free(s);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory for %ld frames", seq->T);
    }
    s->temporal = m->cfg.vbe_temporal;
    if (s->temporal) {
        s->V = vbm_calloc(T * P * Q * Q, sizeof(double));
        s->C = vbm_calloc(T * P * Q * Q, sizeof(double));
        s->xi = vbm_calloc(T * P * 4, sizeof(double));
        s->Hb = vbm_calloc(P, sizeof(double));
        s->lda = vbm_calloc(P, sizeof(double));
        s->Dn = vbm_calloc(T * Q * Q, sizeof(double));
        s->z = vbm_calloc(T * Q, sizeof(double));
        s->fb = vbm_calloc(5 * T, sizeof(double));
        if (!s->V || !s->C || !s->xi || !s->Hb || !s->lda || !s->Dn || !s->z || !s->fb) {
            tseq_free(s);
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
static void tseq_data(tseq *s, const temporal_exp *e)
{
    la_gemm(0, 0, (int)s->T, e->K, e->D, 1.0, s->y, e->D, e->Wr, e->K, 0.0, s->wry, e->K);
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
    const double *ext = s->ex + (size_t)t * K, *M = e->M;
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
    /* b = 1: eq. 39-40 with <W_p^T diag(rho) W_i> = M[p, i] */
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
    ld = la_chol_logdet(Q, J);
    memcpy(mu, h1, sizeof(double) * Q);
    la_chol_solve(Q, 1, J, mu, 1);
    memcpy(S, J, sizeof(double) * Q * Q);
    la_chol_inverse(Q, S);
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

/* q(b_{1:T,p}) <- its optimum given q(a_{1:T,p}), the other identities and q(Theta): the
 * forward-backward algorithm on log-potentials psi_t = <a_t>^T r_t - tr(M_pp <a_t a_t^T>) / 2 for
 * b_t = 1, in logs. psi is T scratch doubles, al and be 2 T each. */
static void chain_b(const temporal_exp *e, tseq *s, int p, double *psi, double *al, double *be)
{
    int P = e->P, Q = e->Q, K = e->K;
    long T = s->T;
    double lz, Epot = 0.0;

    for (long t = 0; t < T; t++) {
        const double *V = s->V + ((size_t)t * P + p) * Q * Q, *m = s->ea + (size_t)t * K + p * Q;
        double v = 0.0;
        for (int q = 0; q < Q; q++) {
            v += m[q] * chain_r(e, s, t, p, q);
            for (int r = 0; r < Q; r++)
                v -= 0.5 * e->M[(p * Q + q) * K + p * Q + r] * (V[q * Q + r] + m[q] * m[r]);
        }
        psi[t] = v;
    }
    for (long t = 0; t < T; t++)
        for (int n = 0; n < 2; n++) {
            double pot = n ? psi[t] : 0.0;
            if (t == 0) {
                al[n] = e->logpi[n] + pot;
            } else {
                double a0 = al[2 * (t - 1)] + e->elogT[n],
                       a1 = al[2 * (t - 1) + 1] + e->elogT[2 + n];
                double mx = fmax(a0, a1);
                al[2 * t + n] = mx + log(exp(a0 - mx) + exp(a1 - mx)) + pot;
            }
        }
    for (long t = T - 1; t >= 0; t--)
        for (int mm = 0; mm < 2; mm++) {
            if (t == T - 1) {
                be[2 * t + mm] = 0.0;
            } else {
                double b0 = e->elogT[2 * mm] + be[2 * (t + 1)];
                double b1 = e->elogT[2 * mm + 1] + psi[t + 1] + be[2 * (t + 1) + 1];
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
        Epot += q1 * psi[t];
        if (t == 0) {
            Epot += q0 * e->logpi[0] + q1 * e->logpi[1];
        } else {
            double *xi = s->xi + ((size_t)t * P + p) * 4, tot = 0.0;
            for (int mm = 0; mm < 2; mm++)
                for (int n = 0; n < 2; n++) {
                    xi[2 * mm + n] = exp(al[2 * (t - 1) + mm] + e->elogT[2 * mm + n]
                                         + (n ? psi[t] : 0.0) + be[2 * t + n] - lz);
                    tot += xi[2 * mm + n];
                }
            for (int i = 0; i < 4; i++) {
                xi[i] /= tot;
                Epot += xi[i] * e->elogT[i];
            }
        }
        for (int q = 0; q < Q; q++)
            s->ex[(size_t)t * K + p * Q + q] = q1 * s->ea[(size_t)t * K + p * Q + q];
    }
    s->Hb[p] = lz - Epot;
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

/* <log P(y_t | ...)> of frame t (eq. 116) with <W^T diag(rho) W> = M, given c0 (the constant and
 * the <log rho> terms) and the second moments of a_{t,p} given b_{t,p} = 1: covariance blocks
 * cov[(t P + p) Q Q ...] and means mean[t K + p Q ...] (eq. 18: V and ea; eq. 19: S1 and mu1). */
static double frame_loglik_y(const temporal_exp *e, const tseq *s, long t, double c0,
                             const double *cov, const double *mean)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    const double *y = s->y + (size_t)t * D, *x = s->ex + (size_t)t * K;
    double F = c0, quad = 0.0;

    for (int k = 0; k < D; k++)
        F -= 0.5 * e->rho[k] * y[k] * y[k];
    for (int i = 0; i < K; i++) {
        F += x[i] * s->wry[t * K + i];
        for (int j = 0; j < K; j++)
            if (i / Q != j / Q)
                quad += x[i] * e->M[i * K + j] * x[j];
    }
    for (int p = 0; p < P; p++) {
        const double *V = cov + ((size_t)t * P + p) * Q * Q, *m = mean + t * K + p * Q;
        double q1 = s->q1[t * P + p];
        for (int a = 0; a < Q; a++)
            for (int b = 0; b < Q; b++)
                quad += q1 * e->M[(p * Q + a) * K + p * Q + b] * (V[a * Q + b] + m[a] * m[b]);
    }
    return F - 0.5 * quad;
}

/* The latent free-energy terms under eq. 19 (sec. 7 with q(b_{1:T,p}) q(a_{1:T,p})). */
static double chain_local_fe(const temporal_exp *e, const tseq *s)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;
    double F = 0.0, c0 = -0.5 * D * TM_LOG2PI, sa2 = e->sigma_a2;

    for (int k = 0; k < D; k++)
        c0 += 0.5 * e->elogrho[k];
    for (int p = 0; p < P; p++)
        F += s->Hb[p] + 0.5 * ((double)T * Q * (TM_LOG2PI + 1.0) - s->lda[p]);
    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            if (t == 0) {
                F += s->q0[p] * e->logpi[0] + s->q1[p] * e->logpi[1];
            } else {
                const double *xi = s->xi + ((size_t)t * P + p) * 4;
                for (int i = 0; i < 4; i++)
                    F += xi[i] * e->elogT[i];
            }
        }
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            if (t == 0) {
                F += -0.5 * (TM_LOG2PI + log(sa2)) - 0.5 * s->eaa[i] / sa2;
            } else {
                int p = k / Q, q = k % Q;
                double cr = s->ea[i] * s->ea[i - K] + s->C[((size_t)t * P + p) * Q * Q + q * Q + q];
                F += -0.5 * TM_LOG2PI - 0.5 * e->elog[k]
                     - 0.5
                           * (e->einv[k] * s->eaa[i] - 2.0 * e->elam[k] * cr
                              + e->elam2[k] * s->eaa[i - K]);
            }
        }
        F += frame_loglik_y(e, s, t, c0, s->V, s->ea);
    }
    return F;
}

/* One VBE sweep over t = 1..T (t = T..1 when backward is non-zero: alternating the direction
 * carries evidence both ways along the chain in two sweeps), p = 1..P. */
static vbm_status tseq_sweep(const temporal_exp *e, tseq *s, int backward, double *scr,
                             vbm_error *err)
{
    if (s->temporal) {
        /* per identity (in the order of p0, pdir): q(b_{1:T,p}), then q(a_{1:T,p}) */
        for (int j = 0; j < e->P; j++) {
            int p = (s->p0 + (s->pdir ? e->P - j : j)) % e->P;
            chain_b(e, s, p, s->fb, s->fb + s->T, s->fb + 3 * s->T);
            if (chain_a(e, s, p, scr) != 0)
                return vbm_fail(err, VBM_ENUMERIC, "",
                                "the precision of a_{.,%d} is not positive definite", p);
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

/* The terms of the free energy (sec. 7) that involve q(B, A) of this sequence:
 * <log P(B | T)> + <log P(A | Lambda)> + <log P(Y | B, A, W, rho)> - <log Q(B, A)>. */
static double tseq_local_fe(const temporal_exp *e, const tseq *s)
{
    if (s->temporal)
        return chain_local_fe(e, s);
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;
    double F = 0.0, c0 = -0.5 * D * TM_LOG2PI, sa2 = e->sigma_a2;

    for (int k = 0; k < D; k++)
        c0 += 0.5 * e->elogrho[k];
    for (long t = 0; t < T; t++) {

        /* <log P(b)> (eq. 101-102) and the entropy of q(b) */
        for (int p = 0; p < P; p++) {
            double q1 = s->q1[t * P + p], q0 = s->q0[t * P + p];
            if (t == 0) {
                F += q0 * e->logpi[0] + q1 * e->logpi[1];
            } else {
                double r1 = s->q1[(t - 1) * P + p], r0 = s->q0[(t - 1) * P + p];
                F += r0 * (q0 * e->elogT[0] + q1 * e->elogT[1])
                     + r1 * (q0 * e->elogT[2] + q1 * e->elogT[3]);
            }
            /* -<log Q> (eq. 94) */
            if (q1 > 0)
                F -= q1 * (log(q1) - 0.5 * (Q * (TM_LOG2PI + 1.0) - s->ld1[t * P + p]));
            if (q0 > 0) {
                double lds = 0.0;
                for (int q = 0; q < Q; q++)
                    lds += log(s->s2[(size_t)t * K + p * Q + q]);
                F -= q0 * (log(q0) - 0.5 * (Q * (TM_LOG2PI + 1.0) + lds));
            }
        }
        /* <log P(A | Lambda)> (eq. 103-104) */
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            if (t == 0)
                F += -0.5 * (TM_LOG2PI + log(sa2)) - 0.5 * s->eaa[i] / sa2;
            else
                F += -0.5 * TM_LOG2PI - 0.5 * e->elog[k]
                     - 0.5
                           * (e->einv[k] * s->eaa[i] - 2.0 * e->elam[k] * s->ea[i] * s->ea[i - K]
                              + e->elam2[k] * s->eaa[i - K]);
        }
        /* <log P(y_t | ...)> (eq. 116) with <W^T diag(rho) W> = M */
        F += frame_loglik_y(e, s, t, c0, s->S1, s->mu1);
    }
    return F;
}

/* ---- VBM (sec. 5) and ARD (sec. 6) ---- */

/* Allocate the arrays of st (zeroed); 0, or -1 out of memory (st then owns nothing). */
static int tstats_alloc(tstats *st, int D, int K)
{
    memset(st, 0, sizeof *st);
    st->Saa = vbm_calloc((size_t)K, sizeof(double));
    st->Scr = vbm_calloc((size_t)K, sizeof(double));
    st->Spr = vbm_calloc((size_t)K, sizeof(double));
    st->R = vbm_calloc((size_t)K * K, sizeof(double));
    st->r = vbm_calloc((size_t)D * K, sizeof(double));
    st->yy = vbm_calloc((size_t)D, sizeof(double));
    if (!st->Saa || !st->Scr || !st->Spr || !st->R || !st->r || !st->yy) {
        free(st->Saa);
        free(st->Scr);
        free(st->Spr);
        free(st->R);
        free(st->r);
        free(st->yy);
        memset(st, 0, sizeof *st);
        return -1;
    }
    return 0;
}

static void tstats_release(tstats *st)
{
    free(st->Saa);
    free(st->Scr);
    free(st->Spr);
    free(st->R);
    free(st->r);
    free(st->yy);
    memset(st, 0, sizeof *st);
}

/* dst <- a + b (a NULL: dst <- b); the arrays are dst's own. */
static void tstats_sum(tstats *dst, const tstats *a, const tstats *b, int D, int K)
{
    for (int i = 0; i < 4; i++)
        dst->N[i] = (a ? a->N[i] : 0.0) + b->N[i];
    for (int k = 0; k < K; k++) {
        dst->Saa[k] = (a ? a->Saa[k] : 0.0) + b->Saa[k];
        dst->Scr[k] = (a ? a->Scr[k] : 0.0) + b->Scr[k];
        dst->Spr[k] = (a ? a->Spr[k] : 0.0) + b->Spr[k];
    }
    for (int i = 0; i < K * K; i++)
        dst->R[i] = (a ? a->R[i] : 0.0) + b->R[i];
    for (int i = 0; i < D * K; i++)
        dst->r[i] = (a ? a->r[i] : 0.0) + b->r[i];
    for (int i = 0; i < D; i++)
        dst->yy[i] = (a ? a->yy[i] : 0.0) + b->yy[i];
    dst->ntr = (a ? a->ntr : 0.0) + b->ntr;
    dst->nfr = (a ? a->nfr : 0.0) + b->nfr;
}

/* The latent free energy (tseq_local_fe, chain_local_fe) is linear in the expectations under
 * q(Theta), with the sufficient statistics of q(B, A) as coefficients, plus terms that do not
 * involve q(Theta) (entropies of q(B, A), the first frame's <log P(b_1)> and <log P(a_1)>,
 * 2 pi constants). This is the q(Theta) part, term by term as those functions write it. */
double temporal_stats_fe(const temporal_exp *e, const tstats *st)
{
    int D = e->D, K = e->K;
    double F = 0.0, erl = 0.0;

    for (int i = 0; i < 4; i++)
        F += st->N[i] * e->elogT[i];
    for (int k = 0; k < K; k++)
        F += -0.5 * e->elog[k] * st->ntr
             - 0.5
                   * (e->einv[k] * st->Saa[k] - 2.0 * e->elam[k] * st->Scr[k]
                      + e->elam2[k] * st->Spr[k]);
    for (int k = 0; k < D; k++) {
        erl += e->elogrho[k];
        F -= 0.5 * e->rho[k] * st->yy[k];
        for (int i = 0; i < K; i++)
            F += e->Wr[(size_t)k * K + i] * st->r[(size_t)k * K + i];
    }
    F += 0.5 * erl * st->nfr;
    for (int i = 0; i < K * K; i++)
        F -= 0.5 * e->M[i] * st->R[i];
    return F;
}

static void tstats_add(tstats *st, const temporal_exp *e, const tseq *s)
{
    int P = e->P, Q = e->Q, K = e->K, D = e->D;
    long T = s->T;

    for (long t = 1; t < T; t++)
        for (int p = 0; p < P; p++) {
            double r0 = s->q0[(t - 1) * P + p], r1 = s->q1[(t - 1) * P + p];
            double q0 = s->q0[t * P + p], q1 = s->q1[t * P + p];
            if (s->temporal) { /* pair marginals of the chain */
                const double *xi = s->xi + ((size_t)t * P + p) * 4;
                for (int i = 0; i < 4; i++)
                    st->N[i] += xi[i];
                continue;
            }
            st->N[0] += r0 * q0;
            st->N[1] += r0 * q1;
            st->N[2] += r1 * q0;
            st->N[3] += r1 * q1;
        }
    for (long t = 1; t < T; t++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)t * K + k;
            st->Saa[k] += s->eaa[i];
            st->Scr[k] += s->ea[i] * s->ea[i - K];
            if (s->temporal)
                st->Scr[k] += s->C[((size_t)t * P + k / Q) * Q * Q + (k % Q) * Q + k % Q];
            st->Spr[k] += s->eaa[i - K];
        }
    st->ntr += (double)(T - 1);
    for (long t = 0; t < T; t++) {
        const double *x = s->ex + (size_t)t * K;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                if (i / Q != j / Q)
                    st->R[i * K + j] += x[i] * x[j];
        for (int p = 0; p < P; p++) {
            const double *S = s->S1 + ((size_t)t * P + p) * Q * Q, *mu = s->mu1 + t * K + p * Q;
            double q1 = s->q1[t * P + p];
            if (s->temporal) { /* <x x^T> = q(b = 1) <a a^T> */
                S = s->V + ((size_t)t * P + p) * Q * Q;
                mu = s->ea + t * K + p * Q;
            }
            for (int a = 0; a < Q; a++)
                for (int b = 0; b < Q; b++)
                    st->R[(p * Q + a) * K + p * Q + b] += q1 * (S[a * Q + b] + mu[a] * mu[b]);
        }
    }
    la_gemm(1, 0, D, K, (int)T, 1.0, s->y, D, s->ex, K, 1.0, st->r, K);
    for (long t = 0; t < T; t++)
        for (int k = 0; k < D; k++)
            st->yy[k] += s->y[(size_t)t * D + k] * s->y[(size_t)t * D + k];
    st->nfr += (double)T;
}

/* q(T), q(Lambda), q(W), q(rho) <- their optima given q(B, A) (eq. 59, 63-66, 70-78 with the
 * row-joint q(W) described at the top), in that order. work holds K^2 + K doubles. */
static vbm_status vbm_step(vbm_temporal *m, const tstats *st, double *work, vbm_error *err)
{
    const vbm_temporal_config *c = &m->cfg;
    int D = m->D, K = m->K;
    double *J = work, *v = work + (size_t)K * K;

    m->ut[0] = c->u_T[0][0] + st->N[0];
    m->ut[1] = c->u_T[0][1] + st->N[1];
    m->ut[2] = c->u_T[1][0] + st->N[2];
    m->ut[3] = c->u_T[1][1] + st->N[3];
    for (int k = 0; k < K; k++) {
        m->lam[4 * k + 0] = c->lam_eta + 0.5 * st->ntr;
        m->lam[4 * k + 1] = c->lam_f - 0.5 * st->Saa[k];
        m->lam[4 * k + 2] = c->lam_g + st->Scr[k];
        m->lam[4 * k + 3] = c->lam_h - 0.5 * st->Spr[k];
    }
    for (int k = 0; k < D; k++) {
        double rho = m->rd[k] / m->re[k], *S = m->Sw + (size_t)k * K * K,
               *w = m->mw + (size_t)k * K;
        for (int i = 0; i < K * K; i++)
            J[i] = rho * st->R[i];
        for (int i = 0; i < K; i++) {
            J[i * K + i] += m->gamma[i];
            v[i] = rho * st->r[(size_t)k * K + i];
        }
        if (la_chol(K, J) != 0)
            return vbm_fail(err, VBM_ENUMERIC, "",
                            "the precision of q(w_%d) is not positive definite", k);
        m->ldJw[k] = la_chol_logdet(K, J);
        la_chol_solve(K, 1, J, v, 1);
        memcpy(w, v, sizeof(double) * K);
        memcpy(S, J, sizeof(double) * K * K);
        la_chol_inverse(K, S);
    }
    for (int k = 0; k < D; k++) {
        const double *S = m->Sw + (size_t)k * K * K, *w = m->mw + (size_t)k * K;
        const double *r = st->r + (size_t)k * K;
        double q = st->yy[k];
        for (int i = 0; i < K; i++) {
            q -= 2.0 * w[i] * r[i];
            for (int j = 0; j < K; j++)
                q += (S[i * K + j] + w[i] * w[j]) * st->R[i * K + j];
        }
        m->rd[k] = c->rho_d + 0.5 * st->nfr;
        m->re[k] = c->rho_e + 0.5 * (q > 0 ? q : 0.0);
    }
    return VBM_OK;
}

/* gamma <- its maximiser (eq. 82-83), capped at gamma_max. */
static void ard_step(vbm_temporal *m)
{
    int D = m->D, K = m->K;

    for (int i = 0; i < K; i++) {
        double s = 0.0, g;
        for (int k = 0; k < D; k++)
            s += m->Sw[(size_t)k * K * K + i * K + i]
                 + m->mw[(size_t)k * K + i] * m->mw[(size_t)k * K + i];
        g = s > 0 ? D / s : m->cfg.gamma_max;
        m->gamma[i] = g < m->cfg.gamma_max ? g : m->cfg.gamma_max;
    }
}

/* Parameter expansion (an addition to the seed's VB-EM): for each attribute k, the exact
 * maximiser over s > 0 of the free energy of the joint rescaling a_{.,k} -> s a_{.,k} (in q(B, A)
 * of every sequence) and W_{.,k} -> W_{.,k} / s (in q(W)), which leaves the likelihood term
 * unchanged. With N frames in all, A = sum over frames of the AR(1) quadratic form of a_k and
 * B = gamma_k sum_d <w_dk^2>, F(s) = (N - D) log s - A s^2 / 2 - B / (2 s^2) + const, concave in
 * log s, maximised at s^2 = ((N - D) + sqrt((N - D)^2 + 4 A B)) / (2 A). Moves along the scale
 * ridge between W and A that the alternating updates climb slowly. Needs m->ex fresh; leaves
 * it stale (the caller refreshes). */
static void rescale_step(vbm_temporal *m, tseq *ss, int nseq)
{
    const temporal_exp *e = &m->ex;
    int D = m->D, K = m->K, P = m->P, Q = m->Q;

    for (int k = 0; k < K; k++) {
        double A = 0.0, B = 0.0, N = 0.0, u, s, c;
        int p = k / Q, q = k % Q;
        for (int d = 0; d < D; d++)
            B += m->Sw[(size_t)d * K * K + k * K + k]
                 + m->mw[(size_t)d * K + k] * m->mw[(size_t)d * K + k];
        B *= m->gamma[k];
        for (int i = 0; i < nseq; i++) {
            const tseq *sq = &ss[i];
            A += sq->eaa[k] / e->sigma_a2;
            for (long t = 1; t < sq->T; t++) {
                size_t j = (size_t)t * K + k;
                double cr = sq->ea[j] * sq->ea[j - K];
                if (sq->temporal)
                    cr += sq->C[((size_t)t * P + p) * Q * Q + q * Q + q];
                A += e->einv[k] * sq->eaa[j] - 2.0 * e->elam[k] * cr + e->elam2[k] * sq->eaa[j - K];
            }
            N += (double)sq->T;
        }
        if (!(A > 0.0 && B > 0.0 && isfinite(A) && isfinite(B)))
            continue;
        u = ((N - D) + sqrt((N - D) * (N - D) + 4.0 * A * B)) / (2.0 * A);
        s = sqrt(u);
        if (!(isfinite(s) && s > 0.0))
            continue;
        c = 1.0 / s;
        for (int i = 0; i < nseq; i++) {
            tseq *sq = &ss[i];
            if (sq->temporal) {
                for (long t = 0; t < sq->T; t++) {
                    size_t j = (size_t)t * K + k;
                    double *V = sq->V + ((size_t)t * P + p) * Q * Q;
                    double *Cc = sq->C + ((size_t)t * P + p) * Q * Q;
                    sq->ex[j] *= s;
                    sq->ea[j] *= s;
                    sq->eaa[j] *= u;
                    for (int r = 0; r < Q; r++) {
                        V[q * Q + r] *= s;
                        V[r * Q + q] *= s;
                        Cc[q * Q + r] *= s;
                        Cc[r * Q + q] *= s;
                    }
                }
                sq->lda[p] -= 2.0 * (double)sq->T * log(s);
                continue;
            }
            for (long t = 0; t < sq->T; t++) {
                size_t j = (size_t)t * K + k;
                double *S = sq->S1 + ((size_t)t * P + p) * Q * Q;
                sq->mu1[j] *= s;
                sq->mu2[j] *= s;
                sq->s2[j] *= u;
                sq->ex[j] *= s;
                sq->ea[j] *= s;
                sq->eaa[j] *= u;
                for (int r = 0; r < Q; r++) {
                    S[q * Q + r] *= s;
                    S[r * Q + q] *= s;
                }
                sq->ld1[t * P + p] -= 2.0 * log(s);
            }
        }
        for (int d = 0; d < D; d++) {
            double *S = m->Sw + (size_t)d * K * K;
            m->mw[(size_t)d * K + k] *= c;
            for (int r = 0; r < K; r++) {
                S[k * K + r] *= c;
                S[r * K + k] *= c;
            }
            m->ldJw[d] += 2.0 * log(s);
        }
    }
}

/* The free energy's terms in q(Theta) alone: -KL(q(W) || p(W | gamma)) - KL(q(rho) || p(rho))
 * - KL(q(T) || p(T)) - KL(q(Lambda) || p(Lambda)) (eq. 96-113). Needs m->ex fresh. */
static double global_fe(const vbm_temporal *m)
{
    const vbm_temporal_config *c = &m->cfg;
    int D = m->D, K = m->K;
    double F = 0.0, sl = 0.0;

    for (int i = 0; i < K; i++)
        sl += log(m->gamma[i]);
    for (int k = 0; k < D; k++) {
        const double *S = m->Sw + (size_t)k * K * K, *w = m->mw + (size_t)k * K;
        double kl = -K - sl + m->ldJw[k];
        for (int i = 0; i < K; i++)
            kl += m->gamma[i] * (S[i * K + i] + w[i] * w[i]);
        F -= 0.5 * kl;
        F -= kl_gamma(m->rd[k], m->re[k], c->rho_d, c->rho_e);
    }
    F -= kl_beta(m->ut, c->u_T[0]);
    F -= kl_beta(m->ut + 2, c->u_T[1]);
    for (int k = 0; k < K; k++)
        F -= m->ex.kl_lam[k];
    return F;
}

/* ---- the public operations ---- */

void vbm_temporal_opts_default(vbm_temporal_opts *o)
{
    memset(o, 0, sizeof *o);
    o->iterations = 100;
    o->sweeps = 2;
    o->ard_start = 5;
    o->tol = 0.0;
    o->seed = 1;
    o->rescale = 1;
    o->restarts = 2;
    o->start = VBM_TEMPORAL_START_WINDOWS;
    o->warm_start = 1;
}

void vbm_temporal_trace_free(vbm_temporal_trace *t)
{
    if (t == NULL)
        return;
    free(t->free_energy);
    t->free_energy = NULL;
    t->iterations = 0;
}

/* Check one sequence against the memory; field names it "sequences[i]" style. */
static vbm_status seq_check(const vbm_temporal *m, const vbm_sequence *s, const char *name,
                            vbm_error *err)
{
    char f[64];

    if (s->T < 1 || s->T > VBM_MAX_FRAMES) {
        snprintf(f, sizeof f, "%s.T", name);
        return vbm_fail(err, VBM_EINVAL, f, "%ld is not in [1, %ld]", s->T, VBM_MAX_FRAMES);
    }
    if (s->D != m->D) {
        snprintf(f, sizeof f, "%s.D", name);
        return vbm_fail(err, VBM_EINVAL, f, "%d differs from the memory's code_size %d", s->D,
                        m->D);
    }
    if ((double)s->T * m->D > (double)VBM_MAX_ELEMENTS
        || (double)s->T * m->P * m->Q * m->Q > (double)VBM_MAX_ELEMENTS) {
        snprintf(f, sizeof f, "%s.T", name);
        return vbm_fail(err, VBM_ENOMEM, f, "%ld frames are too many for this memory", s->T);
    }
    if (s->y == NULL) {
        snprintf(f, sizeof f, "%s.y", name);
        return vbm_fail(err, VBM_EINVAL, f, "is NULL");
    }
    if (!la_all_finite(s->T * (long)m->D, s->y)) {
        for (long i = 0; i < s->T * (long)m->D; i++)
            if (!isfinite(s->y[i])) {
                snprintf(f, sizeof f, "%s.y[%ld][%ld]", name, i / m->D, i % m->D);
                return vbm_fail(err, VBM_EINVAL, f, "is not finite");
            }
    }
    return VBM_OK;
}

/* Swap the posterior of a and b (same configuration). */
static void temporal_swap(vbm_temporal *a, vbm_temporal *b)
{
    vbm_temporal t = *a;
    *a = *b;
    *b = t;
}

/* The mean of q(W) <- U_m diag(sqrt(ev_m)) G / sqrt(K): the top m = min(K, D) principal
 * directions of the codes (eigenvectors of sum_t y_t y_t^T / N, LAPACK dsyevd) mixed by a
 * standard normal m x K matrix G drawn from rng. VBM_ENOMEM, VBM_ENUMERIC. */
static vbm_status init_pca(vbm_temporal *w, const vbm_sequence *seqs, int nseq, rng_t *rng,
                           vbm_error *err)
{
    int D = w->D, K = w->K, mm = K < D ? K : D;
    double *C = vbm_calloc((size_t)D * D, sizeof(double)), *ev = vbm_calloc(D, sizeof(double));
    double *G = vbm_calloc((size_t)mm * K, sizeof(double)), nfr = 0.0;
    vbm_status rc = VBM_OK;

    if (!C || !ev || !G) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for the PCA start");
        goto out;
    }
    for (int i = 0; i < nseq; i++) {
        la_gemm(1, 0, D, D, (int)seqs[i].T, 1.0, seqs[i].y, D, seqs[i].y, D, 1.0, C, D);
        nfr += (double)seqs[i].T;
    }
    for (size_t i = 0; i < (size_t)D * D; i++)
        C[i] /= nfr;
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', D, C, D, ev) != 0) {
        rc = vbm_fail(err, VBM_ENUMERIC, "", "the eigen-decomposition of the codes failed");
        goto out;
    }
    rng_normal_fill(rng, G, (long)mm * K);
    /* eigenvalues ascend: direction j is column D - 1 - j */
    for (int d = 0; d < D; d++)
        for (int k = 0; k < K; k++) {
            double v = 0.0;
            for (int j = 0; j < mm; j++) {
                int c = D - 1 - j;
                v += C[(size_t)d * D + c] * sqrt(ev[c] > 0 ? ev[c] : 0.0) * G[j * K + k];
            }
            w->mw[(size_t)d * K + k] = v / sqrt((double)K);
        }
out:
    free(C);
    free(ev);
    free(G);
    return rc;
}

static vbm_status infer_query(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err);

/* q(B, A) of an eq. 19 sequence s <- that of the eq. 18 VBE under m18's q(Theta) (20 sweeps,
 * the best of the orders of vbm_temporal_infer): q(b_t) from it, <a_t> its mean (under eq. 19 a
 * does not depend on b), pairs q(b_{t-1}) q(b_t), no covariances (the first sweep sets them).
 * The warm start of eq. 19 (the seed's sec. 4: the second approximation initialised with the
 * result of the first). VBM_ENOMEM, VBM_ENUMERIC. */
static vbm_status tseq_from_eq18(const vbm_temporal *m18, const vbm_sequence *seq, tseq *s,
                                 vbm_error *err)
{
    int P = m18->P, K = m18->K;
    vbm_status rc = infer_query(m18, seq, 20, s->q1, s->ea, NULL, err);

    if (rc != VBM_OK)
        return rc;
    for (long t = 0; t < s->T; t++) {
        for (int p = 0; p < P; p++) {
            double q1 = s->q1[t * P + p];
            s->q0[t * P + p] = 1.0 - q1;
            if (t > 0) {
                double r1 = s->q1[(t - 1) * P + p], *xi = s->xi + ((size_t)t * P + p) * 4;
                xi[0] = (1.0 - r1) * (1.0 - q1);
                xi[1] = (1.0 - r1) * q1;
                xi[2] = r1 * (1.0 - q1);
                xi[3] = r1 * q1;
            }
        }
        for (int k = 0; k < K; k++) {
            size_t j = (size_t)t * K + k;
            s->ex[j] = s->q1[t * P + k / m18->Q] * s->ea[j];
            s->eaa[j] = s->ea[j] * s->ea[j];
        }
    }
    return VBM_OK;
}

/* Copy q(Theta) and what appends continue from (acc, fe_const, nseq, fitted) from src to dst
 * (same configuration). Never fails. */
static void temporal_copy_posterior(vbm_temporal *dst, const vbm_temporal *src)
{
    size_t D = (size_t)src->D, K = (size_t)src->K;

    memcpy(dst->mw, src->mw, sizeof(double) * D * K);
    memcpy(dst->Sw, src->Sw, sizeof(double) * D * K * K);
    memcpy(dst->ldJw, src->ldJw, sizeof(double) * D);
    memcpy(dst->gamma, src->gamma, sizeof(double) * K);
    memcpy(dst->rd, src->rd, sizeof(double) * D);
    memcpy(dst->re, src->re, sizeof(double) * D);
    memcpy(dst->ut, src->ut, sizeof dst->ut);
    memcpy(dst->lam, src->lam, sizeof(double) * 4 * K);
    tstats_sum(&dst->acc, NULL, &src->acc, (int)D, (int)K);
    dst->fe_const = src->fe_const;
    dst->nseq = src->nseq;
    dst->last_fe = src->last_fe;
    dst->fitted = src->fitted;
    temporal_refresh(dst);
}

/* One VB-EM run: the fitted memory in *out (caller frees) and its free-energy trace in *fe_out
 * (malloc'd, *done_out values). base NULL: a write, from the prior and the start o->start drawn
 * with seed, or from init's q(Theta) when init is not NULL (a memory of the same sizes). base not NULL: an append, started from base's q(Theta); every VBM step then adds
 * base's accumulated statistics (its sequences' q(B, A) as they were) to the new sequences',
 * the free energy counts those sequences through them (temporal_stats_fe + fe_const), and the
 * rescaling step is not taken (it would have to rescale the frozen q(B, A) too). The sequences
 * and options are checked by the caller. */
static vbm_status fit_run(const vbm_temporal *m, const vbm_temporal *base, const vbm_temporal *init,
                          const vbm_sequence *seqs, int nseq, const vbm_temporal_opts *o,
                          uint64_t seed, vbm_temporal **out, double **fe_out, int *done_out,
                          vbm_error *err)
{
    vbm_temporal *w = NULL;
    tseq *ss = NULL;
    tstats st, tot;
    double *scr = NULL, *fe = NULL, ysq = 0.0, nfr = 0.0, scale, loc = 0.0;
    vbm_status rc;
    int K, D, done = 0;
    rng_t rng;

    memset(&st, 0, sizeof st);
    memset(&tot, 0, sizeof tot);
    if ((rc = vbm_temporal_create(&m->cfg, &w, err)) != VBM_OK)
        return rc;
    K = w->K;
    D = w->D;
    ss = vbm_calloc((size_t)nseq, sizeof *ss);
    scr = vbm_calloc((size_t)3 * K * K + 4 * K + 16 * 16 * 3, sizeof(double));
    fe = vbm_calloc((size_t)o->iterations, sizeof(double));
    if (!ss || !scr || !fe || tstats_alloc(&st, D, K) || tstats_alloc(&tot, D, K)) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for a temporal write");
        goto out;
    }
    for (int i = 0; i < nseq; i++)
        if ((rc = tseq_init(&ss[i], w, &seqs[i], err)) != VBM_OK)
            goto out;

    if (base != NULL || init != NULL) {
        temporal_copy_posterior(w, base != NULL ? base : init);
    } else {
        int used = 0;
        /* start: q(Theta) at the prior, except a random mean of q(W) on the data's scale */
        for (int i = 0; i < nseq; i++) {
            for (long j = 0; j < seqs[i].T * (long)D; j++)
                ysq += seqs[i].y[j] * seqs[i].y[j];
            nfr += (double)seqs[i].T;
        }
        scale = sqrt(ysq / (nfr * D) / K);
        if (!(scale > 0))
            scale = 1.0;
        rng_seed(&rng, seed);
        if (o->start == VBM_TEMPORAL_START_WINDOWS
            && (rc = temporal_start_windows(w, seqs, nseq, &rng, &used, err)) != VBM_OK)
            goto out;
        if (!used && o->start != VBM_TEMPORAL_START_RANDOM
            && (rc = init_pca(w, seqs, nseq, &rng, err)) != VBM_OK)
            goto out;
        if (o->start == VBM_TEMPORAL_START_RANDOM)
            for (size_t i = 0; i < (size_t)D * K; i++)
                w->mw[i] = scale * rng_normal(&rng);
        temporal_refresh(w);
    }
    for (int i = 0; i < nseq; i++)
        tseq_data(&ss[i], &w->ex);
    if (init != NULL && base == NULL && w->cfg.vbe_temporal && !init->cfg.vbe_temporal)
        for (int i = 0; i < nseq; i++)
            if ((rc = tseq_from_eq18(init, &seqs[i], &ss[i], err)) != VBM_OK)
                goto out;

    for (int it = 0; it < o->iterations; it++) {
        double F;
        for (int i = 0; i < nseq; i++)
            for (int sw = 0; sw < o->sweeps; sw++)
                if ((rc = tseq_sweep(&w->ex, &ss[i], sw % 2, scr, err)) != VBM_OK)
                    goto out;
        if (base == NULL && o->rescale && it > 0) {
            rescale_step(w, ss, nseq);
            temporal_refresh(w);
        }
        memset(st.N, 0, sizeof st.N);
        memset(st.Saa, 0, sizeof(double) * K);
        memset(st.Scr, 0, sizeof(double) * K);
        memset(st.Spr, 0, sizeof(double) * K);
        memset(st.R, 0, sizeof(double) * K * K);
        memset(st.r, 0, sizeof(double) * D * K);
        memset(st.yy, 0, sizeof(double) * D);
        st.ntr = st.nfr = 0.0;
        for (int i = 0; i < nseq; i++)
            tstats_add(&st, &w->ex, &ss[i]);
        tstats_sum(&tot, base ? &base->acc : NULL, &st, D, K);
        if ((rc = vbm_step(w, &tot, scr, err)) != VBM_OK)
            goto out;
        if (o->ard_start >= 0 && it >= o->ard_start)
            ard_step(w);
        temporal_refresh(w);
        F = global_fe(w);
        if (base != NULL)
            F += base->fe_const + temporal_stats_fe(&w->ex, &base->acc);
        loc = 0.0;
        for (int i = 0; i < nseq; i++) {
            tseq_data(&ss[i], &w->ex);
            loc += tseq_local_fe(&w->ex, &ss[i]);
        }
        F += loc;
        if (!isfinite(F)) {
            rc = vbm_fail(err, VBM_ENUMERIC, "", "the free energy is not finite at iteration %d",
                          it);
            goto out;
        }
        fe[done++] = F;
        if (o->tol > 0 && done > 1 && F - fe[done - 2] < o->tol * fabs(F))
            break;
    }
    /* what a later append continues from: every sequence's statistics and the q(Theta)-free
     * part of their free energy (loc minus its q(Theta) part, constant in q(Theta)) */
    tstats_sum(&w->acc, NULL, &tot, D, K);
    w->fe_const = (base ? base->fe_const : 0.0) + loc - temporal_stats_fe(&w->ex, &st);
    w->nseq = (base ? base->nseq : 0) + nseq;
    w->last_fe = fe[done - 1];
    w->fitted = 1;
    *out = w;
    w = NULL;
    *fe_out = fe;
    fe = NULL;
    *done_out = done;
    rc = VBM_OK;
out:
    if (ss)
        for (int i = 0; i < nseq; i++)
            tseq_free(&ss[i]);
    free(ss);
    free(scr);
    free(fe);
    tstats_release(&st);
    tstats_release(&tot);
    vbm_temporal_free(w);
    return rc;
}

/* The shared path of write (append 0) and append (append 1): checks, the runs, the swap. */
static vbm_status temporal_fit(vbm_temporal *m, int append, const vbm_sequence *seqs, int nseq,
                               const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                               vbm_error *err)
{
    vbm_temporal_opts o;
    vbm_temporal *best = NULL, *warm = NULL;
    double *best_fe = NULL, nfr = 0.0;
    int best_done = 0, runs;
    vbm_status rc;

    if (trace) {
        trace->iterations = 0;
        trace->free_energy = NULL;
    }
    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (opts == NULL)
        vbm_temporal_opts_default(&o);
    else
        o = *opts;
    if (o.iterations < 1 || o.iterations > 1000000)
        return vbm_fail(err, VBM_EINVAL, "iterations", "%d is not in [1, 1000000]", o.iterations);
    if (o.sweeps < 1 || o.sweeps > 1000)
        return vbm_fail(err, VBM_EINVAL, "sweeps", "%d is not in [1, 1000]", o.sweeps);
    if (o.ard_start < -1)
        return vbm_fail(err, VBM_EINVAL, "ard_start", "%d is below -1", o.ard_start);
    if (!(isfinite(o.tol) && o.tol >= 0))
        return vbm_fail(err, VBM_EINVAL, "tol", "is not a finite number >= 0");
    if (o.restarts < 1 || o.restarts > 1000)
        return vbm_fail(err, VBM_EINVAL, "restarts", "%d is not in [1, 1000]", o.restarts);
    if (o.start < VBM_TEMPORAL_START_WINDOWS || o.start > VBM_TEMPORAL_START_RANDOM)
        return vbm_fail(err, VBM_EINVAL, "start", "%d is not 0 (windows), 1 (pca) or 2 (random)",
                        o.start);
    if (o.warm_start != 0 && o.warm_start != 1)
        return vbm_fail(err, VBM_EINVAL, "warm_start", "%d is not 0 or 1", o.warm_start);
    if (o.rescale != 0 && o.rescale != 1)
        return vbm_fail(err, VBM_EINVAL, "rescale", "%d is not 0 or 1", o.rescale);
    if (seqs == NULL || nseq < 1)
        return vbm_fail(err, VBM_EINVAL, "sequences", "no sequence given");
    for (int i = 0; i < nseq; i++) {
        char name[48];
        snprintf(name, sizeof name, "sequences[%d]", i);
        if ((rc = seq_check(m, &seqs[i], name, err)) != VBM_OK)
            return rc;
        nfr += (double)seqs[i].T;
    }
    if (append)
        nfr += m->acc.nfr;
    if (nfr > (double)VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "sequences", "%.0f frames in all exceed %ld", nfr,
                        VBM_MAX_FRAMES);
    append = append && m->fitted; /* an append to an empty memory is a write */
    if (!append && m->cfg.vbe_temporal && o.warm_start) {
        /* eq. 19 warm-started: the eq. 18 fit of the same options, then one eq. 19 run from
         * its q(Theta) */
        vbm_temporal_config c18 = m->cfg;
        c18.vbe_temporal = 0;
        if ((rc = vbm_temporal_create(&c18, &warm, err)) != VBM_OK)
            return rc;
        if ((rc = temporal_fit(warm, 0, seqs, nseq, &o, NULL, err)) != VBM_OK) {
            vbm_temporal_free(warm);
            return rc;
        }
    }
    runs = append || warm ? 1 : o.restarts;
    for (int r = 0; r < runs; r++) {
        vbm_temporal *w = NULL;
        double *fe = NULL;
        int done = 0;
        if ((rc = fit_run(m, append ? m : NULL, warm, seqs, nseq, &o, o.seed + (uint64_t)r, &w, &fe,
                          &done, err))
            != VBM_OK) {
            vbm_temporal_free(best);
            vbm_temporal_free(warm);
            free(best_fe);
            return rc;
        }
        if (best == NULL || fe[done - 1] > best_fe[best_done - 1]) {
            vbm_temporal_free(best);
            free(best_fe);
            best = w;
            best_fe = fe;
            best_done = done;
        } else {
            vbm_temporal_free(w);
            free(fe);
        }
    }
    vbm_temporal_free(warm);
    temporal_swap(m, best);
    vbm_temporal_free(best);
    if (trace) {
        trace->iterations = best_done;
        trace->free_energy = best_fe;
    } else {
        free(best_fe);
    }
    return VBM_OK;
}

vbm_status vbm_temporal_write(vbm_temporal *m, const vbm_sequence *seqs, int nseq,
                              const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                              vbm_error *err)
{
    return temporal_fit(m, 0, seqs, nseq, opts, trace, err);
}

vbm_status vbm_temporal_append(vbm_temporal *m, const vbm_sequence *seqs, int nseq,
                               const vbm_temporal_opts *opts, vbm_temporal_trace *trace,
                               vbm_error *err)
{
    return temporal_fit(m, 1, seqs, nseq, opts, trace, err);
}

double vbm_temporal_free_energy(const vbm_temporal *m)
{
    if (m == NULL || !m->fitted)
        return NAN;
    return global_fe(m) + m->fe_const + temporal_stats_fe(&m->ex, &m->acc);
}

void vbm_temporal_summary(const vbm_temporal *m, vbm_temporal_config *cfg, long *sequences,
                          long *frames, double *free_energy)
{
    if (m == NULL)
        return;
    if (cfg)
        *cfg = m->cfg;
    if (sequences)
        *sequences = m->nseq;
    if (frames)
        *frames = (long)m->acc.nfr;
    if (free_energy)
        *free_energy = m->last_fe;
}

vbm_status vbm_temporal_infer(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err)
{
    vbm_status rc;

    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (seq == NULL)
        return vbm_fail(err, VBM_EINVAL, "sequence", "is NULL");
    if (sweeps < 1 || sweeps > 100000)
        return vbm_fail(err, VBM_EINVAL, "sweeps", "%d is not in [1, 100000]", sweeps);
    if ((rc = seq_check(m, seq, "sequence", err)) != VBM_OK)
        return rc;
    return infer_query(m, seq, sweeps, qb, a, local_fe, err);
}

/* q(B, A) of the query seq under m's q(Theta) (held fixed): VBE sweeps from q(b) = 1/2, a = 0,
 * alternating in direction (the last one forward when last_forward). The coordinate ascent lands
 * in an optimum that depends on which identity it updates first (the first takes what it can
 * explain): up to 8 runs start from identities spread over the P, in both directions, and the
 * one of highest free energy is left in *out (tseq_free it), its free energy in *F. The sequence is checked by the caller. VBM_ENOMEM, VBM_ENUMERIC. */
static vbm_status tseq_infer_best(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                                  int last_forward, tseq *out, double *F, vbm_error *err)
{
    tseq s;
    double *scr, best = -INFINITY;
    vbm_status rc = VBM_OK;
    int orders, have = 0;

    memset(out, 0, sizeof *out);
    scr = vbm_calloc((size_t)4 * m->Q * m->Q + 4 * m->Q, sizeof(double));
    if (scr == NULL)
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory");
    orders = m->P == 1 ? 1 : (m->P < 4 ? 2 * m->P : 8);
    for (int r = 0; r < orders && rc == VBM_OK; r++) {
        double f;
        if ((rc = tseq_init(&s, m, seq, err)) != VBM_OK)
            break;
        s.p0 = (r / 2) * m->P / (orders / 2 > 0 ? orders / 2 : 1);
        s.pdir = r % 2;
        tseq_data(&s, &m->ex);
        for (int i = 0; i < sweeps && rc == VBM_OK; i++)
            rc = tseq_sweep(&m->ex, &s, last_forward ? (sweeps - 1 - i) % 2 : i % 2, scr, err);
        f = rc == VBM_OK ? tseq_local_fe(&m->ex, &s) : NAN;
        if (rc == VBM_OK && (!have || f > best)) {
            if (have)
                tseq_free(out);
            *out = s;
            best = f;
            have = 1;
        } else {
            tseq_free(&s);
        }
    }
    free(scr);
    if (rc != VBM_OK && have)
        tseq_free(out);
    if (rc == VBM_OK)
        *F = best;
    return rc;
}

/* vbm_temporal_infer after its checks. */
static vbm_status infer_query(const vbm_temporal *m, const vbm_sequence *seq, int sweeps,
                              double *qb, double *a, double *local_fe, vbm_error *err)
{
    tseq s;
    double F = NAN;
    vbm_status rc = tseq_infer_best(m, seq, sweeps, 0, &s, &F, err);

    if (rc != VBM_OK)
        return rc;
    if (qb)
        memcpy(qb, s.q1, sizeof(double) * seq->T * m->P);
    if (a)
        memcpy(a, s.ea, sizeof(double) * seq->T * m->K);
    if (local_fe)
        *local_fe = F;
    tseq_free(&s);
    return VBM_OK;
}

/* ---- continuation of a prefix ---- */

vbm_status vbm_temporal_continue(const vbm_temporal *m, const vbm_sequence *prefix, long n,
                                 int sweeps, uint64_t seed, int nsamples, double *mean, double *qb,
                                 double *samples, vbm_error *err)
{
    int D, P, Q, K;
    long T0, tl;
    tseq s;
    double *scr = NULL, *x = NULL, *pi1 = NULL, *pi0 = NULL, *L = NULL, *a = NULL, *z = NULL;
    int *bt = NULL, have_seq = 0;
    double Tm[4], fpre;
    vbm_status rc = VBM_OK;
    rng_t r;

    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (prefix == NULL)
        return vbm_fail(err, VBM_EINVAL, "prefix", "is NULL");
    if (n < 1 || n > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "steps", "%ld is not in [1, %ld]", n, VBM_MAX_FRAMES);
    if (sweeps < 1 || sweeps > 100000)
        return vbm_fail(err, VBM_EINVAL, "sweeps", "%d is not in [1, 100000]", sweeps);
    if (nsamples < 0 || nsamples > 100000)
        return vbm_fail(err, VBM_EINVAL, "samples", "%d is not in [0, 100000]", nsamples);
    if (mean == NULL)
        return vbm_fail(err, VBM_EINVAL, "mean", "is NULL");
    if (nsamples > 0 && samples == NULL)
        return vbm_fail(err, VBM_EINVAL, "samples", "is NULL");
    if ((rc = seq_check(m, prefix, "prefix", err)) != VBM_OK)
        return rc;
    D = m->D;
    P = m->P;
    Q = m->Q;
    K = m->K;
    if ((double)n * D * (nsamples + 1) > (double)VBM_MAX_ELEMENTS)
        return vbm_fail(err, VBM_ENOMEM, "steps", "%ld steps of %d samples are too many", n,
                        nsamples);
    /* filter the prefix: q(b_t, a_t) of its last frame under q(Theta) (the last frame of a
     * smoother is its filter) */
    if ((rc = tseq_infer_best(m, prefix, sweeps, 1, &s, &fpre, err)) != VBM_OK)
        return rc;
    have_seq = 1;
    scr = vbm_calloc((size_t)4 * Q * Q + 4 * Q, sizeof(double));
    x = vbm_calloc((size_t)K, sizeof(double));
    pi1 = vbm_calloc((size_t)P, sizeof(double));
    pi0 = vbm_calloc((size_t)P, sizeof(double));
    L = vbm_calloc((size_t)P * 2 * Q * Q, sizeof(double));
    a = vbm_calloc((size_t)K, sizeof(double));
    z = vbm_calloc((size_t)K, sizeof(double));
    bt = vbm_calloc((size_t)P, sizeof(int));
    if (!scr || !x || !pi1 || !pi0 || !L || !a || !z || !bt) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for a continuation");
        goto out;
    }
    T0 = prefix->T;
    tl = T0 - 1;
    /* q(a_T0 | b_T0 = 1), q(a_T0 | b_T0 = 0): means and Cholesky factors of the covariances
     * (eq. 18: N(mu1, S1) and N(mu2, diag(s2)); eq. 19: q(a) is one Gaussian, N(ea, V)) */
    for (int p = 0; p < P; p++)
        for (int bb = 0; bb < 2; bb++) {
            double *Lp = L + ((size_t)p * 2 + bb) * Q * Q;
            if (s.temporal) {
                memcpy(Lp, s.V + ((size_t)tl * P + p) * Q * Q, sizeof(double) * Q * Q);
            } else if (bb == 1) {
                memcpy(Lp, s.S1 + ((size_t)tl * P + p) * Q * Q, sizeof(double) * Q * Q);
            } else {
                memset(Lp, 0, sizeof(double) * Q * Q);
                for (int q = 0; q < Q; q++)
                    Lp[q * Q + q] = s.s2[(size_t)tl * K + p * Q + q];
            }
            if (la_chol(Q, Lp) != 0) {
                rc = vbm_fail(err, VBM_ENUMERIC, "",
                              "the covariance of a_{%ld,%d} is not positive definite", tl, p);
                goto out;
            }
        }
    for (int rr = 0; rr < 2; rr++) {
        double su = m->ut[2 * rr] + m->ut[2 * rr + 1];
        Tm[2 * rr] = m->ut[2 * rr] / su;
        Tm[2 * rr + 1] = m->ut[2 * rr + 1] / su;
    }
    /* the predictive mean: P(b_{T0+h} = 1 | b_T0 = 1 or 0) by the chain, a by E[lambda]^h,
     * y = <W> <b a> */
    for (int p = 0; p < P; p++) {
        pi1[p] = 1.0;
        pi0[p] = 0.0;
    }
    for (long h = 1; h <= n; h++) {
        for (int p = 0; p < P; p++) {
            double q1 = s.q1[tl * P + p], q0 = s.q0[tl * P + p];
            pi1[p] = pi1[p] * Tm[3] + (1.0 - pi1[p]) * Tm[1];
            pi0[p] = pi0[p] * Tm[3] + (1.0 - pi0[p]) * Tm[1];
            if (qb)
                qb[(size_t)(h - 1) * P + p] = q1 * pi1[p] + q0 * pi0[p];
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double m1 = s.temporal ? s.ea[tl * K + k] : s.mu1[tl * K + k];
                double m0 = s.temporal ? s.ea[tl * K + k] : s.mu2[tl * K + k];
                x[k] = pow(m->ex.lmean[k], (double)h) * (q1 * pi1[p] * m1 + q0 * pi0[p] * m0);
            }
        }
        for (int d = 0; d < D; d++) {
            double v = 0.0;
            for (int k = 0; k < K; k++)
                v += m->mw[(size_t)d * K + k] * x[k];
            mean[(size_t)(h - 1) * D + d] = v;
        }
    }
    /* sampled continuations: (b_T0, a_T0) from their filtered q, then the chains, the AR(1)
     * attributes and the noise under the posterior means of T, lambda, W and rho */
    rng_seed(&r, seed);
    for (int j = 0; j < nsamples; j++) {
        double *yj = samples + (size_t)j * n * D;
        for (int p = 0; p < P; p++) {
            const double *Lp;
            bt[p] = rng_uniform(&r) < s.q1[tl * P + p];
            Lp = L + ((size_t)p * 2 + bt[p]) * Q * Q;
            rng_normal_fill(&r, z, Q);
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double v = bt[p] && !s.temporal ? s.mu1[tl * K + k]
                           : s.temporal         ? s.ea[tl * K + k]
                                                : s.mu2[tl * K + k];
                for (int u = 0; u <= q; u++)
                    v += Lp[q * Q + u] * z[u];
                a[k] = v;
            }
        }
        for (long h = 0; h < n; h++) {
            for (int p = 0; p < P; p++) {
                bt[p] = rng_uniform(&r) < Tm[2 * bt[p] + 1];
                for (int q = 0; q < Q; q++) {
                    int k = p * Q + q;
                    double l = m->ex.lmean[k];
                    a[k] = l * a[k] + sqrt((1.0 - l) * (1.0 + l)) * rng_normal(&r);
                }
            }
            for (int d = 0; d < D; d++) {
                double v = rng_normal(&r) / sqrt(m->ex.rho[d]);
                for (int k = 0; k < K; k++)
                    if (bt[k / Q])
                        v += m->mw[(size_t)d * K + k] * a[k];
                yj[(size_t)h * D + d] = v;
            }
        }
    }
out:
    if (have_seq)
        tseq_free(&s);
    free(scr);
    free(x);
    free(pi1);
    free(pi0);
    free(L);
    free(a);
    free(z);
    free(bt);
    return rc;
}

/* Test hook (temporal.h): q(B, A) of seq inferred under m (sweeps VBE sweeps), then its latent
 * free energy and the q(Theta) part of it (temporal_stats_fe of its statistics) under m and under
 * m2 (same configuration): out = {local(m), stats(m), local(m2), stats(m2)}. */
vbm_status temporal_fe_split(const vbm_temporal *m, const vbm_temporal *m2, const vbm_sequence *seq,
                             int sweeps, double out[4], vbm_error *err)
{
    tseq s;
    tstats st;
    double *scr;
    vbm_status rc;

    if ((rc = seq_check(m, seq, "sequence", err)) != VBM_OK)
        return rc;
    if ((rc = tseq_init(&s, m, seq, err)) != VBM_OK)
        return rc;
    scr = vbm_calloc((size_t)4 * m->Q * m->Q + 4 * m->Q, sizeof(double));
    if (scr == NULL || tstats_alloc(&st, m->D, m->K) != 0) {
        free(scr);
        tseq_free(&s);
        return vbm_fail(err, VBM_ENOMEM, "", "out of memory");
    }
    tseq_data(&s, &m->ex);
    for (int i = 0; i < sweeps && rc == VBM_OK; i++)
        rc = tseq_sweep(&m->ex, &s, i % 2, scr, err);
    if (rc == VBM_OK) {
        tstats_add(&st, &m->ex, &s);
        out[0] = tseq_local_fe(&m->ex, &s);
        out[1] = temporal_stats_fe(&m->ex, &st);
        tseq_data(&s, &m2->ex);
        out[2] = tseq_local_fe(&m2->ex, &s);
        out[3] = temporal_stats_fe(&m2->ex, &st);
    }
    tstats_release(&st);
    free(scr);
    tseq_free(&s);
    return rc;
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

/* ---- ancestral sampling ---- */

/* Gamma(shape a, rate 1) draw (Marsaglia-Tsang; a < 1 through a + 1 and u^(1/a)). */
static double draw_gamma(rng_t *r, double a)
{
    double boost = 1.0, d, c;

    if (a < 1.0) {
        double u = rng_uniform(r);
        boost = pow(u > 0 ? u : 1e-300, 1.0 / a);
        a += 1.0;
    }
    d = a - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x, u;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        u = rng_uniform(r);
        if (u > 0 && log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return boost * d * v;
    }
}

vbm_status vbm_temporal_sample(const vbm_temporal *m, long T, uint64_t seed, double *y, int *b,
                               double *a, vbm_error *err)
{
    int D, P, Q, K;
    double *W = NULL, *L = NULL, *rho = NULL, *lam = NULL, *post = NULL, *z = NULL, *at = NULL;
    int *bt = NULL;
    double Tr[4];
    vbm_status rc = VBM_OK;
    rng_t r;

    if (m == NULL)
        return vbm_fail(err, VBM_EINVAL, "memory", "is NULL");
    if (T < 1 || T > VBM_MAX_FRAMES)
        return vbm_fail(err, VBM_EINVAL, "T", "%ld is not in [1, %ld]", T, VBM_MAX_FRAMES);
    if (y == NULL)
        return vbm_fail(err, VBM_EINVAL, "y", "is NULL");
    D = m->D;
    P = m->P;
    Q = m->Q;
    K = m->K;
    if ((double)T * D > (double)VBM_MAX_ELEMENTS)
        return vbm_fail(err, VBM_ENOMEM, "T", "%ld frames are too many", T);
    W = vbm_calloc((size_t)D * K, sizeof(double));
    L = vbm_calloc((size_t)K * K, sizeof(double));
    rho = vbm_calloc(D, sizeof(double));
    lam = vbm_calloc(K, sizeof(double));
    post = vbm_calloc(m->G, sizeof(double));
    z = vbm_calloc(K, sizeof(double));
    at = vbm_calloc(K, sizeof(double));
    bt = vbm_calloc(P, sizeof(int));
    if (!W || !L || !rho || !lam || !post || !z || !at || !bt) {
        rc = vbm_fail(err, VBM_ENOMEM, "", "out of memory for a sample");
        goto out;
    }
    rng_seed(&r, seed);
    /* Theta ~ q(Theta): T's rows (Beta by two Gammas), lambda on its grid, W's rows, rho */
    for (int row = 0; row < 2; row++) {
        double g0 = draw_gamma(&r, m->ut[2 * row]), g1 = draw_gamma(&r, m->ut[2 * row + 1]);
        double s = g0 + g1;
        Tr[2 * row] = s > 0 ? g0 / s : 0.5;
        Tr[2 * row + 1] = s > 0 ? g1 / s : 0.5;
    }
    for (int k = 0; k < K; k++) {
        lam_lognorm(m, m->lam + 4 * k, post);
        lam[k] = m->grid[rng_categorical(&r, post, m->G)];
    }
    for (int d = 0; d < D; d++) {
        memcpy(L, m->Sw + (size_t)d * K * K, sizeof(double) * K * K);
        if (la_chol(K, L) != 0) {
            rc = vbm_fail(err, VBM_ENUMERIC, "",
                          "the covariance of q(w_%d) is not positive definite", d);
            goto out;
        }
        rng_normal_fill(&r, z, K);
        for (int i = 0; i < K; i++) {
            double v = m->mw[(size_t)d * K + i];
            for (int j = 0; j <= i; j++)
                v += L[i * K + j] * z[j];
            W[(size_t)d * K + i] = v;
        }
        rho[d] = draw_gamma(&r, m->rd[d]) / m->re[d];
    }
    /* b, a, y ancestrally (eq. 1-11) */
    for (long t = 0; t < T; t++) {
        for (int p = 0; p < P; p++) {
            double p1 = t == 0 ? m->cfg.pi0 : Tr[2 * bt[p] + 1];
            bt[p] = rng_uniform(&r) < p1;
            for (int q = 0; q < Q; q++) {
                int k = p * Q + q;
                double l = lam[k];
                at[k] = t == 0 ? sqrt(m->cfg.sigma_a2) * rng_normal(&r)
                               : l * at[k] + sqrt((1.0 - l) * (1.0 + l)) * rng_normal(&r);
            }
        }
        for (int d = 0; d < D; d++) {
            double v = rng_normal(&r) / sqrt(rho[d]);
            for (int k = 0; k < K; k++)
                if (bt[k / Q])
                    v += W[(size_t)d * K + k] * at[k];
            y[(size_t)t * D + d] = v;
        }
        if (b)
            memcpy(b + (size_t)t * P, bt, sizeof(int) * P);
        if (a)
            memcpy(a + (size_t)t * K, at, sizeof(double) * K);
    }
out:
    free(W);
    free(L);
    free(rho);
    free(lam);
    free(post);
    free(z);
    free(at);
    free(bt);
    return rc;
}
