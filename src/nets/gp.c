/* gp.c -- owns the Cholesky-based GP posterior of one latent trajectory under Gaussian factors
 * (gp.h). */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nets/gp.h"

size_t gp_workspace(int T)
{
    return T > 0 ? 3 * (size_t)T * (size_t)T + (size_t)T : 0;
}

static int gp_finite(size_t n, const double *x)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

vbm_status gp_posterior(int T, const double *K, const double *d, const double *b, double *mean,
                        double *var, double *work, vbm_error *err)
{
    if (T < 1 || T > GP_MAX_T)
        return vbm_fail(err, VBM_EINVAL, NULL, "gp_posterior: T = %d is outside [1, %d]", T,
                        GP_MAX_T);
    if (!K || !d || !b || !mean || !var)
        return vbm_fail(err, VBM_EINVAL, NULL, "gp_posterior: a NULL array");
    size_t TT = (size_t)T * (size_t)T;
    for (int i = 0; i < T; i++)
        if (!gp_finite((size_t)i + 1, K + (size_t)i * T))
            return vbm_fail(err, VBM_EINVAL, NULL,
                            "gp_posterior: the prior covariance has a value that is not finite "
                            "in row %d",
                            i);
    if (!gp_finite((size_t)T, d) || !gp_finite((size_t)T, b))
        return vbm_fail(err, VBM_EINVAL, NULL,
                        "gp_posterior: a factor's natural parameter is not finite");
    double *own = NULL;
    if (!work) {
        own = malloc(gp_workspace(T) * sizeof *own);
        if (!own)
            return vbm_fail(err, VBM_ENOMEM, NULL, "gp_posterior: out of memory for T = %d", T);
        work = own;
    }
    double *L = work, *E = work + TT, *B = work + 2 * TT, *v = work + 3 * TT;
    vbm_status st = VBM_OK;

    /* K = L L^T (lower, row-major; the strict upper triangle zeroed) */
    for (int i = 0; i < T; i++)
        for (int k = 0; k < T; k++)
            L[(size_t)i * T + k] = k <= i ? K[(size_t)i * T + k] : 0.0;
    lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', T, L, T);
    if (info != 0) {
        st = vbm_fail(err, VBM_ENUMERIC, NULL,
                      "gp_posterior: the prior covariance is not positive definite (LAPACK info "
                      "%d)",
                      (int)info);
        goto out;
    }
    /* B = I + L^T diag(d) L, symmetric positive definite exactly when K^{-1} + diag(d) is */
    for (int i = 0; i < T; i++)
        for (int k = 0; k < T; k++)
            E[(size_t)i * T + k] = d[i] * L[(size_t)i * T + k];
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, T, T, 1.0, L, T, E, T, 0.0, B, T);
    for (int i = 0; i < T; i++)
        B[(size_t)i * T + i] += 1.0;
    info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', T, B, T); /* B = M M^T, M in the lower triangle */
    if (info != 0) {
        st = vbm_fail(err, VBM_ENUMERIC, NULL,
                      "gp_posterior: the posterior precision is not positive definite (the "
                      "factors' precisions fall below J times the prior marginals' at step %d)",
                      (int)info - 1);
        goto out;
    }
    /* S = (M^{-1} L^T)^T (M^{-1} L^T): var[t] is the squared norm of column t of G = M^{-1} L^T */
    for (int i = 0; i < T; i++)
        for (int k = 0; k < T; k++)
            E[(size_t)i * T + k] = L[(size_t)k * T + i];
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, T, T, 1.0, B, T,
                E, T);
    for (int t = 0; t < T; t++)
        var[t] = 0.0;
    for (int i = 0; i < T; i++) {
        const double *g = E + (size_t)i * T;
        for (int t = 0; t < T; t++)
            var[t] += g[t] * g[t];
    }
    /* mean = L M^{-T} M^{-1} L^T b */
    cblas_dgemv(CblasRowMajor, CblasTrans, T, T, 1.0, L, T, b, 1, 0.0, v, 1);
    cblas_dtrsv(CblasRowMajor, CblasLower, CblasNoTrans, CblasNonUnit, T, B, T, v, 1);
    cblas_dtrsv(CblasRowMajor, CblasLower, CblasTrans, CblasNonUnit, T, B, T, v, 1);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, T, T, 1.0, L, T, v, 1, 0.0, mean, 1);
out:
    free(own);
    return st;
}
