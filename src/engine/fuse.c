/* fuse.c -- owns the fusion of J Gaussian codes of one item into one code (the analytic RPM
 * posterior of seed 004), the moment-matched code prior of a memory, and the fusion in place
 * of the views the routes receive. */
#include "engine/fuse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void eng_fuse_prior(const vbm_config *cfg, double *mean, double *var)
{
    int shift = cfg->shift || cfg->kind == VBM_MIXTURE || cfg->kind == VBM_TREE;
    double v = cfg->kind == VBM_CATEGORICAL ? cfg->u0 : (double)cfg->rows * cfg->u0;

    if (shift && cfg->kind != VBM_DKM)
        v += cfg->sigma2_b0;
    *mean = 0.0;
    *var = v + cfg->sigma_z2;
}

/* Fail naming view row `row` (its member `what`, dimension c; c < 0: the whole row). */
static vbm_status fuse_fail(vbm_error *err, const char *field, int images, const char *what,
                            long row, int c, int J, const char *why, double x)
{
    char f[VBM_FIELD_LEN];

    if (images)
        snprintf(f, sizeof f, "%s[%ld]", field, row);
    else if (c >= 0)
        snprintf(f, sizeof f, "%s.%s[%ld][%d]", field, what, row, c);
    else
        snprintf(f, sizeof f, "%s.%s[%ld]", field, what, row);
    return vbm_fail(err, VBM_EINVAL, f, "frame %ld (view %ld of %d), code dimension %d: %s (%g)",
                    row / J, row % J, J, c < 0 ? 0 : c, why, x);
}

vbm_status eng_fuse_codes(long T, int J, int C, const double *mu, const double *s2,
                          const unsigned char *mask, double m0, double v0, const char *field,
                          int images, double *out_mu, double *out_s2, vbm_error *err)
{
    size_t TC = (size_t)T * (size_t)C, k;
    double p0, lam, h, v, x;
    long t, row;
    int j, c, n;

    if (T < 1 || C < 1 || J < 1)
        return vbm_fail(err, VBM_EINVAL, "views_per_frame",
                        "need at least one frame, one view and one dimension (T %ld, J %d, C %d)",
                        T, J, C);
    if (!(isfinite(v0) && v0 > 0.0) || !isfinite(m0))
        return vbm_fail(err, VBM_EINVAL, "prior",
                        "the code prior must have a finite mean and a variance > 0 (%g, %g)", m0,
                        v0);
    for (k = 0; k < TC * (size_t)J; k++) {
        row = (long)(k / (size_t)C);
        c = (int)(k % (size_t)C);
        if (!isfinite(mu[k]))
            return fuse_fail(err, field, images, "mu", row, c, J, "the mean is not finite", mu[k]);
        x = s2 != NULL ? s2[k] : 0.0;
        if (!isfinite(x) || x < 0.0 || (J > 1 && !(x > 0.0)))
            return fuse_fail(err, field, images, "sigma2", row, c, J,
                             J > 1 ? "fusing views needs a finite variance > 0"
                                   : "the variance must be finite and >= 0",
                             x);
    }
    if (J == 1 && mask == NULL) {
        memcpy(out_mu, mu, TC * sizeof *out_mu);
        if (s2 != NULL)
            memcpy(out_s2, s2, TC * sizeof *out_s2);
        else
            memset(out_s2, 0, TC * sizeof *out_s2);
        return VBM_OK;
    }
    p0 = 1.0 / v0;
    for (t = 0; t < T; t++)
        for (c = 0; c < C; c++) {
            /* natural parameters: eta_0 + sum_j (eta_j - eta_0) over the views that know c */
            lam = p0;
            h = m0 * p0;
            for (j = 0, n = 0; j < J; j++) {
                k = ((size_t)t * (size_t)J + (size_t)j) * (size_t)C + (size_t)c;
                if (mask != NULL && mask[k] == 0)
                    continue;
                x = s2 != NULL ? s2[k] : 0.0;
                if (J == 1 && !(x > 0.0)) { /* one exact view: it is the answer */
                    h = mu[k];
                    n = -1;
                    break;
                }
                lam += 1.0 / x - p0;
                h += mu[k] / x - m0 * p0;
                n++;
            }
            k = (size_t)t * (size_t)C + (size_t)c;
            if (n < 0) {
                out_mu[k] = h;
                out_s2[k] = 0.0;
                continue;
            }
            if (!(lam > 0.0) || !isfinite(lam))
                return fuse_fail(err, field, images, "sigma2", t * (long)J, images ? c : -1, J,
                                 "the views' fused precision sum_j 1/sigma2_j - (J - 1)/v0 "
                                 "is not > 0 (v0 the code prior's variance): the views are "
                                 "wider than the prior and no Gaussian posterior exists",
                                 lam);
            v = 1.0 / lam;
            out_mu[k] = h * v;
            out_s2[k] = v;
        }
    return VBM_OK;
}

vbm_status eng_fuse_views(const vbm_config *cfg, long J, long *rows, int C, double **mu,
                          double **s2, const unsigned char *mask, const char *field, int images,
                          unsigned char **known_any, vbm_error *err)
{
    char f[VBM_FIELD_LEN];
    size_t TC, k;
    double m0, v0, *fmu, *fs2;
    long T, j;
    vbm_status st;

    if (known_any != NULL)
        *known_any = NULL;
    if (J <= 1)
        return VBM_OK;
    snprintf(f, sizeof f, images ? "%s" : "%s.mu", field);
    if (*rows % J != 0)
        return vbm_fail(err, VBM_EINVAL, f,
                        "%ld %s are not whole frames of views_per_frame = %ld views (view j of "
                        "frame t is row t J + j)",
                        *rows, images ? "images" : "rows", J);
    T = *rows / J;
    TC = (size_t)T * (size_t)C;
    fmu = malloc(TC * sizeof *fmu);
    fs2 = malloc(TC * sizeof *fs2);
    if (mask != NULL && known_any != NULL)
        *known_any = calloc(TC, 1);
    if (fmu == NULL || fs2 == NULL || (mask != NULL && known_any != NULL && *known_any == NULL)) {
        free(fmu);
        free(fs2);
        if (known_any != NULL) {
            free(*known_any);
            *known_any = NULL;
        }
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory fusing %ld views", *rows);
    }
    eng_fuse_prior(cfg, &m0, &v0);
    st = eng_fuse_codes(T, (int)J, C, *mu, *s2, mask, m0, v0, field, images, fmu, fs2, err);
    if (st != VBM_OK) {
        free(fmu);
        free(fs2);
        if (known_any != NULL) {
            free(*known_any);
            *known_any = NULL;
        }
        return st;
    }
    if (mask != NULL && known_any != NULL)
        for (k = 0; k < TC; k++)
            for (j = 0; j < J; j++)
                if (mask[((k / (size_t)C) * (size_t)J + (size_t)j) * (size_t)C + k % (size_t)C]
                    != 0)
                    (*known_any)[k] = 1;
    free(*mu);
    free(*s2);
    *mu = fmu;
    *s2 = fs2;
    *rows = T;
    return VBM_OK;
}
